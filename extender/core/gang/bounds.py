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

from collections.abc import Callable, Mapping

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
    not counted as placed (the one being filtered).

    The tests run over every node first (by classes, cheap), then over the nodes each role
    may use (:func:`_within_eligible`)."""
    by_role = per_role(placed_counts(gang.key, snapshot, ledger, gpu=gpu, exclude=exclude))
    demands = [rd for rd in gang_demands(gang, by_role) if rd.need]
    every = tuple(capacity)
    why = _tests(_needs(demands, lambda _rd: every, gpu=gpu), capacity, narrowed=False)
    return why if why is not None else _within_eligible(demands, snapshot, capacity, gpu=gpu)


def _within_eligible(demands: list[RoleDemand], snapshot: ClusterSnapshot,
                     capacity: Mapping[NodeName, NodeCapacity], *, gpu: str) -> str | None:
    """The same tests over only the nodes each role may use (its node selector, affinity
    and tolerations: :func:`~extender.core.gang.placement.eligible_for`, the planner's own),
    for roles that may not use every node: an A100 gang is not helped by room on H100 nodes.
    Node by node, so it costs what the eligible nodes number."""
    eligible = _needs(demands, lambda rd: eligible_for(rd.shape, snapshot, gpu=gpu), gpu=gpu)
    if all(len(nodes) >= len(capacity) for _, nodes in eligible):
        return None
    return _tests(eligible, capacity, narrowed=True)


_Needs = dict[tuple[Demand, tuple[NodeName, ...]], tuple[int, list[str]]]
"""(pod demand, nodes those pods may use) -> (pods needed, the roles they are of)."""


def _needs(demands: list[RoleDemand], nodes_of: Callable[[RoleDemand], tuple[NodeName, ...]],
           *, gpu: str) -> _Needs:
    need: _Needs = {}
    for rd in demands:
        key = (demand_of(rd.shape, gpu=gpu), nodes_of(rd))
        count, roles = need.get(key, (0, []))
        need[key] = (count + rd.need, [*roles, rd.role])
    return need


def _tests(need: _Needs, capacity: Mapping[NodeName, NodeCapacity], *,
           narrowed: bool) -> str | None:
    """Whole GPUs free against those needed, over the nodes any of the pods may use; then,
    per group, how many pods the nodes could hold, each node counted alone. ``narrowed``:
    the nodes are the roles' eligible ones (groups that may use every node were tested over
    every node already), and the reasons say so."""
    whole = sum(d.whole * n for (d, _), (n, _) in need.items())
    if narrowed and any(len(nodes) >= len(capacity) for _, nodes in need):
        whole = 0  # some of the pods may use every node: tested over every node already
    if whole:
        union = (sorted({n for _, nodes in need for n in nodes}) if narrowed
                 else tuple(capacity))
        free = free_whole(union, capacity)
        if free < whole:
            where = f" on the {len(union)} nodes its pods may use," if narrowed else ""
            return (f"it needs {whole} more whole GPUs and {free} are free{where} outside "
                    "other gangs' plans")
    for (demand, nodes), (count, roles) in need.items():
        if narrowed and len(nodes) >= len(capacity):
            continue
        room = room_for(demand, nodes, cap_of=capacity, enough=count)
        if room < count:
            where = (f" of the {len(nodes)} node{'s' if len(nodes) != 1 else ''} they may use"
                     if narrowed else "")
            return (f"at most {room} of the {count} more {'/'.join(roles)} pods it needs "
                    f"fit the free capacity{where}, each node counted alone")
    return None


def cannot_fit(gang: Gang, snapshot: ClusterSnapshot, ledger: Ledger,
               capacity: Mapping[NodeName, NodeCapacity], *, gpu: str = GPU,
               exclude: str | None = None) -> bool:
    """True only if no plan for the rest of the gang's minimum can exist (:func:`shortfall`)."""
    return shortfall(gang, snapshot, ledger, capacity, gpu=gpu, exclude=exclude) is not None
