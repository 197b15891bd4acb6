"""Turn the store's raw objects into a ``ClusterSnapshot`` through the descriptor catalog.

The catalog is the packaged one plus ``--descriptors`` files (fixed at start) merged with the
cluster's ``WorkloadDescriptor`` and Workload Map ``Karta`` objects (which change at run time);
it is recompiled only when a descriptor changes. For the same kind a native descriptor wins
over a Karta, wherever each comes from (:meth:`Catalog.of`). A cluster descriptor that does not
compile is left out and reported in :attr:`CatalogSnapshots.problems` rather than breaking
every other workload.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from extender.core.catalog import Catalog
from extender.core.cluster import build_snapshot
from extender.core.descriptor import Descriptor, DescriptorError
from extender.core.karta import compile_any
from extender.core.karta_model import is_karta_document
from extender.core.model import NodeInfo, PodInfo
from extender.core.objects import ObjectError, node_from_api, pod_from_api
from extender.core.snapshot import ClusterSnapshot
from extender.state.store import RawObject, RawState, object_key


class CatalogSnapshots:
    """A :data:`~extender.state.store.SnapshotBuilder` over a base catalog."""

    def __init__(self, base: Catalog) -> None:
        self._base = base
        self._lock = threading.Lock()
        self._catalog = base
        self._compiled_revision = -1
        self.problems: dict[str, str] = {}
        """Cluster descriptor -> why it was left out; keyed by name for a WorkloadDescriptor,
        ``Karta/<name>`` for a Karta (the two kinds may share names)."""
        # Parsed nodes and pods by raw object identity: the store replaces an object when it
        # changes, so an unchanged object is parsed once, not on every rebuild (a rebuild
        # follows every pod event or bind; re-parsing 5,000 nodes each time would dominate).
        self._nodes: dict[int, tuple[RawObject, NodeInfo | None]] = {}
        self._pods: dict[int, tuple[RawObject, PodInfo | None]] = {}

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
        with self._lock:
            nodes = _parsed(raw.nodes, self._nodes, node_from_api)
            self._nodes = nodes
            # Bare pods (no owner) stay raw: the builder resolves them as their own workload.
            owned = [p for p in raw.pods if (p.get("metadata") or {}).get("ownerReferences")]
            bare = [p for p in raw.pods if not (p.get("metadata") or {}).get("ownerReferences")]
            pods = _parsed(owned, self._pods, pod_from_api)
            self._pods = pods
        pod_values: list[PodInfo | Mapping[str, Any]] = [
            info for _, info in pods.values() if info is not None]
        pod_values.extend(bare)
        return build_snapshot(
            nodes=[info for _, info in nodes.values() if info is not None], pods=pod_values,
            objects=raw.objects, catalog=self.catalog(raw), revision=raw.revision)


T = TypeVar("T")


def _parsed(objects: tuple[RawObject, ...] | list[RawObject],
            cache: dict[int, tuple[RawObject, T | None]],
            parse: Callable[[RawObject], T]) -> dict[int, tuple[RawObject, T | None]]:
    """Each object parsed (``None`` if unreadable), reusing ``cache`` for the same object."""
    out: dict[int, tuple[RawObject, T | None]] = {}
    for obj in objects:
        hit = cache.get(id(obj))
        if hit is not None and hit[0] is obj:
            out[id(obj)] = hit
            continue
        try:
            out[id(obj)] = (obj, parse(obj))
        except ObjectError:
            out[id(obj)] = (obj, None)
    return out
