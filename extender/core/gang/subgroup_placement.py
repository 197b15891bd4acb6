"""Plan a gang whose subgroups each keep to a topology domain of their own.

The subgroups' domains are chosen by :func:`~extender.core.gang.subgroups.assign_domains`,
each tried with the packer (:mod:`~extender.core.gang.packing`); the roles in no subgroup go
anywhere on what those leave free. It must not read pods: where the gang's placed pods run
comes in as counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from extender.core.gang.capacity import CapacityView
from extender.core.gang.charging import take
from extender.core.gang.constraints import topology_domains
from extender.core.gang.nodecapacity import NodeCapacity, demand_of
from extender.core.gang.packing import order_demands, place_gang, plan_in
from extender.core.gang.plans import Infeasible, Plan, RoleDemand, gang_demands
from extender.core.gang.scoring import Policy, domain_cost
from extender.core.gang.shortage import SHOWN_DOMAINS, failure_detail
from extender.core.gang.subgroups import Fit, assign_domains, units_of
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, NodeName, SubgroupTopology, TopologyConstraint


def plan_by_subgroups(
    gang: Gang, sub: SubgroupTopology, eligible: Mapping[str, Sequence[NodeName]], *,
    snapshot: ClusterSnapshot, capacity: Mapping[NodeName, NodeCapacity],
    placed_at: Mapping[tuple[NodeName, str], int],
    placed_in: Mapping[tuple[NodeName, str, str], int] | None, taken: Mapping[str, str],
    policy: Policy, gpu: str, budget: int, fenced: int,
) -> Plan | Infeasible:
    """Each subgroup in a domain of its own (:func:`~extender.core.gang.subgroups.
    assign_domains`); the plan is their slots together, then the roles in no subgroup on what
    those leave free, anywhere. Nodes without the label take none of the subgroups' pods."""
    nodes = snapshot.nodes
    placed: dict[str, dict[str, int]] = {}
    for (node, role), n in sorted(placed_at.items()):
        info = nodes.get(node)
        value = None if info is None else info.label(sub.key)
        if value is not None and n > 0:
            by_role = placed.setdefault(value, {})
            by_role[role] = by_role.get(role, 0) + n
    by_value: dict[str, dict[str, dict[str, int]]] | None = None
    # Pods tie themselves to subgroups only if every placed pod says its subgroup; else the
    # placed pods are told apart by role and domain, as for subgroups without a label.
    if placed_in is not None and sum(placed_in.values()) == sum(placed_at.values()):
        by_value = {}
        for (node, role, value), n in sorted(placed_in.items()):
            info = nodes.get(node)
            domain = None if info is None else info.label(sub.key)
            if domain is not None and n > 0:
                by_role = by_value.setdefault(value, {}).setdefault(domain, {})
                by_role[role] = by_role.get(role, 0) + n
    needed = gang.min_member - sum(placed_at.values())
    # Roles in no subgroup (a JobSet's replicatedJobs that ask for no domain) go anywhere,
    # the subgroups' domains too: the exclusive leaders' anti-affinity selects only pods of
    # exclusive Jobs (JobSet's priority label), and they keep to no domain themselves.
    in_kinds = {r for kind in sub.kinds for r, _ in kind.pods}
    units, broken = units_of(sub, placed, by_value=by_value)
    if broken is not None:
        return Infeasible(gang.key, f"gang {gang.key}: {broken}", 0, needed)
    union = sorted({n for names in eligible.values() for n in names})
    domains = topology_domains(TopologyConstraint(sub.key), nodes, union)
    shapes = {m.role: m.shape for m in gang.members}
    allowed = {role: frozenset(names) for role, names in eligible.items()}
    share = max(1, budget // max(1, len({u.kind.name for u in units}) * max(1, len(domains))))

    def try_in(pods: tuple[tuple[str, int], ...], value: str) -> Fit:
        members = domains.get(value, ())
        demands = [RoleDemand(role, shapes[role], need=n) for role, n in pods if n > 0]
        ordered = order_demands(demands, gpu)
        scoped = {rd.role: [n for n in members if n in allowed.get(rd.role, ())]
                  for rd in demands}
        plan, attempt = plan_in(gang.key, ordered, scoped, cap_of=capacity, policy=policy,
                                 gpu=gpu, budget=share, domain=value)
        if plan is None:
            detail = failure_detail(attempt.failed, scoped, domain_nodes=members,
                                    free=CapacityView(capacity, attempt.working), gpu=gpu)
            return Fit(None, placed=attempt.placed, why=detail)
        after = CapacityView(capacity, attempt.working)
        return Fit(plan.slots, cost=domain_cost(policy, (after[n] for n in members)),
                   placed=attempt.placed)

    found = assign_domains(units, sorted(domains), key=sub.key, try_in=try_in, taken=taken,
                           shown=SHOWN_DOMAINS)
    if not found.ok:
        why = f"gang {gang.key}: {found.reason}"
        if fenced:
            why += (f" ({fenced} node{'s are' if fenced != 1 else ' is'} in a domain an "
                    "exclusive gang holds)")
        return Infeasible(gang.key, why, found.placed, needed)
    slots: dict[tuple[NodeName, str], int] = {}
    for _, _, fit in found.chosen:
        for node, role, n in fit.slots or ():
            slots[(node, role)] = slots.get((node, role), 0) + n
    by_role_placed: dict[str, int] = {}
    for (_, role), n in placed_at.items():
        by_role_placed[role] = by_role_placed.get(role, 0) + n
    loose = [d for d in gang_demands(gang, by_role_placed) if d.role not in in_kinds]
    if loose:
        # On what the subgroups' slots leave free.
        left: dict[NodeName, NodeCapacity] = {}
        for (node, role), n in slots.items():
            left[node] = take(left.get(node) or capacity[node],
                              demand_of(shapes[role], gpu=gpu), n, force=True)
        rest = place_gang(gang.key, loose, capacity=CapacityView(capacity, left),
                          eligible={rd.role: eligible.get(rd.role, ()) for rd in loose},
                          policy=policy, gpu=gpu, budget=share)
        if isinstance(rest, Infeasible):
            names = ", ".join(rd.role for rd in loose)
            return Infeasible(gang.key, (f"gang {gang.key}: its {sub.key} subgroups fit, but "
                                         f"then its roles kept to no domain ({names}) do not: "
                                         f"{rest.reason}"), found.placed + rest.placed, needed)
        for node, role, n in rest.slots:
            slots[(node, role)] = slots.get((node, role), 0) + n
    planned = tuple(sorted((n, r, c) for (n, r), c in slots.items() if c > 0))
    roles = sorted({r for _, r, _ in planned})
    return Plan(gang=gang.key, slots=planned,
                shapes=tuple((r, shapes[r]) for r in roles),
                required=sum(c for _, _, c in planned),
                subgroup_domains=tuple(sorted((u.name, d) for u, d, _ in found.chosen)))
