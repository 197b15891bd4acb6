"""The binder of snapshot-file mode: Bindings are recorded in memory, not sent anywhere."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from extender.core.devices.attach import RESOURCE_CLAIMS
from extender.core.devices.reservation import not_allocated_to, reserved_for
from extender.state.ports import BindError, PodRef
from extender.state.store import StateStore


class MemoryBinder:
    """Binds by marking the pod bound in the store; refuses what an API server would refuse."""

    def __init__(self, state: StateStore) -> None:
        self._state = state
        self._lock = threading.Lock()
        self.bindings: dict[str, str] = {}
        """Pod ``namespace/name`` -> node, in the order binds happened."""

    def bind(self, pod: PodRef, node: str) -> None:
        with self._lock:
            raw = self._state.pod(pod.namespace, pod.name)
            if raw is None:
                raise BindError(f"pods {pod.name!r} not found in namespace {pod.namespace!r}")
            uid = (raw.get("metadata") or {}).get("uid")
            if pod.uid and uid and uid != pod.uid:
                raise BindError(f"pod {pod.key}: UID precondition failed ({uid} != {pod.uid})")
            bound = (raw.get("spec") or {}).get("nodeName")
            if bound and bound != node:
                raise BindError(f"pod {pod.key} is already assigned to node {bound!r}")
            self._state.assume_bound(pod.namespace, pod.name, node)
            self.bindings[pod.key] = node

    def reserve_claims(self, pod: PodRef, node: str, claims: Sequence[str]) -> None:
        """The claims in the store, reserved for the pod as :class:`KubeBinder` reserves
        them in the API server; refused when one is missing or not allocated to ``node``."""
        with self._lock:
            for name in claims:
                claim = self._state.find_object(pod.namespace, "ResourceClaim", name)
                if claim is None:
                    raise BindError(f"ResourceClaim {pod.namespace}/{name} not found")
                why = not_allocated_to(claim, node)
                if why is not None:
                    raise BindError(f"not binding {pod.key} to {node}: {why}")
                body = reserved_for(claim, name=pod.name, uid=pod.uid)
                if body is not None:
                    self._state.apply(RESOURCE_CLAIMS, "MODIFIED", body)
