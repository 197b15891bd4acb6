"""Turn the store's raw objects into a ``ClusterSnapshot`` through the descriptor catalog.

The catalog is the packaged one plus ``--descriptors`` files (fixed at start) merged with the
cluster's ``WorkloadDescriptor`` objects (which change at run time); it is recompiled only when
a descriptor changes. A cluster descriptor that does not compile is left out and reported in
:attr:`SnapshotBuilder.problems` rather than breaking every other workload.
"""

from __future__ import annotations

import threading

from extender.core.catalog import Catalog
from extender.core.cluster import build_snapshot
from extender.core.descriptor import Descriptor, DescriptorError, compile_descriptor
from extender.core.snapshot import ClusterSnapshot
from extender.state.store import RawState, object_key


class CatalogSnapshots:
    """A :data:`~extender.state.store.SnapshotBuilder` over a base catalog."""

    def __init__(self, base: Catalog) -> None:
        self._base = base
        self._lock = threading.Lock()
        self._catalog = base
        self._compiled_revision = -1
        self.problems: dict[str, str] = {}
        """Cluster descriptor name -> why it was left out."""

    def catalog(self, raw: RawState) -> Catalog:
        with self._lock:
            if raw.descriptors_revision != self._compiled_revision:
                found: list[Descriptor] = []
                problems: dict[str, str] = {}
                for obj in raw.descriptors:
                    try:
                        found.append(compile_descriptor(dict(obj)))
                    except DescriptorError as err:
                        problems[object_key(obj)] = str(err)
                self._catalog = self._base.merged(found)
                self.problems = problems
                self._compiled_revision = raw.descriptors_revision
            return self._catalog

    def __call__(self, raw: RawState) -> ClusterSnapshot:
        return build_snapshot(nodes=raw.nodes, pods=raw.pods, objects=raw.objects,
                              catalog=self.catalog(raw), revision=raw.revision)
