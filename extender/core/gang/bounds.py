"""A necessary condition for a gang to fit: cheap, from capacity classes, and never wrong.

Planning a gang that does not fit costs a bounded search, then the reasons (an empty
cluster's plan, who holds what it needs). A gang waiting for room is looked at again whenever
free capacity grows anywhere, and on a busy cluster that is every time a pod ends. Most of
those changes cannot help it: one GPU freed on one node does not make room for eight pods of
eight GPUs. :func:`cannot_fit` says so without planning: for some pod shape the gang still
needs, the nodes could not hold that many even if no other shape wanted room (each node
counted alone: :func:`~extender.core.gang.search.room_for`, from the classes of identical
capacity on large clusters), or fewer whole GPUs are free than it needs
(:func:`~extender.core.gang.search.free_whole`): two of the tests the planner's own
:func:`~extender.core.gang.search.could_fit` makes, first over every node (from classes, cheap),
then, for roles that may not use every node, over the nodes each may use (node by node).
When it says ``True`` no plan exists; when it says ``False`` one may.
:func:`shortfall` says why, in words a waiting gang's events can carry.
"""

from __future__ import annotations

from collections.abc import Mapping

from extender.core.gang.capacity import Demand, NodeCapacity, demand_of
from extender.core.gang.ledger import Ledger, per_role, placed_counts
from extender.core.gang.placement import RoleDemand, eligible_for, gang_demands
from extender.core.gang.search import free_whole, room_for
from extender.core.model.resources import GPU
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, NodeName


def shortfall(gang: Gang, snapshot: ClusterSnapshot, ledger: Ledger,
              capacity: Mapping[NodeName, NodeCapacity], *, gpu: str = GPU,
              exclude: str | None = None) -> str | None:
    """Why no plan for the rest of the gang's minimum can exist on ``capacity`` (free
    capacity as the gang sees it), or ``None`` when one may; ``exclude``: a pod of the gang
    not counted as placed (the one being filtered)."""
    by_role = per_role(placed_counts(gang.key, snapshot, ledger, gpu=gpu, exclude=exclude))
    demands = gang_demands(gang, by_role)
    need: dict[Demand, tuple[int, list[str]]] = {}
    for rd in demands:
        if rd.need:
            demand = demand_of(rd.shape, gpu=gpu)
            count, roles = need.get(demand, (0, []))
            need[demand] = (count + rd.need, [*roles, rd.role])
    names = tuple(capacity)
    whole = sum(d.whole * n for d, (n, _) in need.items())
    if whole:
        free = free_whole(names, capacity)
        if free < whole:
            return (f"it needs {whole} more whole GPUs and {free} are free outside other "
                    "gangs' plans")
    for demand, (count, roles) in need.items():
        room = room_for(demand, names, cap_of=capacity, enough=count)
        if room < count:
            return (f"at most {room} of the {count} more {'/'.join(roles)} pods it needs "
                    "fit the free capacity, each node counted alone")
    return _within_eligible(demands, snapshot, capacity, gpu=gpu)


def _within_eligible(demands: list[RoleDemand], snapshot: ClusterSnapshot,
                     capacity: Mapping[NodeName, NodeCapacity], *, gpu: str) -> str | None:
    """The same two tests over only the nodes each role may use (its node selector, affinity
    and tolerations: :func:`~extender.core.gang.placement.eligible_for`, the planner's own),
    for roles that may not use every node: an A100 gang is not helped by room on H100 nodes.
    Node by node, so it costs what the eligible nodes number; it runs only after the tests
    over classes let the gang through."""
    need: dict[tuple[Demand, tuple[NodeName, ...]], tuple[int, list[str]]] = {}
    for rd in demands:
        if rd.need:
            key = (demand_of(rd.shape, gpu=gpu), eligible_for(rd.shape, snapshot, gpu=gpu))
            count, roles = need.get(key, (0, []))
            need[key] = (count + rd.need, [*roles, rd.role])
    if all(len(nodes) >= len(capacity) for _, nodes in need):
        return None
    union = sorted({n for _, nodes in need for n in nodes})
    whole = sum(d.whole * n for (d, _), (n, _) in need.items())
    if whole:
        free = free_whole(union, capacity)
        if free < whole:
            return (f"it needs {whole} more whole GPUs and {free} are free on the "
                    f"{len(union)} nodes its pods may use, outside other gangs' plans")
    for (demand, nodes), (count, roles) in need.items():
        if len(nodes) >= len(capacity):
            continue
        room = room_for(demand, nodes, cap_of=capacity, enough=count)
        if room < count:
            return (f"at most {room} of the {count} more {'/'.join(roles)} pods it needs "
                    f"fit the free capacity of the {len(nodes)} node"
                    f"{'s' if len(nodes) != 1 else ''} they may use, each node counted alone")
    return None


def cannot_fit(gang: Gang, snapshot: ClusterSnapshot, ledger: Ledger,
               capacity: Mapping[NodeName, NodeCapacity], *, gpu: str = GPU,
               exclude: str | None = None) -> bool:
    """True only if no plan for the rest of the gang's minimum can exist (:func:`shortfall`)."""
    return shortfall(gang, snapshot, ledger, capacity, gpu=gpu, exclude=exclude) is not None
