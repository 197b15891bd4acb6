"""Carry a snapshot's capacity index over to the next snapshot of the same source.

A live cluster changes one pod at a time, but :func:`~extender.core.gang.capacity.index_of` derives
the index (every node's free capacity after its pods) from scratch for every new snapshot:
at 5,000 nodes a pass over every node and pod, paid by the first filter after each event.
:class:`IndexKeeper` recomputes only the nodes whose node object or set of pods changed,
reuses the constraint memo while no node changed, keeps the capacity classes placement ranks
in step, and attaches the result to the snapshot, so decisions find it there. What it
computes is exactly what the core would derive (a test checks this).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from extender.core.gang.capacity import (
    Capacities,
    Classes,
    NodeCapacity,
    SnapshotIndex,
    attach_empty,
    attach_index,
    classes_of,
    moved_classes,
    node_capacity,
)
from extender.core.model.resources import GPU
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import NodeInfo, NodeName, PodInfo


class IndexKeeper:
    """Owned by one snapshot source; feed it each snapshot in order. Not thread-safe."""

    def __init__(self, *, gpu: str = GPU) -> None:
        self.gpu = gpu
        self._nodes: Mapping[NodeName, NodeInfo] = {}
        self._on: dict[NodeName, list[PodInfo]] = {}
        self._index: SnapshotIndex | None = None
        self._classes: Classes | None = None
        self._last: ClusterSnapshot | None = None
        self.recomputed = 0
        """Nodes recomputed by the last :meth:`keep` (for tests and curiosity)."""

    def keep(self, snapshot: ClusterSnapshot) -> SnapshotIndex:
        # Pods in the snapshot's own (deterministic) order: comparing a node's pods with the
        # last build's is then a pass by identity, with no sorting.
        on: dict[NodeName, list[PodInfo]] = {}
        for pod in snapshot.pods.values():
            if pod.holds_resources and pod.node_name is not None:
                on.setdefault(pod.node_name, []).append(pod)
        previous = self._index
        base: dict[NodeName, NodeCapacity] = {}
        pods_on: dict[NodeName, tuple[str, ...]] = {}
        changed: list[NodeName] = []
        known, before = self._nodes, self._on
        for name, node in snapshot.nodes.items():
            here = on.get(name, _NO_PODS)
            if (previous is not None and known.get(name) is node
                    and _same(before.get(name, _NO_PODS), here)):
                base[name] = previous.base[name]
                if here:
                    pods_on[name] = previous.pods_on[name]
            else:
                base[name] = node_capacity(node, here, gpu=self.gpu)
                if here:
                    pods_on[name] = tuple(sorted(p.uid for p in here))
                changed.append(name)
        for name, here in on.items():  # pods on nodes the snapshot does not have
            if name not in base:
                pods_on[name] = tuple(sorted(p.uid for p in here))
        self.recomputed = len(changed)
        gang_pods: dict[str, list[str]] = {}
        for uid, member in snapshot.memberships.items():
            if member.gang is not None and uid in snapshot.pods:
                gang_pods.setdefault(member.gang, []).append(uid)
        same_nodes = (previous is not None and len(self._nodes) == len(snapshot.nodes)
                      and all(self._nodes.get(n) is node for n, node in snapshot.nodes.items()))
        index = SnapshotIndex(
            base=Capacities(MappingProxyType(base)),
            pods_on=MappingProxyType(pods_on),
            gang_pods=MappingProxyType({k: tuple(sorted(v)) for k, v in gang_pods.items()}),
            # Which nodes a pod shape may use depends on the nodes alone.
            eligible=previous.eligible if same_nodes and previous is not None else {},
        )
        classes = self._next_classes(previous, index, changed, same_nodes)
        index = SnapshotIndex(base=Capacities(index.base, classes=classes),
                              pods_on=index.pods_on, gang_pods=index.gang_pods,
                              eligible=index.eligible)
        attach_index(snapshot, index, gpu=self.gpu)
        empty = None if self._last is None else self._last.derived.get(f"empty:{self.gpu}")
        if same_nodes and isinstance(empty, Capacities):
            attach_empty(snapshot, empty, gpu=self.gpu)
        self._last = snapshot
        self._nodes, self._on, self._index, self._classes = snapshot.nodes, on, index, classes
        return index

    def _next_classes(self, previous: SnapshotIndex | None, index: SnapshotIndex,
                      changed: list[NodeName], same_nodes: bool) -> Classes:
        if previous is None or self._classes is None or not same_nodes:
            return classes_of(index.base)
        if not changed:
            return self._classes
        # ``same_nodes``: every changed node is in both the previous base and this one.
        before, after = previous.base, index.base
        return moved_classes(self._classes, before,
                             {n: after[n] for n in changed if after[n] != before[n]})


_NO_PODS: tuple[PodInfo, ...] = ()


def _same(a: Sequence[PodInfo], b: Sequence[PodInfo]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))
