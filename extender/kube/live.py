"""Live mode: connect, start informers for everything the catalog needs, keep them in step.

Fixed informers watch Nodes, Pods, WorkloadDescriptors and Workload Map ``Karta``s (both
optional: a cluster without either CRD lists them as empty). Dynamic ones watch every kind a
descriptor targets plus the owner kinds between pods and workloads (Jobs, StatefulSets...), as
discovery names them. A reconciler thread recomputes that set whenever a descriptor changes
(no restart needed) and every ``rediscover`` seconds (a CRD installed later is picked up).
Every watched source is *expected* by the store: the extender is not ready until all listed,
and not before one reconcile has run on the listed descriptors (otherwise it could report
ready while the informers of the catalog's kinds are not even started).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from extender.core.workloads.catalog import split_api_version
from extender.kube.binder import KubeBinder
from extender.kube.client import Connection, KubeError, ResourceType, connect
from extender.kube.events import KubeEvents
from extender.kube.evict import KubeEvictor
from extender.kube.gangobjects import KubeGangObjects
from extender.kube.informer import Backoff, Informer, source_name
from extender.kube.reader import DEVICE_TYPES
from extender.kube.requeue import KubeRequeuer
from extender.kube.ungate import KubeUngater
from extender.state.build import CatalogSnapshots
from extender.state.store import DESCRIPTORS, DEVICE_SOURCES, KARTAS, NODES, PODS, StateStore

log = logging.getLogger("muster.live")

RECONCILED = "muster/reconciled"
"""A pseudo source: synced once the informers for the listed descriptors' kinds exist."""

NODE_TYPE = ResourceType(group="", version="v1", kind="Node", plural="nodes", namespaced=False)
POD_TYPE = ResourceType(group="", version="v1", kind="Pod", plural="pods", namespaced=True)
DESCRIPTOR_TYPE = ResourceType(group="muster.dev", version="v1alpha1", kind="WorkloadDescriptor",
                               plural="workloaddescriptors", namespaced=False)
KARTA_TYPE = ResourceType(group="run.ai", version="v1alpha1", kind="Karta", plural="kartas",
                          namespaced=False)
"""NVIDIA Workload Map descriptors (``kartas.run.ai``, cluster-scoped), read like ours."""

FIXED = ((NODE_TYPE, False), (POD_TYPE, False), (DESCRIPTOR_TYPE, True), (KARTA_TYPE, True),
         *((t, True) for t in DEVICE_TYPES))
"""The informers every Muster runs besides the catalog's kinds (type, whether it may be
absent: a cluster without the CRD, or without ``resource.k8s.io/v1``)."""
OWNERS_ONLY = ((DESCRIPTOR_TYPE, True), (KARTA_TYPE, True))
"""What the webhook's own process watches besides the catalog's kinds: no pods, no nodes
(whether a new pod joins a gang depends only on its owners and the descriptors)."""


class Watches:
    """The set of running informers, reconciled against the catalog."""

    def __init__(self, conn: Connection, store: StateStore, snapshots: CatalogSnapshots, *,
                 backoff: Backoff | None = None, watch_seconds: int = 60,
                 rediscover: float = 60.0,
                 fixed: tuple[tuple[ResourceType, bool], ...] = FIXED) -> None:
        self.conn = conn
        self.fixed = fixed
        self.store = store
        self.snapshots = snapshots
        self.backoff = backoff or Backoff()
        self.watch_seconds = watch_seconds
        self.rediscover = rediscover
        self.informers: dict[str, Informer] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="reconciler", daemon=True)

    def start(self) -> Watches:
        for rtype, absent_ok in self.fixed:
            self._start(rtype, absent_ok=absent_ok)
        self.store.expect(RECONCILED)
        self.store.on_descriptors_changed(self._wake.set)
        self._thread.start()
        self._wake.set()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        with self._lock:
            for informer in self.informers.values():
                informer.stop()

    def _start(self, rtype: ResourceType, *, absent_ok: bool = False) -> None:
        source = source_name(rtype)
        self.store.expect(source)
        self.informers[source] = Informer(
            self.conn, rtype, self.store, backoff=self.backoff,
            watch_seconds=self.watch_seconds, absent_ok=absent_ok).start()

    def _loop(self) -> None:
        delay = self.rediscover
        while not self._stop.is_set():
            self._wake.wait(delay)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.reconcile()
                delay = self.rediscover
            except KubeError as err:  # discovery failed: the informers report health
                log.warning("event=reconcile-failed problem=%r", str(err))
                # Until a reconcile succeeds the extender is not ready: retry soon.
                delay = min(self.rediscover, self.backoff.maximum)

    def wanted(self) -> dict[str, ResourceType]:
        """Source name -> type, for every workload and owner kind the catalog needs."""
        self.conn._types = None  # rediscover: CRDs come and go
        served = self.conn.resource_types()
        by_kind: dict[str, list[ResourceType]] = {}
        for rtype in served.values():
            by_kind.setdefault(rtype.kind, []).append(rtype)
        catalog = self.snapshots.catalog(self.store.raw())
        out: dict[str, ResourceType] = {}
        for d in catalog.descriptors:
            target = served.get((d.target.group, d.target.kind))
            if target is not None:
                out[source_name(target)] = target
            for owner in d.pods.owners:
                for rtype in by_kind.get(owner, ()):
                    out[source_name(rtype)] = rtype
        for fixed in (NODES, PODS, DESCRIPTORS, KARTAS, *DEVICE_SOURCES):
            out.pop(fixed, None)
        return out

    def reconcile(self) -> None:
        descriptors_listed = self.store.synced(DESCRIPTORS) and self.store.synced(KARTAS)
        wanted = self.wanted()
        with self._lock:
            current = {s for s in self.informers
                       if s not in (NODES, PODS, DESCRIPTORS, KARTAS, *DEVICE_SOURCES)}
            for source in sorted(current - set(wanted)):
                self.informers.pop(source).stop()
                self.store.forget(source)
                log.info("source=%s event=unwatched", source)
            for source in sorted(set(wanted) - current):
                group, _ = split_api_version(source.rsplit("/", 1)[0])
                self._start(wanted[source], absent_ok=True)
                log.info("source=%s event=watched group=%s", source, group or "core")
        if descriptors_listed:
            self.store.mark_synced(RECONCILED)


def start_owner_watches(store: StateStore, snapshots: CatalogSnapshots, *,
                        kubeconfig: str | None, context: str | None) -> Watches:
    """Informers for the descriptors and every workload and owner kind they name, no pods:
    what the admission webhook's process decides from."""
    return Watches(connect(kubeconfig, context), store, snapshots, fixed=OWNERS_ONLY).start()


@dataclass
class LiveState:
    conn: Connection
    watches: Watches
    binder: KubeBinder
    events: KubeEvents
    requeuer: KubeRequeuer
    ungater: KubeUngater
    evictor: KubeEvictor
    gang_objects: KubeGangObjects


def start_live(store: StateStore, snapshots: CatalogSnapshots, *, kubeconfig: str | None,
               context: str | None, gate: str) -> LiveState:
    conn = connect(kubeconfig, context)
    watches = Watches(conn, store, snapshots).start()
    return LiveState(conn=conn, watches=watches, binder=KubeBinder(conn),
                     events=KubeEvents(conn), requeuer=KubeRequeuer(conn),
                     ungater=KubeUngater(conn, gate=gate),
                     evictor=KubeEvictor(conn), gang_objects=KubeGangObjects(conn))
