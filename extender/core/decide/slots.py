"""A planned member's slots: the nodes its gang's plan still holds open for it, and the one it
claims.

Filter passes a member of a gang with a live plan only nodes where the plan has a slot of its
role open (:func:`open_slots`), and of those one alone, which it claims in the ledger
(:func:`pin`), so that members filtered together go to different slots. A plan whose open
slots all lost their room (:func:`plan_lost_room`), or none of whose open slots is on a node
the member's own pod allows (:func:`plan_misses`), is planned again by filter.

Pure: reads the snapshot and the ledger; writes only a claim (``Ledger.claim``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from extender.core.decide.settings import CoreSettings
from extender.core.gang.ledger import Ledger
from extender.core.gang.narrowed import kept_for_others, left_out, narrower, own_nodes
from extender.core.gang.placement import Plan
from extender.core.gang.room import lack_of_room
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, NodeName, PodInfo

__all__ = ["Pinned", "PlannedMember", "open_slots", "pin", "plan_lost_room", "plan_misses"]


@dataclass(frozen=True, slots=True)
class PlannedMember:
    """A gang member's pod, its role, and the gang's live plan its slots are read from."""

    pod: PodInfo
    gang: Gang
    role: str
    plan: Plan


@dataclass(frozen=True, slots=True)
class Pinned:
    """The nodes a planned member's filter passes, and why."""

    passed: tuple[NodeName, ...]
    """One open slot's node claimed for it, or every offered open node when other members'
    claims cover them; empty when kube-scheduler offered none of them."""
    unresolvable: Mapping[NodeName, str]
    """The offered nodes outside the plan, only when none passed."""
    reason: str


def pin(
    member: PlannedMember, candidates: Sequence[NodeName], *, snapshot: ClusterSnapshot,
    ledger: Ledger, settings: CoreSettings,
) -> Pinned | None:
    """Pass one of the plan's open nodes for the member's role (:func:`_claim`), or all of the
    offered ones if other members' claims cover them; ``None`` if the plan has none left."""
    slots = _open_counts(member, snapshot=snapshot, ledger=ledger, settings=settings)
    if not slots:
        return None
    passed = tuple(n for n in candidates if n in slots)
    if passed:
        one = _claim(member, passed, slots, snapshot=snapshot, ledger=ledger)
        if one is not None:
            passed = (one,)
    gang, role = member.gang, member.role
    shown = passed or tuple(sorted(slots))
    where = ", ".join(shown[:8]) + (f" and {len(shown) - 8} more" if len(shown) > 8 else "")
    note = f"gang {gang.key} placed this {role} on {where}"
    others = f"gang {gang.key} placed this {role} elsewhere (reserved plan)"
    # Reasons for the other nodes matter only when none passed (kube-scheduler reports them);
    # a pinned member of a big gang is filtered every cycle, over thousands of nodes.
    unresolvable = {} if passed else {n: others for n in candidates if n not in slots}
    reason = note if passed else f"{note}, but kube-scheduler offered none of them"
    return Pinned(passed, MappingProxyType(unresolvable), reason)


def _claim(
    member: PlannedMember, offered: Sequence[NodeName], slots: Mapping[NodeName, int], *,
    snapshot: ClusterSnapshot, ledger: Ledger,
) -> NodeName | None:
    """The one offered open node this member takes, claimed in the ledger; ``None`` when
    other members' claims fill every offered slot (a claim whose pod never came to bind:
    the member is then offered them all, as before claims).

    With one node passed, kube-scheduler binds the pod there without scoring (no prioritize
    call, none of its own score plugins). Its own earlier claim is kept if still offered, so
    a member filtered again goes where it was sent. Other members' claims count against a
    node's open slots until their pod is placed (in flight or bound; then ``slots`` counts
    it) or gone."""
    pod, gang, role = member.pod, member.gang, member.role
    claims = ledger.claims(gang.key)
    mine = claims.get(pod.uid)
    if mine is not None and mine[0] in offered:
        return mine[0]
    taken: dict[NodeName, int] = {}
    flying = ledger.in_flight()
    for uid, (node, claimed_role) in claims.items():
        if uid == pod.uid or claimed_role != role or node not in slots or uid in flying:
            continue
        other = snapshot.pods.get(uid)
        if other is not None and other.node_name is None and not other.deleting:
            taken[node] = taken.get(node, 0) + 1
    for node in offered:
        if slots[node] > taken.get(node, 0):
            ledger.claim(gang.key, pod.uid, node, role)
            return node
    return None


