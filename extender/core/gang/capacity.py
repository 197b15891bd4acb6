"""Free capacity across a snapshot's nodes: the base capacity per node, derived once per
snapshot (:func:`index_of`), nodes grouped by identical free capacity (:class:`Capacities`),
and a few nodes changed over a base without copying it (:class:`CapacityView`).

A node's free capacity is its allocatable minus the requests of the pods bound to it that are
not terminal. The ledger then subtracts pods in flight and reservations held for gangs (see
:mod:`extender.core.gang.ledger`); this module only knows the arithmetic. The values are
:mod:`~extender.core.gang.nodecapacity`'s and the per-node arithmetic
:mod:`~extender.core.gang.charging`'s, both re-exported here. Nothing here is ever summed across
nodes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from extender.core.gang.charging import charge_pod, count_fitting, fits, node_capacity, take
from extender.core.gang.nodecapacity import (
    DEVICE,
    MAX_DEVICES,
    Demand,
    NodeCapacity,
    demand_of,
    describe_free,
    empty_capacity,
)
from extender.core.model.resources import GPU
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.sortednames import SortedNames
from extender.core.model.values import Gang, NodeName, PodInfo, PodShape

__all__ = [
    "DEVICE",
    "GATED",
    "MAX_DEVICES",
    "STAMPS",
    "Capacities",
    "CapacityView",
    "Classes",
    "Demand",
    "NodeCapacity",
    "SnapshotIndex",
    "attach_empty",
    "attach_gang_stamps",
    "attach_gated",
    "attach_index",
    "charge_pod",
    "classes_of",
    "count_fitting",
    "demand_of",
    "describe_free",
    "empty_capacity",
    "empty_of",
    "fits",
    "gang_priority",
    "gang_stamps",
    "gated_of",
    "index_of",
    "is_gated",
    "moved_classes",
    "node_capacity",
    "take",
]


Classes = dict[NodeCapacity, SortedNames[NodeName]]


class Capacities(Mapping[NodeName, NodeCapacity]):
    """Free capacity per node, read-only, with its *capacity classes* (nodes grouped by
    identical free capacity, names sorted) derived once.

    Large clusters have few distinct free capacities (most nodes are empty or alike), so
    placement ranks these classes instead of every node. A source that keeps the classes up
    to date as capacity changes (the simulator, the live reindexer) hands them in."""

    __slots__ = ("_classes", "_data")

    def __init__(self, data: Mapping[NodeName, NodeCapacity], *,
                 classes: Classes | None = None) -> None:
        self._data = data
        self._classes = classes

    def __getitem__(self, name: NodeName) -> NodeCapacity:
        return self._data[name]

    def __iter__(self) -> Iterator[NodeName]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, name: object) -> bool:
        return name in self._data

    @property
    def classes(self) -> Classes:
        if self._classes is None:
            self._classes = _group(self._data)
        return self._classes


def _group(base: Mapping[NodeName, NodeCapacity]) -> Classes:
    grouped: dict[NodeCapacity, list[NodeName]] = {}
    for name in sorted(base):
        grouped.setdefault(base[name], []).append(name)
    return {cap: SortedNames(names) for cap, names in grouped.items()}


def moved_classes(classes: Classes, before: Mapping[NodeName, NodeCapacity],
                  moved: Mapping[NodeName, NodeCapacity | None]) -> Classes:
    """``classes`` with each moved node taken out of its class in ``before`` (if it had one)
    and put in the class of its new capacity (``None``: the node is gone). Each move copies
    one chunk of each class it touches, never a whole class."""
    if not moved:
        return classes
    out = dict(classes)
    for name, after in moved.items():
        old = before.get(name)
        if old is not None:
            rest = out[old].removing(name)
            if rest:
                out[old] = rest
            else:
                del out[old]
        if after is not None:
            out[after] = out.get(after, _NO_NAMES).adding(name)
    return out


_NO_NAMES: SortedNames[NodeName] = SortedNames()


def classes_of(base: Mapping[NodeName, NodeCapacity]) -> Classes:
    """Nodes grouped by identical free capacity (sorted names); derived once per
    :class:`Capacities`, computed afresh for any other mapping."""
    if isinstance(base, Capacities):
        return base.classes
    return _group(base)


@dataclass(frozen=True)
class SnapshotIndex:
    """Values derived once per snapshot: base capacity and who is where."""

    base: Capacities
    """Allocatable minus bound, non-terminal pods, for every node."""
    pods_on: Mapping[NodeName, tuple[str, ...]]
    """UIDs of the pods holding resources on each node."""
    gang_pods: Mapping[str, tuple[str, ...]]
    """Gang key -> UIDs of its pods that exist, sorted."""
    eligible: dict[PodShape, tuple[NodeName, ...]] = field(default_factory=dict)
    """Memo: shape -> nodes its constraints allow (filled by :func:`eligible_for`)."""


def _build_index(snapshot: ClusterSnapshot, gpu: str) -> SnapshotIndex:
    on: dict[NodeName, list[PodInfo]] = {}
    for pod in snapshot.pods.values():
        if pod.holds_resources and pod.node_name is not None:
            on.setdefault(pod.node_name, []).append(pod)
    base = {
        name: node_capacity(node, on.get(name, ()), gpu=gpu)
        for name, node in snapshot.nodes.items()
    }
    gang_pods: dict[str, list[str]] = {}
    for uid, member in snapshot.memberships.items():
        if member.gang is not None and uid in snapshot.pods:
            gang_pods.setdefault(member.gang, []).append(uid)
    return SnapshotIndex(
        base=Capacities(MappingProxyType(base)),
        pods_on=MappingProxyType({n: tuple(sorted(p.uid for p in ps)) for n, ps in on.items()}),
        gang_pods=MappingProxyType({k: tuple(sorted(v)) for k, v in gang_pods.items()}),
    )


def index_of(snapshot: ClusterSnapshot, *, gpu: str = GPU) -> SnapshotIndex:
    """The snapshot's index, derived once per snapshot and kept on it."""
    key = f"index:{gpu}"
    found = snapshot.derived.get(key)
    if isinstance(found, SnapshotIndex):
        return found
    index = _build_index(snapshot, gpu)
    snapshot.derived[key] = index
    return index


