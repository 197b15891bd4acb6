"""The capacity index of a snapshot kept current from what changed, in O(change).

Finding what moved by comparing every node and pod with the last build would be a pass over
100,000 pods per event. Here the snapshot source says which pods, memberships and nodes
changed, and only their nodes are charged again (by the
changed pods alone when those take no GPU, from all the node's pods otherwise); the
capacity classes move the few nodes whose free capacity changed (one chunk of a
:class:`~extender.core.model.sortednames.SortedNames` copied per move, not a regroup of every
node). What it attaches equals what
:func:`~extender.core.gang.capacity.index_of` derives from the snapshot alone (the property
test ``tests/property/test_event_snapshots_equal_full_builds.py`` checks this).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.core.gang.capacity import (
    Capacities,
    Classes,
    NodeCapacity,
    SnapshotIndex,
    attach_empty,
    attach_gang_stamps,
    attach_gated,
    attach_index,
    demand_of,
    is_gated,
    moved_classes,
    node_capacity,
)
from extender.core.model.layered import GONE, Layered
from extender.core.model.resources import GPU
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import NodeName, PodInfo


@dataclass
class IndexChanges:
    """What moved since the last snapshot, as the source saw it."""

    pods: dict[str, tuple[PodInfo | None, PodInfo | None]] = field(default_factory=dict)
    """Pod UID -> (before, after); ``None`` when absent."""
    gangs: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    """Pod UID -> (gang before, gang after), for pods whose gang may have changed."""
    nodes: set[NodeName] = field(default_factory=set)
    """Nodes whose object was added, replaced or removed."""


class DeltaIndex:
    """Owned by one snapshot source; feed it each snapshot in order. Not thread-safe."""

    def __init__(self, *, gpu: str = GPU) -> None:
        self.gpu = gpu
        self._on: dict[NodeName, dict[str, PodInfo]] = {}
        self._base: Layered[NodeName, NodeCapacity] = Layered(ordered=True)
        self._pods_on: Layered[NodeName, tuple[str, ...]] = Layered()
        self._members: dict[str, set[str]] = {}
        self._gang_pods: Layered[str, tuple[str, ...]] = Layered()
        self._stamps: Layered[str, int] = Layered()
        self._classes: Classes = {}
        self._eligible: dict[Any, tuple[NodeName, ...]] = {}
        self._last: ClusterSnapshot | None = None
        self._gated: set[str] = set()
        self._gated_now: frozenset[str] = frozenset()
        self.recomputed = 0
        """Nodes charged again from all their pods by the last :meth:`advance` (for tests)."""

    def advance(self, snapshot: ClusterSnapshot, changes: IndexChanges) -> SnapshotIndex:
        touched = set(changes.nodes)
        charged: dict[NodeName, list[tuple[int, PodInfo]]] = {}
        gated = len(self._gated)
        for uid, (_old, new) in changes.pods.items():
            if new is not None and is_gated(new):
                self._gated.add(uid)
            else:
                self._gated.discard(uid)
        if len(self._gated) != gated or any(u in self._gated for u in changes.pods):
            self._gated_now = frozenset(self._gated)
        for uid, (old, new) in changes.pods.items():
            if old is not None and old.holds_resources and old.node_name is not None:
                here = self._on.get(old.node_name)
                if here is not None and here.pop(uid, None) is not None:
                    touched.add(old.node_name)
                    charged.setdefault(old.node_name, []).append((-1, old))
                    if not here:
                        del self._on[old.node_name]
            if new is not None and new.holds_resources and new.node_name is not None:
                self._on.setdefault(new.node_name, {})[uid] = new
                touched.add(new.node_name)
                charged.setdefault(new.node_name, []).append((1, new))
        base: dict[NodeName, Any] = {}
        pods_on: dict[NodeName, Any] = {}
        moved: dict[NodeName, NodeCapacity | None] = {}
        recharged = 0
        for name in touched:
            node = snapshot.nodes.get(name)
            here = self._on.get(name)
            pods_on[name] = tuple(sorted(here)) if here else GONE
            before = self._base.get(name)
            after = None
            if node is not None and before is not None and name not in changes.nodes:
                after = _recharged(before, charged.get(name, ()), self.gpu)
            if after is None and node is not None:
                after = node_capacity(node, (here or {}).values(), gpu=self.gpu)
                recharged += 1
            if after != before:
                base[name] = GONE if after is None else after
                moved[name] = after
        self.recomputed = recharged
        self._classes = moved_classes(self._classes, self._base, moved)
        self._base = self._base.evolve(base)
        self._pods_on = self._pods_on.evolve(pods_on)
        self._gang_pods = self._gang_pods.evolve(self._regang(changes.gangs))
        self._stamps = self._stamps.evolve(_restamped(snapshot, changes))
        if changes.nodes:
            self._eligible = {}  # which nodes a shape may use depends on the nodes alone
        index = SnapshotIndex(base=Capacities(self._base, classes=self._classes),
                              pods_on=self._pods_on, gang_pods=self._gang_pods,
                              eligible=self._eligible)
        attach_index(snapshot, index, gpu=self.gpu)
        attach_gated(snapshot, self._gated_now)
        attach_gang_stamps(snapshot, self._stamps)
        empty = None if self._last is None else self._last.derived.get(f"empty:{self.gpu}")
        if not changes.nodes and isinstance(empty, Capacities):
            attach_empty(snapshot, empty, gpu=self.gpu)
        self._last = snapshot
        return index

    def _regang(self, gangs: Mapping[str, tuple[str | None, str | None]]) -> dict[str, Any]:
        touched: set[str] = set()
        for uid, (old, new) in gangs.items():
            if old == new:
                continue
            if old is not None:
                self._members[old].discard(uid)
                touched.add(old)
            if new is not None:
                self._members.setdefault(new, set()).add(uid)
                touched.add(new)
        out: dict[str, Any] = {}
        for gang in touched:
            members = self._members.get(gang)
            if members:
                out[gang] = tuple(sorted(members))
            else:
                self._members.pop(gang, None)
                out[gang] = GONE
        return out


_STAMP = itertools.count(1)
"""Gang stamps for every index in the process: one index's stamps never repeat another's."""


def _restamped(snapshot: ClusterSnapshot, changes: IndexChanges) -> dict[str, Any]:
    """A new stamp for each gang that a changed pod is in, or that a pod joined or left
    (also for a change of role); a gang's pods changing is all that moves its stamp."""
    gangs: set[str] = set()
    for old, new in changes.gangs.values():
        gangs.update(g for g in (old, new) if g is not None)
    memberships = snapshot.memberships
    for uid in changes.pods:
        member = memberships.get(uid)
        if member is not None and member.gang is not None:
            gangs.add(member.gang)
    return {gang: next(_STAMP) if gang in snapshot.gangs else GONE for gang in gangs}


def _recharged(cap: NodeCapacity, pods: Iterable[tuple[int, PodInfo]],
               gpu: str) -> NodeCapacity | None:
    """``cap`` with pods that take no GPU charged (+1) or released (-1), or ``None`` when one
    takes a GPU. Such a pod takes scalars and a pod slot alone, in any order (exact milli
    arithmetic), so this is what charging the node's pods from nothing gives; GPU pods pack
    devices in a fixed order (:func:`node_capacity`), and are charged from nothing."""
    free, slots = cap.free, cap.pods
    for sign, pod in pods:
        demand = demand_of(pod.shape, gpu=gpu)
        if demand.whole or demand.share:
            return None
        free = free - demand.scalar if sign > 0 else free + demand.scalar
        slots = None if slots is None else slots - sign
    return NodeCapacity(free=free, devices=cap.devices, pods=slots, unpacked=cap.unpacked)
