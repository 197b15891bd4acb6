"""A thread-safe store of raw API objects that serves an up-to-date ``ClusterSnapshot``.

Informers (or a snapshot file) put raw objects in by *source* (one per listed kind, named
``<apiVersion>/<kind>``, e.g. ``v1/Pod``); routes ask for :meth:`StateStore.snapshot`, which is
made again only when something changed since the last one (a revision counter). The store
keeps a change log of the objects touched since: a builder that can carry a snapshot forward
(:class:`IncrementalBuilder`) gets only those, so one event costs what it changed, not a pass
over every pod. A full list, a dropped source or a descriptor change starts from scratch.
Two overlays fill
gaps kube-scheduler leaves, since it never tells an extender what it assumed:

* a pod that arrives in a filter request before its informer has seen it is *upserted*, so the
  core can resolve its membership;
* a pod Muster has just bound is *assumed* on its node until the informer shows it bound, so its
  resources are never counted free twice.

Readiness: every *expected* source must have completed a full list and be connected; until
then (and while any watch is broken) :meth:`readiness` says why the state cannot be trusted.
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast, runtime_checkable

from extender.core.devices.attach import (
    CLAIM_TEMPLATES,
    DEVICE_CLASSES,
    DEVICE_SOURCES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    DeviceLowering,
)
from extender.core.model.objects import object_key
from extender.core.model.snapshot import ClusterSnapshot

RawObject = Mapping[str, Any]

NODES = "v1/Node"
PODS = "v1/Pod"
DESCRIPTORS = "muster.dev/v1alpha1/WorkloadDescriptor"
KARTAS = "run.ai/v1alpha1/Karta"
"""NVIDIA Workload Map descriptors: held, compiled and listened to like WorkloadDescriptors."""
DESCRIPTOR_SOURCES = (DESCRIPTORS, KARTAS)
SOURCE_STATES = ("listing", "synced", "broken", "forbidden")
"""What :meth:`StateStore.source_states` says of a source: not listed yet; listed and
watched; its watch failing (the store is not ready); cannot be watched (RBAC)."""


def source_of(obj: RawObject) -> str:
    """The source name an object belongs to: ``<apiVersion>/<kind>``."""
    return f"{obj.get('apiVersion') or 'v1'}/{obj.get('kind') or ''}"


@dataclass(frozen=True)
class RawState:
    """Everything the store holds, as plain objects sorted by key (deterministic builds)."""

    nodes: tuple[RawObject, ...]
    pods: tuple[RawObject, ...]
    objects: tuple[RawObject, ...]
    """Workload objects and the intermediate owners (Jobs, StatefulSets...) of every kind."""
    descriptors: tuple[RawObject, ...]
    revision: int
    descriptors_revision: int
    """Changes only when a descriptor changes, so compiled catalogs can be cached."""
    object_keys: tuple[str, ...] = ()
    """``<source>/<key>`` of each of :attr:`objects`, as :attr:`Changes.objects` names them."""


SnapshotBuilder = Callable[[RawState], ClusterSnapshot]


@dataclass(frozen=True)
class Changes:
    """Objects changed since the last snapshot, each as it is now (``None``: gone)."""

    nodes: Mapping[str, RawObject | None]
    pods: Mapping[str, RawObject | None]
    """By store key (``namespace/name``), with the overlays applied."""
    objects: Mapping[str, RawObject | None]
    """Workload objects and owners by ``<source>/<key>``, the keys :class:`RawState` sorts by."""
    revision: int


@runtime_checkable
class IncrementalBuilder(Protocol):
    """A builder that can also carry its last snapshot forward by the changes since."""

    def __call__(self, raw: RawState) -> ClusterSnapshot: ...

    def update(self, changes: Changes) -> ClusterSnapshot: ...


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    reason: str


@dataclass
class _Source:
    objects: dict[str, RawObject]
    synced: bool = False
    healthy: bool = True
    problem: str = ""
    unwatchable: str = ""
    """Why an optional source counts as empty instead of being watched (RBAC forbids it)."""


class StateStore:
    def __init__(self, builder: SnapshotBuilder, *, expected: Iterable[str] = ()) -> None:
        self._builder = builder
        self._incremental = isinstance(builder, IncrementalBuilder)  # once: the check is slow
        self._lock = threading.RLock()
        self._sources: dict[str, _Source] = {}
        self._expected: set[str] = set(expected)
        self._upserted: dict[str, RawObject] = {}
        self._assumed: dict[str, str] = {}
        """Pod key -> node Muster bound it to, until the pod source shows it bound."""
        self._deleted: dict[str, None] = {}
        """UIDs of pods the informer saw deleted (newest last, bounded): kube-scheduler may
        still send such a pod from its queue, and upserting it would bring it back for good."""
        self._revision = 0
        self._descriptors_revision = 0
        self._cached: ClusterSnapshot | None = None
        self._cached_revision = -1
        self._log: dict[tuple[str, str], None] = {}
        """(source, key) of every object touched since the last snapshot, for the builder."""
        self._full = True
        """Something changed that the log cannot say (a full list): build from scratch."""
        self._devices = DeviceLowering()
        self._listeners: list[Callable[[], None]] = []
        self._watchers: list[Callable[[str, str, RawObject | None], None]] = []

    # --- writers (informers, snapshot files) --------------------------------------------------

    def expect(self, source: str) -> None:
        """Require ``source`` to be synced before the store reports ready."""
        with self._lock:
            self._expected.add(source)

    def forget(self, source: str) -> None:
        """Stop expecting and drop ``source`` (its kind is no longer targeted)."""
        with self._lock:
            self._expected.discard(source)
            if self._sources.pop(source, None) is not None:
                self._changed(source)

    def replace(self, source: str, objects: Iterable[RawObject]) -> None:
        """A full list: the source now holds exactly ``objects`` and counts as synced."""
        with self._lock:
            entry = self._sources.setdefault(source, _Source(objects={}))
            entry.objects = {object_key(o): o for o in objects}
            entry.synced, entry.healthy, entry.problem = True, True, ""
            entry.unwatchable = ""
            self._changed(source)
            self._tell(source, "RELIST", None)

    def apply(self, source: str, event_type: str, obj: RawObject) -> None:
        """One watch event: ``ADDED``, ``MODIFIED`` or ``DELETED``."""
        with self._lock:
            entry = self._sources.setdefault(source, _Source(objects={}))
            key = object_key(obj)
            before = entry.objects.get(key)
            if event_type == "DELETED":
                entry.objects.pop(key, None)
                if source == PODS:
                    self._tombstone(key, _uid(obj))
            else:
                entry.objects[key] = obj
            if source == RESOURCE_CLAIMS:
                self._claim_changed(before, None if event_type == "DELETED" else obj)
            else:
                self._changed(source, key)
            self._tell(source, event_type, obj)

    def load(self, objects: Iterable[RawObject]) -> None:
        """Put objects of any kinds in at once (a snapshot file), each under its own source."""
        grouped: dict[str, list[RawObject]] = {}
        for obj in objects:
            grouped.setdefault(source_of(obj), []).append(obj)
        with self._lock:
            for source in (NODES, PODS, DESCRIPTORS):
                grouped.setdefault(source, [])
            for source, items in sorted(grouped.items()):
                self.replace(source, items)

    def mark_synced(self, source: str) -> None:
        """Count ``source`` as synced without objects (a step that must finish before ready)."""
        with self._lock:
            self._sources.setdefault(source, _Source(objects={})).synced = True

    def synced(self, source: str) -> bool:
        with self._lock:
            entry = self._sources.get(source)
            return entry is not None and entry.synced

    def set_health(self, source: str, *, healthy: bool, problem: str = "") -> None:
        with self._lock:
            entry = self._sources.setdefault(source, _Source(objects={}))
            entry.healthy, entry.problem = healthy, ("" if healthy else problem)

    def set_unwatchable(self, source: str, reason: str) -> None:
        """``source`` is optional and cannot be watched (RBAC forbids listing it): it holds
        nothing and does not keep the store from being ready, but readiness names it, since
        its workloads are then not gang-scheduled. The next full list clears it."""
        with self._lock:
            entry = self._sources.setdefault(source, _Source(objects={}))
            if entry.objects:
                entry.objects = {}
                self._changed(source)
            entry.synced, entry.healthy, entry.problem = True, True, ""
            entry.unwatchable = reason

    def on_descriptors_changed(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (outside the lock) after any descriptor changes."""
        with self._lock:
            self._listeners.append(callback)

    def on_cluster_changed(self, callback: Callable[[str, str, RawObject | None], None],
                           ) -> None:
        """Call ``callback(source, kind, obj)`` after a pod or node changes: a watch event
        (``ADDED``, ``MODIFIED``, ``DELETED`` and the object) or a full list (``RELIST`` and
        ``None``). It runs on the writer's thread with the store's lock held: it must be quick
        and must not call back into the store (the housekeeper's nudge only sets an event)."""
        with self._lock:
            self._watchers.append(callback)

    # --- overlays (the server) ---------------------------------------------------------------

    def upsert_pod(self, pod: RawObject) -> None:
        """Make a pod from a scheduler request visible until its informer reports it."""
        key = object_key(pod)
        with self._lock:
            if _uid(pod) in self._deleted:
                return
            known = self._sources.get(PODS)
            if known is not None and key in known.objects:
                return
            previous = self._upserted.get(key)
            if previous is not None and _uid(previous) == _uid(pod):
                return
            self._upserted[key] = pod
            self._revision += 1
            self._log[(PODS, key)] = None

    def lowered_pod(self, pod: RawObject) -> RawObject:
        """``pod`` with its DRA claims' devices attached, as the snapshot holds pods (a pod
        from a scheduler request the informer has not shown yet)."""
        with self._lock:
            if self._device_view():
                self._full = True  # the next snapshot sees every node's new supply
            return self._devices.pod(pod)

    def assume_bound(self, namespace: str, name: str, node: str) -> None:
        with self._lock:
            self._assumed[f"{namespace}/{name}"] = node
            self._revision += 1
            self._log[(PODS, f"{namespace}/{name}")] = None

    def pod(self, namespace: str, name: str) -> RawObject | None:
        key = f"{namespace}/{name}"
        with self._lock:
            known = self._sources.get(PODS)
            if known is not None and key in known.objects:
                return self._with_assumption(key, known.objects[key])
            upserted = self._upserted.get(key)
            return self._with_assumption(key, upserted) if upserted is not None else None

    def find_object(self, namespace: str, kind: str, name: str) -> RawObject | None:
        """A workload or owner object by kind, whatever its API version (owner walks)."""
        key = f"{namespace}/{name}"
        with self._lock:
            for source, entry in self._sources.items():
                if source.rsplit("/", 1)[-1] == kind and source not in (NODES, PODS):
                    found = entry.objects.get(key)
                    if found is not None:
                        return found
        return None

    # --- readers -----------------------------------------------------------------------------

    def source_states(self) -> dict[str, str]:
        """Each expected source's state, one of :data:`SOURCE_STATES`, for metrics."""
        with self._lock:
            out = {}
            for source in sorted(self._expected):
                entry = self._sources.get(source)
                if entry is None or not entry.synced:
                    out[source] = "listing"
                elif not entry.healthy:
                    out[source] = "broken"
                elif entry.unwatchable:
                    out[source] = "forbidden"
                else:
                    out[source] = "synced"
            return out

    def readiness(self) -> Readiness:
        with self._lock:
            for source in sorted(self._expected):
                entry = self._sources.get(source)
                if entry is None or not entry.synced:
                    return Readiness(False, f"{source} not listed yet")
                if not entry.healthy:
                    return Readiness(False, f"{source}: {entry.problem or 'watch broken'}")
            unwatched = [f"{s} ({e.unwatchable})" for s, e in sorted(self._sources.items())
                         if s in self._expected and e.unwatchable]
            if unwatched:
                return Readiness(True, "synced, but cannot watch " + "; ".join(unwatched)
                                 + ": their workloads are not gang-scheduled")
            return Readiness(True, "all sources synced")

    @property
    def revision(self) -> int:
        with self._lock:
            return self._revision

    def raw(self) -> RawState:
        with self._lock:
            return self._raw()

    def snapshot(self) -> ClusterSnapshot:
        """The current snapshot; rebuilt only when the revision moved."""
        with self._lock:
            if self._cached is None or self._cached_revision != self._revision:
                builder = self._builder
                if self._device_view():  # new device signatures: every node's supply moves
                    self._full = True
                if not self._full and self._cached is not None and self._incremental:
                    self._cached = cast("IncrementalBuilder", builder).update(self._changes())
                else:
                    self._cached = builder(self._raw())
                self._log, self._full = {}, False
                self._cached_revision = self._revision
            return self._cached

    # --- internals -----------------------------------------------------------------------------

    def _changed(self, source: str, key: str | None = None) -> None:
        self._revision += 1
        if source in DEVICE_SOURCES:
            self._devices.invalidate(source)
        if key is None or source in DESCRIPTOR_SOURCES or source in DEVICE_SOURCES:
            self._full = True
        else:
            self._log[(source, key)] = None
        if source == PODS:
            self._settle_overlays(key)
        if source in DESCRIPTOR_SOURCES:
            self._descriptors_revision += 1
            listeners = list(self._listeners)
            # Listeners start or stop informers; call them without our lock held so they
            # may write back into the store from their own threads.
            self._lock.release()
            try:
                for callback in listeners:
                    callback()
            finally:
                self._lock.acquire()

    def _claim_changed(self, before: RawObject | None, after: RawObject | None) -> None:
        """A ResourceClaim changed: only the nodes holding its devices and the pods using it
        are built again (a claim's allocation and reservation change as each of its pods is
        scheduled), unless the lowering cannot say which (then everything is)."""
        touched = self._devices.claim_touches(before, after)
        if touched is None:
            self._changed(RESOURCE_CLAIMS)
            return
        self._revision += 1
        nodes, pods = touched
        self._devices.invalidate(RESOURCE_CLAIMS, nodes)
        for node in nodes:
            self._log[(NODES, node)] = None
        for pod in pods:
            self._log[(PODS, pod)] = None

    def _tell(self, source: str, kind: str, obj: RawObject | None) -> None:
        if source in (PODS, NODES):
            for watcher in self._watchers:
                watcher(source, kind, obj)

    def _settle_overlays(self, key: str | None) -> None:
        pods = self._sources[PODS].objects if PODS in self._sources else {}
        keys = [key] if key is not None else list(self._upserted) + list(self._assumed)
        for k in keys:
            if k in pods:
                self._upserted.pop(k, None)
                if (pods[k].get("spec") or {}).get("nodeName"):
                    self._assumed.pop(k, None)
            elif k in self._assumed and k not in self._upserted:
                # The pod was deleted after Muster bound it: nothing to assume any more.
                self._assumed.pop(k, None)

    def _tombstone(self, key: str, uid: str) -> None:
        if not uid:
            return
        self._deleted[uid] = None
        while len(self._deleted) > _TOMBSTONES:
            del self._deleted[next(iter(self._deleted))]
        upserted = self._upserted.get(key)
        if upserted is not None and _uid(upserted) == uid:
            del self._upserted[key]

    def _with_assumption(self, key: str, pod: RawObject) -> RawObject:
        node = self._assumed.get(key)
        if node is None or (pod.get("spec") or {}).get("nodeName"):
            return pod
        patched = copy.copy(dict(pod))
        patched["spec"] = {**(pod.get("spec") or {}), "nodeName": node}
        return patched

    def _device_view(self) -> bool:
        """Bring the DRA lowering up to date; whether its device catalog was rebuilt (or went
        away), which changes every node's supply."""
        def items(source: str) -> Iterable[RawObject]:
            entry = self._sources.get(source)
            return entry.objects.values() if entry is not None else ()

        if any(items(s) for s in DEVICE_SOURCES):
            return self._devices.refresh(
                slices=items(RESOURCE_SLICES), classes=items(DEVICE_CLASSES),
                claims=items(RESOURCE_CLAIMS), templates=items(CLAIM_TEMPLATES),
                pods=itertools.chain(items(PODS), self._upserted.values()))  # lazily
        return self._devices.clear()

    def _changes(self) -> Changes:
        self._device_view()
        lower_node, lower_pod = self._devices.node, self._devices.pod
        lower_workload = self._devices.workload
        nodes: dict[str, RawObject | None] = {}
        pods: dict[str, RawObject | None] = {}
        objects: dict[str, RawObject | None] = {}
        for source, key in self._log:
            entry = self._sources.get(source)
            found = entry.objects.get(key) if entry is not None else None
            if source == NODES:
                nodes[key] = None if found is None else lower_node(found)
            elif source == PODS:
                found = found if found is not None else self._upserted.get(key)
                pods[key] = None if found is None else lower_pod(self._with_assumption(key, found))
            elif source in DEVICE_SOURCES:
                continue
            else:
                objects[f"{source}/{key}"] = None if found is None else lower_workload(found)
        return Changes(nodes=nodes, pods=pods, objects=objects, revision=self._revision)

    def _raw(self) -> RawState:
        def items(source: str) -> dict[str, RawObject]:
            entry = self._sources.get(source)
            return dict(entry.objects) if entry is not None else {}

        self._device_view()
        lower_node, lower_pod = self._devices.node, self._devices.pod
        pods = {**self._upserted, **items(PODS)}
        objects: dict[str, RawObject] = {}
        for source in sorted(self._sources):
            if source not in (NODES, PODS, *DESCRIPTOR_SOURCES, *DEVICE_SOURCES):
                objects.update({f"{source}/{k}": self._devices.workload(v)
                                for k, v in items(source).items()})
        return RawState(
            nodes=tuple(lower_node(v) for _, v in sorted(items(NODES).items())),
            pods=tuple(lower_pod(self._with_assumption(k, v)) for k, v in sorted(pods.items())),
            objects=tuple(v for _, v in sorted(objects.items())),
            object_keys=tuple(sorted(objects)),
            descriptors=tuple(v for source in DESCRIPTOR_SOURCES
                              for _, v in sorted(items(source).items())),
            revision=self._revision,
            descriptors_revision=self._descriptors_revision,
        )


_TOMBSTONES = 50_000
"""Deleted pod UIDs remembered; far more than kube-scheduler can hold queued at once."""


def _uid(obj: RawObject) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")

# object_key: the store's keys, which the snapshot builders key by too; the DRA sources
# (DEVICE_SOURCES and the four it holds), which the informers list.
__all__ = [
    "CLAIM_TEMPLATES", "DESCRIPTORS", "DESCRIPTOR_SOURCES", "DEVICE_CLASSES", "DEVICE_SOURCES",
    "KARTAS", "NODES", "PODS", "RESOURCE_CLAIMS", "RESOURCE_SLICES", "SOURCE_STATES", "Changes",
    "IncrementalBuilder", "RawObject", "RawState", "Readiness", "SnapshotBuilder", "StateStore",
    "object_key", "source_of",
]
