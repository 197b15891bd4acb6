"""Turn the store's raw objects into a ``ClusterSnapshot`` through the descriptor catalog.

The catalog is the packaged one plus ``--descriptors`` files (fixed at start) merged with the
cluster's ``WorkloadDescriptor`` and Workload Map ``Karta`` objects (which change at run time);
it is recompiled only when a descriptor changes. For the same kind a native descriptor wins
over a Karta, wherever each comes from (:meth:`Catalog.of`). A cluster descriptor that does not
compile is left out and reported in :attr:`CatalogSnapshots.problems` rather than breaking
every other workload.
"""

from __future__ import annotations

import logging
import threading

from extender.core.gang.reindex import IndexKeeper
from extender.core.karta.compile import compile_any
from extender.core.karta.model import is_karta_document
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.workloads.catalog import Catalog
from extender.core.workloads.cluster import BuildMemo, build_snapshot
from extender.core.workloads.descriptor import Descriptor, DescriptorError
from extender.core.workloads.workload import DEFAULT_LIMITS, WorkloadLimits
from extender.state.store import RawState, object_key

log = logging.getLogger("muster.state")


class CatalogSnapshots:
    """A :data:`~extender.state.store.SnapshotBuilder` over a base catalog."""

    def __init__(self, base: Catalog, limits: WorkloadLimits = DEFAULT_LIMITS) -> None:
        self._base = base
        self._limits = limits
        self._lock = threading.Lock()
        self._catalog = base
        self._compiled_revision = -1
        self.problems: dict[str, str] = {}
        """Cluster descriptor -> why it was left out; keyed by name for a WorkloadDescriptor,
        ``Karta/<name>`` for a Karta (the two kinds may share names)."""
        # Nodes, pods and workloads parsed and resolved once per raw object: the store
        # replaces an object when it changes, and a rebuild follows every pod event or bind
        # (re-deriving 5,000 nodes and their pods each time would take over a second).
        self._memo = BuildMemo()
        self._index = IndexKeeper()

    def catalog(self, raw: RawState) -> Catalog:
        with self._lock:
            if raw.descriptors_revision != self._compiled_revision:
                found: list[Descriptor] = []
                problems: dict[str, str] = {}
                for obj in raw.descriptors:
                    karta = is_karta_document(obj)
                    try:
                        found.append(compile_any(dict(obj), source="cluster"))
                    except DescriptorError as err:
                        key = f"Karta/{object_key(obj)}" if karta else object_key(obj)
                        problems[key] = str(err)
                self._catalog = self._base.merged(found)
                self.problems = problems
                self._compiled_revision = raw.descriptors_revision
            return self._catalog

    def __call__(self, raw: RawState) -> ClusterSnapshot:
        catalog = self.catalog(raw)
        with self._lock:
            snapshot = build_snapshot(nodes=raw.nodes, pods=raw.pods, objects=raw.objects,
                                      catalog=catalog, revision=raw.revision, memo=self._memo,
                                      limits=self._limits)
            # Objects left out (unreadable, beyond the limits): once each, so that a hostile
            # object is visible in the log, not only absent from decisions.
            for problem in self._memo.take_fresh():
                log.warning("event=object-skipped problem=%r", problem[:500])
            # The capacity index too, node by node from the last one (see IndexKeeper).
            self._index.keep(snapshot)
            return snapshot
