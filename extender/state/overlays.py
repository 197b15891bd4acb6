"""The pods the store shows before its pod informer does: gaps kube-scheduler leaves, since it
never tells an extender what it assumed.

* a pod that arrives in a filter request before its informer has seen it is *upserted*, so the
  core can resolve its membership;
* a pod Muster has just bound is *assumed* on its node until the informer shows it bound, so its
  resources are never counted free twice;
* the UIDs of pods the informer saw deleted are remembered (bounded), so a deleted pod that
  kube-scheduler still sends from its queue is never upserted back.

:class:`PodOverlays` holds no lock, keeps no revision and never sees a source: the store calls
it under its lock, hands it the pods its informer holds, and counts the changes itself.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

from extender.state.sources import RawObject

_TOMBSTONES = 50_000
"""Deleted pod UIDs remembered; far more than kube-scheduler can hold queued at once."""


def uid_of(obj: RawObject) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


class PodOverlays:
    """Pods by store key (``namespace/name``)."""

    def __init__(self) -> None:
        self.upserted: dict[str, RawObject] = {}
        """Pods from requests the pod informer has not shown yet."""
        self._assumed: dict[str, str] = {}
        """Pod key -> node Muster bound it to, until the pod source shows it bound."""
        self._deleted: dict[str, None] = {}
        """UIDs of pods the informer saw deleted (newest last, bounded)."""

    def upsert(self, key: str, pod: RawObject) -> bool:
        """Show ``pod`` (one the informer does not hold); whether that changed anything."""
        if uid_of(pod) in self._deleted:
            return False
        previous = self.upserted.get(key)
        if previous is not None and uid_of(previous) == uid_of(pod):
            return False
        self.upserted[key] = pod
        return True

    def assume(self, key: str, node: str) -> None:
        self._assumed[key] = node

    def settle(self, pods: Mapping[str, RawObject], key: str | None) -> None:
        """Drop what the informer's ``pods`` now show: ``key``'s overlays, or all (``None``)."""
        keys = [key] if key is not None else list(self.upserted) + list(self._assumed)
        for k in keys:
            if k in pods:
                self.upserted.pop(k, None)
                if (pods[k].get("spec") or {}).get("nodeName"):
                    self._assumed.pop(k, None)
            elif k in self._assumed and k not in self.upserted:
                # The pod was deleted after Muster bound it: nothing to assume any more.
                self._assumed.pop(k, None)

    def tombstone(self, key: str, uid: str) -> None:
        """The informer saw the pod of ``uid`` deleted."""
        if not uid:
            return
        self._deleted[uid] = None
        while len(self._deleted) > _TOMBSTONES:
            del self._deleted[next(iter(self._deleted))]
        upserted = self.upserted.get(key)
        if upserted is not None and uid_of(upserted) == uid:
            del self.upserted[key]

    def with_assumption(self, key: str, pod: RawObject) -> RawObject:
        """``pod`` on the node Muster bound it to, while its own spec names none."""
        node = self._assumed.get(key)
        if node is None or (pod.get("spec") or {}).get("nodeName"):
            return pod
        patched = copy.copy(dict(pod))
        patched["spec"] = {**(pod.get("spec") or {}), "nodeName": node}
        return patched
