"""A thread-safe store of raw API objects that serves an up-to-date ``ClusterSnapshot``.

Informers (or a snapshot file) put raw objects in by *source* (one per listed kind, named
``<apiVersion>/<kind>``, e.g. ``v1/Pod``); routes ask for :meth:`StateStore.snapshot`, which is
made again only when something changed since the last one (a revision counter). The store
keeps a change log of the objects touched since: a builder that can carry a snapshot forward
(:class:`IncrementalBuilder`) gets only those, so one event costs what it changed, not a pass
over every pod. A full list, a dropped source or a descriptor change starts from scratch.

The store owns the lock, the revision, the change log, the cached snapshot and the listeners;
it does no network I/O. Its parts, each called under its lock: what each source holds and the
readiness they add up to (:mod:`.sources`); the pods shown before their informer shows them,
from requests or just bound (:mod:`.overlays`); what a builder receives, read out of the
sources with the overlays applied and DRA lowered in (:mod:`.raw`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import cast

from extender.core.devices.attach import DEVICE_SOURCES, RESOURCE_CLAIMS, DeviceLowering
from extender.core.model.objects import object_key
from extender.core.model.snapshot import ClusterSnapshot
from extender.state.overlays import PodOverlays, uid_of
from extender.state.raw import (
    Changes,
    IncrementalBuilder,
    RawState,
    SnapshotBuilder,
    changes_of,
    raw_state,
    refresh_devices,
)
from extender.state.sources import (
    DESCRIPTOR_SOURCES,
    DESCRIPTORS,
    KARTAS,
    NODES,
    PODS,
    SOURCE_STATES,
    RawObject,
    Readiness,
    Source,
    readiness,
    source_of,
    source_states,
)


class StateStore:
    def __init__(self, builder: SnapshotBuilder, *, expected: Iterable[str] = ()) -> None:
        self._builder = builder
        self._incremental = isinstance(builder, IncrementalBuilder)  # once: the check is slow
        self._lock = threading.RLock()
        self._sources: dict[str, Source] = {}
        self._expected: set[str] = set(expected)
        self._overlays = PodOverlays()
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
            entry = self._sources.setdefault(source, Source(objects={}))
            entry.objects = {object_key(o): o for o in objects}
            entry.synced, entry.healthy, entry.problem = True, True, ""
            entry.unwatchable = ""
            self._changed(source)
            self._tell(source, "RELIST", None)

    def apply(self, source: str, event_type: str, obj: RawObject) -> None:
        """One watch event: ``ADDED``, ``MODIFIED`` or ``DELETED``."""
        with self._lock:
            entry = self._sources.setdefault(source, Source(objects={}))
            key = object_key(obj)
            before = entry.objects.get(key)
            if event_type == "DELETED":
                entry.objects.pop(key, None)
                if source == PODS:
                    self._overlays.tombstone(key, uid_of(obj))
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
            self._sources.setdefault(source, Source(objects={})).synced = True

    def synced(self, source: str) -> bool:
        with self._lock:
            entry = self._sources.get(source)
            return entry is not None and entry.synced

    def set_health(self, source: str, *, healthy: bool, problem: str = "") -> None:
        with self._lock:
            entry = self._sources.setdefault(source, Source(objects={}))
            entry.healthy, entry.problem = healthy, ("" if healthy else problem)

    def set_unwatchable(self, source: str, reason: str) -> None:
        """``source`` is optional and cannot be watched (RBAC forbids listing it): it holds
        nothing and does not keep the store from being ready, but readiness names it, since
        its workloads are then not gang-scheduled. The next full list clears it."""
        with self._lock:
            entry = self._sources.setdefault(source, Source(objects={}))
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
            known = self._sources.get(PODS)
            if (known is None or key not in known.objects) and self._overlays.upsert(key, pod):
                self._revision += 1
                self._log[(PODS, key)] = None

    def lowered_pod(self, pod: RawObject) -> RawObject:
        """``pod`` with its DRA claims' devices attached, as the snapshot holds pods (a pod
        from a scheduler request the informer has not shown yet)."""
        with self._lock:
            if self._refresh_devices():
                self._full = True  # the next snapshot sees every node's new supply
            return self._devices.pod(pod)

    def assume_bound(self, namespace: str, name: str, node: str) -> None:
        with self._lock:
            self._overlays.assume(f"{namespace}/{name}", node)
            self._revision += 1
            self._log[(PODS, f"{namespace}/{name}")] = None

    def pod(self, namespace: str, name: str) -> RawObject | None:
        key = f"{namespace}/{name}"
        with self._lock:
            known = self._sources.get(PODS)
            if known is not None and key in known.objects:
                return self._overlays.with_assumption(key, known.objects[key])
            upserted = self._overlays.upserted.get(key)
            return self._overlays.with_assumption(key, upserted) if upserted is not None else None

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
            return source_states(self._sources, self._expected)

    def readiness(self) -> Readiness:
        """Whether every expected source is listed and watched, and why not
        (:func:`.sources.readiness`)."""
        with self._lock:
            return readiness(self._sources, self._expected)

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
                if self._refresh_devices():  # new device signatures: every node's supply moves
                    self._full = True
                if not self._full and self._cached is not None and self._incremental:
                    changes = changes_of(self._log, self._sources, self._overlays,
                                         self._devices, revision=self._revision)
                    self._cached = cast("IncrementalBuilder", builder).update(changes)
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
            pods = self._sources[PODS].objects if PODS in self._sources else {}
            self._overlays.settle(pods, key)
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

    def _refresh_devices(self) -> bool:
        return refresh_devices(self._devices, self._sources, self._overlays)

    def _raw(self) -> RawState:
        return raw_state(self._sources, self._overlays, self._devices, revision=self._revision,
                         descriptors_revision=self._descriptors_revision)


# Names defined by the store's parts and the core that the builders, the adapters and their
# tests import from here: the source names, the builder's interface, the store's keys.
__all__ = [
    "DESCRIPTORS", "DEVICE_SOURCES", "KARTAS", "NODES", "PODS", "SOURCE_STATES", "Changes",
    "RawState", "SnapshotBuilder", "StateStore", "object_key", "source_of",
]