GATED = "gated"


def is_gated(pod: PodInfo) -> bool:
    """Whether ``pod`` waits behind a scheduling gate: it has one, is not bound and is not
    being deleted (kube-scheduler keeps it out of its queue)."""
    return bool(pod.gates) and pod.node_name is None and not pod.deleting


def gated_of(snapshot: ClusterSnapshot) -> frozenset[str]:
    """UIDs of the snapshot's gated pods (:func:`is_gated`), derived once per snapshot, or
    kept by the source (:func:`attach_gated`) so ungating looks at them without a pass over
    every pod after each event."""
    found = snapshot.derived.get(GATED)
    if isinstance(found, frozenset):
        return found
    gated = frozenset(p.uid for p in snapshot.pods.values() if is_gated(p))
    snapshot.derived[GATED] = gated
    return gated


def attach_gated(snapshot: ClusterSnapshot, gated: frozenset[str]) -> None:
    """Give a snapshot just built its gated pods, kept by a source that sees which pods
    changed; ``gated`` must be what :func:`gated_of` would derive."""
    snapshot.derived[GATED] = gated


STAMPS = "gang-stamps"


def attach_gang_stamps(snapshot: ClusterSnapshot, stamps: Mapping[str, int]) -> None:
    """Give a snapshot just built, by a source that sees which pods changed, a stamp per gang
    that is new whenever one of the gang's pods, or the set or roles of its members, changed.
    A stamp is never given twice, even by another source (after a relist), so what was
    derived from a gang's pods may be kept while its stamp stays."""
    snapshot.derived[STAMPS] = stamps


def gang_stamps(snapshot: ClusterSnapshot) -> Mapping[str, int] | None:
    """The stamps :func:`attach_gang_stamps` gave, or ``None``: derive afresh."""
    found = snapshot.derived.get(STAMPS)
    return found if isinstance(found, Mapping) else None


def gang_priority(gang: Gang, snapshot: ClusterSnapshot, *, gpu: str = GPU) -> int:
    """The gang's priority: the highest of its templates' and its pods' own.

    Operators' pod templates name a ``priorityClassName``, rarely a number; admission writes
    the class's value into each pod's ``spec.priority``. So a gang read from its templates
    alone has priority 0 until its pods exist, and every decision about a gang is made once
    they do."""
    pods = index_of(snapshot, gpu=gpu).gang_pods.get(gang.key, ())
    return max([gang.priority, *(snapshot.pods[u].shape.priority for u in pods
                                 if u in snapshot.pods)])


def attach_index(snapshot: ClusterSnapshot, index: SnapshotIndex, *, gpu: str = GPU) -> None:
    """Give a snapshot just built its index, instead of letting the core derive it.

    For a source that keeps base capacity up to date as pods come and go (the simulator, the
    live reindexer): deriving it again for every snapshot is a pass over every node and pod.
    ``index`` must be what :func:`index_of` would compute.
    """
    snapshot.derived[f"index:{gpu}"] = index


def attach_empty(snapshot: ClusterSnapshot, empty: Capacities, *, gpu: str = GPU) -> None:
    """Give a snapshot just built the empty capacities of its nodes (:func:`empty_of`), kept
    by a source whose nodes did not change since the last snapshot."""
    snapshot.derived[f"empty:{gpu}"] = empty


def empty_of(snapshot: ClusterSnapshot, *, gpu: str = GPU) -> Capacities:
    """Every node's capacity with nothing on it, derived once per snapshot (sources pass it
    along while their nodes do not change: :func:`attach_empty`), so "would it fit an empty
    cluster?" costs no pass over 5,000 nodes."""
    key = f"empty:{gpu}"
    found = snapshot.derived.get(key)
    if isinstance(found, Capacities):
        return found
    empty = Capacities(MappingProxyType({n: empty_capacity(node, gpu=gpu)
                                         for n, node in snapshot.nodes.items()}))
    snapshot.derived[key] = empty
    return empty


class CapacityView(Mapping[NodeName, NodeCapacity]):
    """Base capacity with a few nodes changed, without copying the base (5,000 nodes)."""

    __slots__ = ("base", "changes")

    def __init__(
        self, base: Mapping[NodeName, NodeCapacity],
        changes: Mapping[NodeName, NodeCapacity] | None = None,
    ) -> None:
        self.base = base
        self.changes: dict[NodeName, NodeCapacity] = dict(changes or {})

    def __getitem__(self, name: NodeName) -> NodeCapacity:
        cap = self.changes.get(name)
        return cap if cap is not None else self.base[name]

    def __iter__(self) -> Iterator[NodeName]:
        return iter(self.base)

    def __len__(self) -> int:
        return len(self.base)

    def __contains__(self, name: object) -> bool:
        return name in self.base
