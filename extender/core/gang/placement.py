"""Plan a whole gang on a snapshot, or say why it cannot be placed: the one entry the
decisions call (:func:`plan_gang`).

It turns a gang into what its roles still need and the nodes each may use, keeps exclusive
gangs' domains fenced, and hands the packing to :mod:`~extender.core.gang.packing` (or, for
subgroups that each keep to a domain, :mod:`~extender.core.gang.subgroup_placement`). The plan
values are :mod:`~extender.core.gang.plans`'s, re-exported here. It must not count capacity
itself or phrase shortages (:mod:`~extender.core.gang.shortage`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from extender.core.gang.capacity import index_of
from extender.core.gang.constraints import (
    eligible_nodes,
    exclusive_fences,
    ineligibility_summary,
    topology_domains,
)
from extender.core.gang.narrowed import (
    Narrowed,
    confined,
    join_roles,
    keep_in,
    narrowed_members,
    split_demands,
    why_narrowed,
)
from extender.core.gang.nodecapacity import NodeCapacity
from extender.core.gang.packing import SEARCH_BUDGET, place_gang
from extender.core.gang.plans import Infeasible, Plan, RoleDemand, gang_demands
from extender.core.gang.scoring import Policy
from extender.core.gang.subgroup_placement import plan_by_subgroups
from extender.core.model.resources import GPU
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, NodeName, PodInfo, PodShape

__all__ = [
    "SEARCH_BUDGET",
    "Infeasible",
    "Plan",
    "RoleDemand",
    "eligible_for",
    "gang_demands",
    "place_gang",
    "placed_domain",
    "plan_gang",
]


def eligible_for(shape: PodShape, snapshot: ClusterSnapshot, *, gpu: str = GPU) -> tuple[
    NodeName, ...
]:
    """Nodes ``shape`` may use, memoised per snapshot (5,000 nodes are checked once)."""
    memo = index_of(snapshot, gpu=gpu).eligible
    found = memo.get(shape)
    if found is None:
        found = memo[shape] = eligible_nodes(shape, snapshot.nodes.values())
    return found


def placed_domain(
    gang: Gang, snapshot: ClusterSnapshot, nodes: Mapping[NodeName, int],
) -> str | None:
    """The topology domain most of the gang's placed pods are in (``nodes``: node -> pods),
    ties to the smallest value; ``None`` without a topology constraint or a placed pod."""
    if gang.topology is None:
        return None
    seen: dict[str, int] = {}
    for node, n in nodes.items():
        info = snapshot.nodes.get(node)
        value = None if info is None else info.label(gang.topology.key)
        if value is not None and n > 0:
            seen[value] = seen.get(value, 0) + n
    return min(seen.items(), key=lambda kv: (-kv[1], kv[0]))[0] if seen else None


def plan_gang(
    gang: Gang,
    *,
    snapshot: ClusterSnapshot,
    capacity: Mapping[NodeName, NodeCapacity],
    placed: Mapping[str, int] | None = None,
    policy: Policy = Policy.BINPACK,
    gpu: str = GPU,
    budget: int = SEARCH_BUDGET,
    within: str | None = None,
    occupied: Mapping[NodeName, Collection[Gang]] | None = None,
    placed_at: Mapping[tuple[NodeName, str], int] | None = None,
    placed_in: Mapping[tuple[NodeName, str, str], int] | None = None,
    pending: Sequence[PodInfo] = (),
) -> Plan | Infeasible:
    """Plan the rest of ``gang`` on ``snapshot``'s nodes with ``capacity`` free.

    ``placed`` counts, per role, the gang's pods already bound or in flight: they count toward
    the minimum and are not planned again. ``within`` is the topology domain those pods run in
    (:func:`placed_domain`): the rest keeps to it (a preferred constraint falls back to every
    node if it cannot). ``occupied`` (node -> gangs with pods or plans there) lets exclusive
    gangs' domains be kept to them (:func:`exclusive_fences`); without it none are.
    A gang whose subgroups each keep to a domain of their own is planned by
    :func:`plan_by_subgroups`; ``placed_at`` (``(node, role)`` -> pods bound or in flight) says
    where its placed pods run, and ``placed_in`` (``(node, role, subgroup)`` -> pods) which
    subgroup each is in when the pods say it (without them, the bound ones are read off
    ``snapshot``). ``pending`` are the gang's members still to be placed: one whose own pod
    may use only some of its role's nodes (an allocated ResourceClaim's node) gets a slot
    there kept for it (:mod:`~extender.core.gang.narrowed`), or the gang does not fit.
    """
    demands = gang_demands(gang, placed)
    eligible = {rd.role: eligible_for(rd.shape, snapshot, gpu=gpu) for rd in demands}
    for rd in demands:
        if rd.need and not eligible[rd.role]:
            summary = ineligibility_summary(rd.shape, snapshot.nodes.values())
            needed = sum(d.need for d in demands)
            return Infeasible(gang.key, f"gang {gang.key}: no node accepts a {rd.role}: "
                              f"{summary}", 0, needed)
    fenced, taken = exclusive_fences(gang, snapshot, occupied or {})
    if fenced:
        eligible = {role: tuple(n for n in nodes if n not in fenced)
                    for role, nodes in eligible.items()}
    narrowed = narrowed_members(pending, snapshot, demands=demands, eligible=eligible,
                                allowed=lambda shape: eligible_for(shape, snapshot, gpu=gpu))
    if gang.subgroups is not None:
        at = placed_at if placed_at is not None else _bound_at(gang, snapshot, gpu=gpu)
        inside = (None if gang.subgroups.label is None else
                  placed_in if placed_in is not None else
                  _bound_in(gang, snapshot, gpu=gpu))
        scoped = confined(eligible, narrowed, demands) if narrowed else eligible
        by_subgroups = plan_by_subgroups(gang, gang.subgroups, scoped, snapshot=snapshot,
                                         capacity=capacity, placed_at=at, placed_in=inside,
                                         taken=taken, policy=policy, gpu=gpu, budget=budget,
                                         fenced=len(fenced))
        return _around(_kept_in(gang, by_subgroups, narrowed, demands), placed)
    demands, eligible, kept = split_demands(demands, narrowed, eligible)
    domains = None
    if gang.topology is not None:
        union = sorted({n for nodes in eligible.values() for n in nodes})
        domains = topology_domains(gang.topology, snapshot.nodes, union)
    result = place_gang(gang.key, demands, capacity=capacity, eligible=eligible,
                        domains=domains, topology=gang.topology, policy=policy, gpu=gpu,
                        budget=budget, within=within, taken=taken)
    if isinstance(result, Infeasible) and fenced:
        why = (f"{result.reason} ({len(fenced)} node{'s are' if len(fenced) != 1 else ' is'} "
               f"in a domain an exclusive gang holds)")
        result = Infeasible(result.gang, why, result.placed, result.needed)
    if isinstance(result, Infeasible):
        if narrowed:
            why = f"{result.reason}; {why_narrowed(narrowed)}"
            result = Infeasible(result.gang, why, result.placed, result.needed)
        return result
    return _around(join_roles(result, kept, gang), placed)


def _kept_in(gang: Gang, result: Plan | Infeasible, narrowed: Sequence[Narrowed],
             demands: Sequence[RoleDemand]) -> Plan | Infeasible:
    """A subgroups' plan with a slot kept for each narrowed member on its own nodes, or why
    not (the subgroups are placed from their templates; the members are fitted after)."""
    if not narrowed or isinstance(result, Infeasible):
        return result
    kept = keep_in(result, narrowed)
    if isinstance(kept, Plan):
        return kept
    needed = sum(d.need for d in demands)
    return Infeasible(gang.key, f"gang {gang.key}: {kept}; {why_narrowed(narrowed)}",
                      max(0, needed - 1), needed)


def _around(result: Plan | Infeasible, placed: Mapping[str, int] | None) -> Plan | Infeasible:
    """``result`` noting the members it was planned around (:attr:`Plan.placed`)."""
    before = tuple(sorted((r, n) for r, n in (placed or {}).items() if n > 0))
    if isinstance(result, Infeasible) or not before:
        return result
    return Plan(gang=result.gang, slots=result.slots, shapes=result.shapes,
                domain=result.domain, required=result.required,
                subgroup_domains=result.subgroup_domains, placed=before,
                kept_for=result.kept_for, narrowed=result.narrowed)


def _bound_at(gang: Gang, snapshot: ClusterSnapshot, *, gpu: str,
              ) -> dict[tuple[NodeName, str], int]:
    counts: dict[tuple[NodeName, str], int] = {}
    for uid in index_of(snapshot, gpu=gpu).gang_pods.get(gang.key, ()):
        pod = snapshot.pods[uid]
        if pod.node_name is not None and pod.holds_resources:
            key = (pod.node_name, snapshot.memberships[uid].role)
            counts[key] = counts.get(key, 0) + 1
    return counts


def _bound_in(gang: Gang, snapshot: ClusterSnapshot, *, gpu: str,
              ) -> dict[tuple[NodeName, str, str], int]:
    counts: dict[tuple[NodeName, str, str], int] = {}
    for uid in index_of(snapshot, gpu=gpu).gang_pods.get(gang.key, ()):
        pod, member = snapshot.pods[uid], snapshot.memberships[uid]
        if pod.node_name is not None and pod.holds_resources and member.subgroup is not None:
            key = (pod.node_name, member.role, member.subgroup)
            counts[key] = counts.get(key, 0) + 1
    return counts
