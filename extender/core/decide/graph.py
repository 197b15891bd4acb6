"""The wait-for graph between gangs held at the bind barrier.

It links gangs held at the barrier that cannot complete (:func:`blocked_gangs`) to the blocked
gangs whose reservations or held members occupy the nodes they need; a cycle there is a
deadlock, broken by choosing one gang to yield: the lower priority, then the younger
(:mod:`extender.core.decide.yields` decides it each cycle). The other graph, a gang's
dependency graph (which roles its operator creates only once others are Ready), is cut into
the gang's stages where the workload is resolved (``extender.core.workloads.gangs``), and the
barrier releases it stage by stage.

Where such a cycle comes from: plans are made whole, so two gangs never plan over each other.
But a plan can stop holding while its members wait at the barrier (the node it named is lost,
or capacity on it is taken behind Muster's back), and the capacity left may be what another
waiting gang holds, while that gang, hit the same way, waits for this one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import networkx as nx

from extender.core.gang.capacity import demand_of, fits
from extender.core.gang.ledger import Ledger, free_capacity, per_role, placed_in_of
from extender.core.gang.placement import (
    SEARCH_BUDGET,
    Infeasible,
    eligible_for,
    gang_demands,
    plan_gang,
)
from extender.core.gang.scoring import Policy
from extender.core.model.resources import GPU
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, GangKey, NodeName


def blocked_gangs(
    snapshot: ClusterSnapshot, ledger: Ledger, *, gpu: str = GPU,
    policy: Policy = Policy.BINPACK, budget: int = SEARCH_BUDGET,
) -> list[GangKey]:
    """Gangs held at the bind barrier that cannot place the rest of their minimum now, even
    with their own reservation free: their plan no longer holds (a node lost, capacity taken
    behind Muster's back) and nothing free elsewhere replaces it. Sorted."""
    out = []
    for key, _ in ledger.barriers():
        gang = snapshot.gangs.get(key)
        if gang is None or ledger.is_admitted(key) or not ledger.waiting(key):
            continue
        by_role = per_role(ledger.placed(key, snapshot, gpu=gpu))
        if not any(rd.need for rd in gang_demands(gang, by_role)):
            continue
        free = free_capacity(snapshot, ledger, gpu=gpu, exclude=key)
        plan = plan_gang(gang, snapshot=snapshot, capacity=free, placed=by_role, policy=policy,
                         gpu=gpu, budget=budget, placed_at=ledger.placed(key, snapshot, gpu=gpu),
                         placed_in=placed_in_of(gang, snapshot, ledger, gpu=gpu))
        if isinstance(plan, Infeasible):
            out.append(key)
    return out


def wait_for_graph(
    snapshot: ClusterSnapshot, ledger: Ledger, *, gpu: str = GPU,
    policy: Policy = Policy.BINPACK, budget: int = SEARCH_BUDGET,
) -> nx.DiGraph:
    """Nodes: the :func:`blocked_gangs`. Edge ``A -> B`` when B holds capacity (members in
    flight or at the barrier, or an unfilled reservation) on a node where a pod A still needs
    does not fit now and would once B let go. A cycle is a deadlock: every gang in it waits
    for one that waits too."""
    g = nx.DiGraph()
    blocked = blocked_gangs(snapshot, ledger, gpu=gpu, policy=policy, budget=budget)
    g.add_nodes_from(blocked)
    if len(blocked) < 2:
        return g
    held = {key: _held_nodes(key, snapshot, ledger) for key in blocked}
    for key in blocked:
        gang = snapshot.gangs[key]
        by_role = per_role(ledger.placed(key, snapshot, gpu=gpu))
        needed = [(demand_of(rd.shape, gpu=gpu), frozenset(eligible_for(rd.shape, snapshot,
                                                                       gpu=gpu)))
                  for rd in gang_demands(gang, by_role) if rd.need]
        free = free_capacity(snapshot, ledger, gpu=gpu, exclude=key)
        for other in blocked:
            if other == key:
                continue
            twin = ledger.clone()
            twin.withdraw(other)  # what this gang would see if the other let go
            after = free_capacity(snapshot, twin, gpu=gpu, exclude=key)
            if any(node in free and not fits(free[node], demand) and fits(after[node], demand)
                   for node in held[other] for demand, allowed in needed if node in allowed):
                g.add_edge(key, other)
    return g


def _held_nodes(gang: GangKey, snapshot: ClusterSnapshot, ledger: Ledger) -> list[NodeName]:
    """Nodes where the gang holds what withdrawing it would free: its members at the barrier
    and its reservation (sorted)."""
    nodes = {node for _, node in ledger.waiting(gang)}
    plan = ledger.plan_for(gang)
    if plan is not None:
        nodes.update(n for n, _, _ in plan.slots)
    return sorted(n for n in nodes if n in snapshot.nodes)


def deadlocks(g: nx.DiGraph) -> list[list[GangKey]]:
    """Every cycle of waiting gangs, each rotated to start at its smallest key, sorted."""
    out = []
    for cycle in nx.simple_cycles(g):
        start = cycle.index(min(cycle))
        out.append(cycle[start:] + cycle[:start])
    return sorted(out)


def yielder(cycle: Iterable[GangKey], gangs: Mapping[GangKey, Gang],
            priority: Callable[[Gang], int] = lambda g: g.priority) -> GangKey:
    """The gang that gives way: lowest ``priority`` (by default the templates'), then
    youngest (latest created), then key."""
    def rank(key: GangKey) -> tuple[int, float, str]:
        gang = gangs.get(key)
        if gang is None:
            return (-(1 << 62), float("inf"), key)  # a vanished gang always yields
        return (priority(gang), -gang.created, key)
    return min(cycle, key=rank)