def open_slots(
    member: PlannedMember, *, snapshot: ClusterSnapshot, ledger: Ledger, settings: CoreSettings,
) -> set[NodeName]:
    """The nodes where the plan still has a slot of the member's role open for its pod: the
    only nodes a planned member's filter can pass, whatever else is offered."""
    return set(_open_counts(member, snapshot=snapshot, ledger=ledger, settings=settings))


def _open_counts(
    member: PlannedMember, *, snapshot: ClusterSnapshot, ledger: Ledger, settings: CoreSettings,
) -> dict[NodeName, int]:
    """Node -> slots of the member's role the plan still has open there for its pod (only
    nodes with one at least) that its own pod may use (:func:`_open_to_role`)."""
    out = _open_to_role(member, snapshot=snapshot, ledger=ledger, settings=settings)
    role = member.gang.member(member.role)
    own = None if role is None else own_nodes(member.pod, role.shape, tuple(out), snapshot)
    return out if own is None else {n: k for n, k in out.items() if n in own}


def _open_to_role(
    member: PlannedMember, *, snapshot: ClusterSnapshot, ledger: Ledger, settings: CoreSettings,
) -> dict[NodeName, int]:
    """Node -> slots of the member's role the plan still has open there for any pod of the
    role like the member's (not those it keeps for other members still to be placed)."""
    pod, gang, role, plan = member.pod, member.gang, member.role, member.plan
    placed = ledger.placed(gang.key, snapshot, gpu=settings.gpu_resource)
    own = _where(pod, ledger)
    domain = _subgroup_domain(pod, gang, plan, snapshot)
    kept = (kept_for_others(plan, pod.uid, role, snapshot, ledger.in_flight())
            if plan.kept_for else {})
    out: dict[NodeName, int] = {}
    for n in plan.nodes_for(role):
        have = placed.get((n, role), 0) - (1 if own == n else 0)
        left = plan.count(n, role) - have - kept.get(n, 0)
        if left > 0 and n in snapshot.nodes and (
                domain is None or snapshot.nodes[n].label(domain[0]) == domain[1]):
            out[n] = left
    return out


def plan_misses(
    member: PlannedMember, *, snapshot: ClusterSnapshot, ledger: Ledger, settings: CoreSettings,
) -> bool:
    """Whether the plan has slots of the member's role open but none on a node its pod's own
    constraints allow (a plan made before its claim was allocated to a node), though it was
    not made knowing it could leave the pod out."""
    role = member.gang.member(member.role)
    pod = member.pod
    if role is None or not narrower(pod.shape, role.shape) or left_out(member.plan, pod.uid):
        return False
    return bool(_open_to_role(member, snapshot=snapshot, ledger=ledger,
                              settings=settings)) and not _open_counts(
        member, snapshot=snapshot, ledger=ledger, settings=settings)


def _subgroup_domain(pod: PodInfo, gang: Gang, plan: Plan,
                     snapshot: ClusterSnapshot) -> tuple[str, str] | None:
    """``(label key, value)`` of the domain the plan gives the pod's own subgroup, when its
    pods say which subgroup they are in (a LeaderWorkerSet's): a pod takes only its
    subgroup's slots, as the pod affinity LeaderWorkerSet writes would have it."""
    sub = gang.subgroups
    member = snapshot.memberships.get(pod.uid)
    if sub is None or sub.label is None or member is None or member.subgroup is None:
        return None
    name = sub.unit_name(member.subgroup)
    domain = dict(plan.subgroup_domains).get(name) if name is not None else None
    return None if domain is None else (sub.key, domain)


def plan_lost_room(
    member: PlannedMember, *, snapshot: ClusterSnapshot, ledger: Ledger, settings: CoreSettings,
) -> bool:
    """Whether capacity the plan counts on was taken behind Muster's back since it was
    made: its slots of the member's role open for its pod have no room for it any more, or
    some node of the plan cannot hold the slots still open on it
    (:func:`~extender.core.gang.freeview.short_node`)."""
    slots = open_slots(member, snapshot=snapshot, ledger=ledger, settings=settings)
    if slots and all(lack_of_room(member.pod, n, snapshot=snapshot, ledger=ledger,
                                  gpu=settings.gpu_resource, exclude=member.gang.key) is not None
                     for n in sorted(slots)):
        return True
    return ledger.plan_short_on(member.plan, snapshot, gpu=settings.gpu_resource) is not None


def _where(pod: PodInfo, ledger: Ledger) -> NodeName | None:
    """Where the pod itself is counted as placed (bound or in flight), if anywhere."""
    if pod.node_name is not None:
        return pod.node_name if pod.holds_resources else None
    flight = ledger.in_flight().get(pod.uid)
    return None if flight is None else flight.node
