"""Would this workload start now, and where? The question behind ``muster fit``.

Gangs are placed in the workload's order, each on the capacity the ones before it left, so
gangs of one workload that compete for the same nodes are answered honestly. Members already
bound count toward their gang's minimum. A workload without gangs has each pod placed on its
own, as kube-scheduler would.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from extender.core.decide.settings import CoreSettings
from extender.core.gang.capacity import CapacityView, demand_of, index_of, take
from extender.core.gang.ledger import Ledger, occupants, per_node, per_role, placed_counts
from extender.core.gang.placement import (
    Infeasible,
    Plan,
    RoleDemand,
    eligible_for,
    place_gang,
    placed_domain,
    plan_gang,
)
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import GangKey, NodeName, WorkloadTree


@dataclass(frozen=True, slots=True)
class GangFit:
    name: str
    min_member: int
    placed: int
    """Pods of the gang that hold a node or would: the members already bound plus the pods
    placed now. When the gang does not fit (nothing of it would start), the members already
    bound plus how many more would fit at best, as the reason says."""
    plan: Mapping[NodeName, Mapping[str, int]]
    """Node -> role -> pods: the members already bound and, when the gang fits, the pods
    placed now. So when ``fits``, the plan adds up to ``placed``; when not, it holds only the
    members already bound."""
    reason: str
    fits: bool


@dataclass(frozen=True, slots=True)
class FitResult:
    workload: str
    fits: bool
    gangs: tuple[GangFit, ...]


def _charge(view: CapacityView, plan: Plan, *, gpu: str) -> None:
    for node, role, count in plan.slots:
        shape = plan.shape(role)
        if shape is not None:
            view.changes[node] = take(view[node], demand_of(shape, gpu=gpu), count)


def _frozen(*parts: Mapping[tuple[NodeName, str], int]) -> Mapping[NodeName, Mapping[str, int]]:
    out: dict[NodeName, dict[str, int]] = {}
    for part in parts:
        for (node, role), n in sorted(part.items()):
            per_role = out.setdefault(node, {})
            per_role[role] = per_role.get(role, 0) + n
    return MappingProxyType({n: MappingProxyType(r) for n, r in sorted(out.items())})


def fit_workload(
    tree: WorkloadTree, snapshot: ClusterSnapshot, *, settings: CoreSettings | None = None
) -> FitResult:
    settings = settings or CoreSettings()
    gpu = settings.gpu_resource
    view = CapacityView(index_of(snapshot, gpu=gpu).base)
    nobody = Ledger()
    results = []
    exclusive = any(g.topology is not None and g.topology.exclusive for g in tree.gangs)
    # Who is where, for exclusive domains: the cluster's gangs, then each gang planned here.
    occupied = occupants(snapshot, nobody, gpu=gpu, force=exclusive)
    for gang in tree.gangs:
        bound = placed_counts(gang.key, snapshot, nobody, gpu=gpu)
        by_role, nodes = per_role(bound), per_node(bound)
        already = sum(by_role.values())
        outcome = plan_gang(gang, snapshot=snapshot, capacity=view, placed=by_role,
                            policy=settings.policy, gpu=gpu, budget=settings.search_budget,
                            within=placed_domain(gang, snapshot, nodes), occupied=occupied)
        if isinstance(outcome, Infeasible):
            results.append(GangFit(gang.key, gang.min_member, already + outcome.placed,
                                   _frozen(bound), outcome.reason, False))
            continue
        _charge(view, outcome, gpu=gpu)
        for node in {n for n, _, _ in outcome.slots}:
            occupied.setdefault(node, []).append(gang)
        plan = _frozen(bound, {(n, r): c for n, r, c in outcome.slots})
        where = ", ".join(f"{n}: {sum(r.values())}" for n, r in plan.items())
        note = f"; {already} already bound" if already else ""
        reason = (f"gang {gang.key}: {already + outcome.pods} pods placed (minimum "
                  f"{gang.min_member}{note})" + (f" on {where}" if where else ""))
        results.append(GangFit(gang.key, gang.min_member, already + outcome.pods, plan, reason,
                               True))
    if not tree.gangs:
        results = _fit_pods_one_by_one(tree, snapshot, view, settings)
    return FitResult(tree.ref.key, all(g.fits for g in results), tuple(results))


def _fit_pods_one_by_one(
    tree: WorkloadTree, snapshot: ClusterSnapshot, view: CapacityView, settings: CoreSettings
) -> list[GangFit]:
    """No gangs: each pod on its own; a role is reported like a gang whose minimum is 0."""
    gpu = settings.gpu_resource
    out = []
    for role in tree.roles:
        eligible = {role.name: eligible_for(role.shape, snapshot, gpu=gpu)}
        placed: dict[NodeName, int] = {}
        reason = f"role {role.name}: all {role.pods} pods placed"
        for i in range(role.pods):
            single = place_gang(GangKey(f"{tree.ref.key}/{role.name}"),
                                [RoleDemand(role.name, role.shape, need=1)], capacity=view,
                                eligible=eligible, policy=settings.policy, gpu=gpu, budget=0)
            if isinstance(single, Infeasible):
                reason = (f"role {role.name}: {i} of {role.pods} pods fit; "
                          f"{single.reason.split('; ', 1)[-1]}")
                break
            _charge(view, single, gpu=gpu)
            node = single.slots[0][0]
            placed[node] = placed.get(node, 0) + 1
        plan = MappingProxyType({n: MappingProxyType({role.name: c})
                                 for n, c in sorted(placed.items())})
        count = sum(placed.values())
        out.append(GangFit(role.name, 0, count, plan, reason, count == role.pods))
    return out
