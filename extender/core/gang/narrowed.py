"""Members whose own pods may use fewer nodes than their role's pod template.

A gang is planned per role from the role's template, its members interchangeable. A member's
own pod can be narrower: a pod whose ResourceClaim is already allocated (kube-scheduler leaves
it allocated after a failed bind, until its DynamicResources PostFilter deallocates it) may go
only onto the claim's nodes, which :mod:`~extender.core.devices.attach` ANDs into its required
node affinity; any pod may carry a nodeSelector or node affinity its template lacks. Such a
member (:class:`Narrowed`) is planned as a demand of its own, on the nodes both allow, and the
plan keeps that slot for it (:attr:`~extender.core.gang.plans.Plan.kept_for`): other members
are not sent there.

Pure: reads the snapshot and the ledger's pods in flight; nothing here counts capacity or
packs pods.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass

from extender.core.gang.capacity import index_of
from extender.core.gang.constraints import ineligibility
from extender.core.gang.plans import Plan, RoleDemand
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, NodeName, PodInfo, PodShape

SHOWN_NODES = 4
"""Nodes a reason names for one narrowed member; the rest are counted."""


@dataclass(frozen=True, slots=True)
class Narrowed:
    """A member not placed yet whose own pod allows only some of its role's nodes."""

    uid: str
    name: str
    role: str
    shape: PodShape
    """The pod's own, what it takes on its node: a claim allocated and not reserved for it
    alone is out of its node's free count already and not asked again (its template asks
    it)."""
    nodes: tuple[NodeName, ...]
    """The role's nodes the pod's own constraints allow, in the role's order."""

    @property
    def demand_role(self) -> str:
        """The name its demand is packed under: a role name never has a space."""
        return f"{self.role} {self.name}"


def narrower(pod: PodShape, template: PodShape) -> bool:
    """Whether the pod carries node constraints its template does not (cheap; the nodes
    decide whether they narrow anything)."""
    return pod.affinity != template.affinity or pod.node_selector != template.node_selector


def unplaced_narrower(
    gang: Gang, snapshot: ClusterSnapshot, in_flight: Collection[str], *, gpu: str,
    exclude: str | None = None,
) -> Iterator[PodInfo]:
    """The gang's pods neither bound nor in flight (``exclude``, the pod being filtered, is
    counted as not placed either), nor being deleted, that carry node constraints their
    role's template does not (:func:`narrower`)."""
    for uid in index_of(snapshot, gpu=gpu).gang_pods.get(gang.key, ()):
        pod = snapshot.pods[uid]
        if pod.node_name is not None or pod.deleting or (uid != exclude and uid in in_flight):
            continue
        member = snapshot.memberships.get(uid)
        template = None if member is None else gang.member(member.role)
        if template is not None and narrower(pod.shape, template.shape):
            yield pod


def narrowed_members(
    pods: Sequence[PodInfo], snapshot: ClusterSnapshot, *,
    demands: Sequence[RoleDemand], eligible: Mapping[str, Sequence[NodeName]],
    allowed: Callable[[PodShape], Sequence[NodeName]],
) -> list[Narrowed]:
    """Of ``pods`` (members not placed yet, in order), those whose own pod allows fewer of
    its role's ``eligible`` nodes than the role's template (its demand's shape), as many per
    role as ``demands`` still asks (a member beyond them is surplus); ``allowed`` gives the
    nodes a shape may use."""
    room = {rd.role: rd.need + rd.extra for rd in demands}
    templates = {rd.role: rd.shape for rd in demands}
    out = []
    for pod in pods:
        member = snapshot.memberships.get(pod.uid)
        template = None if member is None else templates.get(member.role)
        if (member is None or template is None or room[member.role] <= 0
                or not narrower(pod.shape, template)):
            continue
        role_nodes = eligible.get(member.role, ())
        own = set(allowed(pod.shape))
        nodes = tuple(n for n in role_nodes if n in own)
        if len(nodes) < len(role_nodes):
            room[member.role] -= 1
            out.append(Narrowed(pod.uid, pod.name, member.role, pod.shape, nodes))
    return out


def split_demands(
    demands: Sequence[RoleDemand], narrowed: Sequence[Narrowed],
    eligible: Mapping[str, tuple[NodeName, ...]],
) -> tuple[list[RoleDemand], dict[str, tuple[NodeName, ...]], dict[str, Narrowed]]:
    """``demands`` with one pod of its role's taken out for each narrowed member, its own
    demand packed first on its own nodes. It is one of the role's extras while any is left
    (the role's other pods, made or to come, can make the minimum without it: it is placed
    if it fits there), else of the minimum. Returns the demands, the eligible nodes of each,
    and the narrowed members by the name their demand has."""
    by_role = {rd.role: rd for rd in demands}
    own: list[RoleDemand] = []
    kept: dict[str, Narrowed] = {}
    for member in narrowed:
        rd = by_role[member.role]  # narrowed_members counted it in
        need = 0 if rd.extra else 1
        by_role[member.role] = RoleDemand(rd.role, rd.shape, need=rd.need - need,
                                          extra=rd.extra - (1 - need))
        own.append(RoleDemand(member.demand_role, member.shape, need=need, extra=1 - need,
                              first=True))
        kept[member.demand_role] = member
    rest = [by_role[rd.role] for rd in demands if by_role[rd.role].need + by_role[rd.role].extra]
    nodes = dict(eligible)
    nodes.update({name: m.nodes for name, m in kept.items()})
    return [*own, *rest], nodes, kept


