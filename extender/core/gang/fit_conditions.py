"""Necessary conditions for a gang to fit, cheap to check (:func:`could_fit`), and the room
counts they are made of.

Every role has, summed over its eligible nodes, room for the pods it needs *counted node by
node* (how many of its pods fit on each node); and with several roles, the gang's total demand
of each resource is at most what the nodes it may use have free in total, and every group of
roles that request one resource fits, per node, no more pods than that resource divided by the
group's smallest request of it. When one fails no placement exists. (The sums only prove
impossibility; reasons people read still name one node's shortfall.)

It must not place a pod: searching for a placement is :mod:`~extender.core.gang.search`'s.
Pure and deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations

from extender.core.gang.capacity import CapacityView, classes_of
from extender.core.gang.charging import count_fitting
from extender.core.gang.nodecapacity import DEVICE, Demand, NodeCapacity
from extender.core.model.values import NodeName

CLASSES_FROM = 256
"""From this many nodes on, count room by capacity class instead of node by node."""


def _split(cap_of: Mapping[NodeName, NodeCapacity]) -> tuple[
    Mapping[NodeName, NodeCapacity], Mapping[NodeName, NodeCapacity]
]:
    if isinstance(cap_of, CapacityView):
        return cap_of.base, cap_of.changes
    return cap_of, {}


def room_for(
    demand: Demand, nodes: Sequence[NodeName], *, cap_of: Mapping[NodeName, NodeCapacity],
    enough: int,
) -> int:
    """How many pods of ``demand`` fit on ``nodes``, counted per node and then added up; the
    count may stop early once it reaches ``enough``."""
    base, changed = _split(cap_of)
    if len(nodes) >= CLASSES_FROM and len(nodes) == len(base):
        # Every node: rank capacity classes, not 5,000 nodes.
        total = sum(count_fitting(cap, demand) * len(names)
                    for cap, names in classes_of(base).items())
        for name, cap in changed.items():
            if name in base:
                total += count_fitting(cap, demand) - count_fitting(base[name], demand)
        return total
    total = 0
    for name in nodes:
        total += count_fitting(cap_of[name], demand)
        if total >= enough:
            break
    return total


def _weighted(nodes: Sequence[NodeName], cap_of: Mapping[NodeName, NodeCapacity],
              ) -> list[tuple[NodeCapacity, int]]:
    """``nodes``' capacities with the number of times each counts: one per node, or, over
    every node of a large cluster, one per class of identical capacity (with the changed
    nodes counted in and their base taken out)."""
    base, changed = _split(cap_of)
    if len(nodes) >= CLASSES_FROM and len(nodes) == len(base):
        weighted = [(cap, len(names)) for cap, names in classes_of(base).items()]
        weighted += [(cap, 1) for name, cap in changed.items() if name in base]
        weighted += [(base[name], -1) for name in changed if name in base]
        return weighted
    return [(cap_of[name], 1) for name in nodes]


def free_whole(nodes: Sequence[NodeName], cap_of: Mapping[NodeName, NodeCapacity]) -> int:
    """Whole devices free on ``nodes``, added up (``free_totals(...)["gpu:whole"]``, alone)."""
    return sum(cap.whole_free * k for cap, k in _weighted(nodes, cap_of))


def free_totals(nodes: Sequence[NodeName], cap_of: Mapping[NodeName, NodeCapacity]) -> dict[
    str, int | None
]:
    """Free amounts of ``nodes`` added up: scalar resources, whole devices, GPU milli, pod
    slots (``None`` when some node has no pod limit)."""
    out: dict[str, int | None] = {"gpu:whole": 0, "gpu:milli": 0, "pods": 0}
    for cap, k in _weighted(nodes, cap_of):
        for name, amount in cap.free.items():
            out[name] = (out.get(name) or 0) + max(amount, 0) * k
        out["gpu:whole"] = (out["gpu:whole"] or 0) + cap.whole_free * k
        out["gpu:milli"] = (out["gpu:milli"] or 0) + cap.gpu_milli_free * k
        slots = out["pods"]
        out["pods"] = None if slots is None or cap.pods is None else slots + max(cap.pods, 0) * k
    return out


RoleGroup = tuple[tuple[tuple[str, int], ...], int, int]
"""What a group of roles all request: ``(smallest scalar requests, smallest whole GPUs when
every role takes whole GPUs else 0, smallest GPU milli of one device otherwise else 0)``."""


def _group_of(group: Sequence[Demand]) -> RoleGroup | None:
    """The resources every demand of ``group`` requests (``None``: none in common)."""
    common = set(group[0].scalar)
    for d in group[1:]:
        common &= set(d.scalar)
    smallest = tuple(sorted((k, min(d.scalar[k] for d in group)) for k in common))
    whole = min(d.whole for d in group) if all(d.whole for d in group) else 0
    unit = 0 if whole or not all(d.gpu_milli for d in group) else min(
        d.share or DEVICE for d in group)
    if not smallest and not whole and not unit:
        return None
    return smallest, whole, unit


def room_of_group(cap: NodeCapacity, group: RoleGroup) -> int:
    """At most how many pods of a group fit on a node together: for every resource each of
    them requests, what is free divided by the group's smallest request of it (a sharing pod
    takes at least that much of one device; a whole-GPU pod at least that many devices)."""
    smallest, whole, unit = group
    bound = cap.pods if cap.pods is not None else 1 << 30
    for name, amount in smallest:
        bound = min(bound, max(cap.free.get(name, 0), 0) // amount)
    if whole:
        bound = min(bound, max(cap.whole_free, 0) // whole)
    if unit:
        bound = min(bound, sum(max(dev, 0) // unit for dev in cap.devices))
    return max(bound, 0)


def role_groups(
    demands: Sequence[tuple[str, int, Demand]],
) -> list[tuple[tuple[str, ...], RoleGroup]]:
    """Groups of two or more roles (of at most five) that compete for some resource."""
    needed = [(role, demand) for role, need, demand in demands if need]
    if len(needed) > 5:
        return []
    out = []
    for size in range(2, len(needed) + 1):
        for chosen in combinations(needed, size):
            group = _group_of([d for _, d in chosen])
            if group is not None:
                out.append((tuple(role for role, _ in chosen), group))
    return out


def _group_bound(
    group: RoleGroup, nodes: Sequence[NodeName], *, cap_of: Mapping[NodeName, NodeCapacity],
) -> int:
    base, changed = _split(cap_of)
    if len(nodes) >= CLASSES_FROM and len(nodes) == len(base):
        weighted = [(cap, len(names)) for cap, names in classes_of(base).items()]
        weighted += [(cap, 1) for name, cap in changed.items() if name in base]
        weighted += [(base[name], -1) for name in changed if name in base]
    else:
        weighted = [(cap_of[name], 1) for name in nodes]
    return sum(room_of_group(cap, group) * k for cap, k in weighted)


def could_fit(
    demands: Sequence[tuple[str, int, Demand]], eligible: Mapping[str, Sequence[NodeName]], *,
    cap_of: Mapping[NodeName, NodeCapacity],
) -> bool:
    """``False`` only if no placement of ``(role, pods needed, demand)`` can exist."""
    for role, need, demand in demands:
        if need and room_for(demand, eligible.get(role, ()), cap_of=cap_of,
                             enough=need) < need:
            return False
    if len([d for d in demands if d[1]]) < 2:
        return True
    union = sorted({n for role, need, _ in demands if need for n in eligible.get(role, ())})
    free = free_totals(union, cap_of)
    wanted: dict[str, int] = {}
    for _, need, demand in demands:
        for name, amount in demand.scalar.items():
            wanted[name] = wanted.get(name, 0) + amount * need
        wanted["gpu:whole"] = wanted.get("gpu:whole", 0) + demand.whole * need
        wanted["gpu:milli"] = wanted.get("gpu:milli", 0) + demand.gpu_milli * need
        wanted["pods"] = wanted.get("pods", 0) + need
    for name, amount in wanted.items():
        have = free.get(name, 0)
        if have is not None and amount > have:
            return False
    # Groups of roles competing for one resource: 12-CPU pods of two roles on 20-CPU nodes
    # fit one per node, however the totals add up.
    need_of = {role: need for role, need, _ in demands}
    for roles, group in role_groups(demands):
        nodes = sorted({n for role in roles for n in eligible.get(role, ())})
        if _group_bound(group, nodes, cap_of=cap_of) < sum(need_of[r] for r in roles):
            return False
    return True