def join_roles(plan: Plan, kept: Mapping[str, Narrowed], gang: Gang) -> Plan:
    """``plan`` with its narrowed members' demands back in their roles' slots, each slot
    kept for its member (:attr:`Plan.kept_for`); a member planned only beyond the minimum
    and not placed is in no slot."""
    if not kept:
        return plan
    slots: dict[tuple[NodeName, str], int] = {}
    kept_for = []
    for node, packed, n in plan.slots:
        member = kept.get(packed)
        role = packed if member is None else member.role
        if member is not None:
            kept_for.append((member.uid, node, role))
        slots[(node, role)] = slots.get((node, role), 0) + n
    roles = sorted({r for _, r in slots})
    shapes = tuple((r, m.shape) for r in roles for m in gang.members if m.role == r)
    return Plan(gang=plan.gang, slots=tuple(sorted((n, r, c) for (n, r), c in slots.items())),
                shapes=shapes, domain=plan.domain, required=plan.required,
                subgroup_domains=plan.subgroup_domains, placed=plan.placed,
                kept_for=tuple(sorted(kept_for)),
                narrowed=tuple(sorted(m.uid for m in kept.values())))


def confined(
    eligible: Mapping[str, tuple[NodeName, ...]], narrowed: Sequence[Narrowed],
    demands: Sequence[RoleDemand],
) -> dict[str, tuple[NodeName, ...]]:
    """``eligible`` with each role whose every pod still to place is narrowed kept to the
    nodes those pods may use (for a planner that packs a role's pods alike: a subgroups'
    plan, checked after by :func:`keep_in`)."""
    out = dict(eligible)
    for rd in demands:
        mine = [m for m in narrowed if m.role == rd.role]
        if mine and len(mine) == rd.need + rd.extra:
            union = {n for m in mine for n in m.nodes}
            out[rd.role] = tuple(n for n in eligible.get(rd.role, ()) if n in union)
    return out


def keep_in(plan: Plan, narrowed: Sequence[Narrowed]) -> Plan | str:
    """``plan`` (made without regard to ``narrowed``) with a slot kept for each narrowed
    member on one of its own nodes, the most narrowed first; else why not."""
    left = {(n, r): c for n, r, c in plan.slots}
    kept_for = []
    for member in sorted(narrowed, key=lambda m: (len(m.nodes), m.uid)):
        node = next((n for n in member.nodes if left.get((n, member.role), 0) > 0), None)
        if node is None:
            return (f"the plan has no {member.role} slot on a node its pod {member.name} may "
                    f"use ({_listed(member)})")
        left[(node, member.role)] -= 1
        kept_for.append((member.uid, node, member.role))
    return Plan(gang=plan.gang, slots=plan.slots, shapes=plan.shapes, domain=plan.domain,
                required=plan.required, subgroup_domains=plan.subgroup_domains,
                placed=plan.placed, kept_for=tuple(sorted(kept_for)),
                narrowed=tuple(sorted(m.uid for m in narrowed)))


def _listed(member: Narrowed) -> str:
    """The nodes ``member`` may go to, the first few named."""
    if not member.nodes:
        return "none of its role's nodes"
    more = len(member.nodes) - SHOWN_NODES
    return ", ".join(member.nodes[:SHOWN_NODES]) + (f" and {more} more" if more > 0 else "")


def why_narrowed(narrowed: Sequence[Narrowed]) -> str:
    """What a failure says about the narrowed members it was planned with."""
    first = narrowed[0]
    others = len(narrowed) - 1
    return (f"its {first.role} {first.name} may go only to {_listed(first)}, as its own "
            "pod's node constraints say (a ResourceClaim allocated to a node adds that node)"
            + (f"; {others} more member{'s are' if others != 1 else ' is'} narrowed so"
               if others else ""))


def left_out(plan: Plan, pod: str) -> bool:
    """Whether ``plan`` was made with ``pod``'s own node constraints and has no slot for it
    (an extra that did not fit where it may go): planning again would leave it out again."""
    return pod in plan.narrowed and all(uid != pod for uid, _, _ in plan.kept_for)


def kept_for_others(
    plan: Plan, pod: str, role: str, snapshot: ClusterSnapshot, in_flight: Collection[str],
) -> dict[NodeName, int]:
    """Node -> slots of ``role`` the plan keeps for narrowed members other than ``pod`` that
    are still to be placed (pending, not in flight, not being deleted)."""
    out: dict[NodeName, int] = {}
    for uid, node, kept_role in plan.kept_for:
        other = snapshot.pods.get(uid)
        if (uid != pod and kept_role == role and other is not None and other.node_name is None
                and not other.deleting and uid not in in_flight):
            out[node] = out.get(node, 0) + 1
    return out


def own_nodes(
    pod: PodInfo, template: PodShape, nodes: Sequence[NodeName], snapshot: ClusterSnapshot,
) -> frozenset[NodeName] | None:
    """Of ``nodes``, those ``pod``'s own constraints allow, when it carries constraints its
    ``template`` does not; ``None`` when it does not (every node of its role is its)."""
    if not narrower(pod.shape, template):
        return None
    return frozenset(n for n in nodes if n in snapshot.nodes
                     and ineligibility(pod.shape, snapshot.nodes[n]) is None)
