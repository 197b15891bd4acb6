"""The four answers an extender gives kube-scheduler: filter, prioritize, bind, preempt.

Each is a function of the snapshot, the ledger and ``now`` that returns a value with a reason
people can read. Filter and bind also record what they decided in the ledger (a new plan, a pod
reaching bind), which is why the server calls them under its lock.

- filter: a member of a planned gang gets only its planned nodes; an unplanned gang is planned
  whole on its first member (or every node fails with the reason); a pod outside any gang is
  kept off capacity reserved for gangs.
- bind (:mod:`extender.core.decide.barrier`, re-exported here): the barrier. Members are held until
  the gang's minimum have reached bind or are bound, then released together; a barrier whose
  next member does not come within ``bind_timeout`` fails them all; a pod the node no longer
  has room for is refused.
- preempt: for a gang that does not fit, only the victims of its one preemption plan
  (:mod:`extender.core.decide.preemption`), or none when no plan lets it fit whole; for
  anyone else, victims are whole gangs or no gang member at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType

from extender.core.decide.barrier import (
    BindDecision,
    BindOutcome,
    barrier_expired,
    barriers_on_lost_nodes,
    decide_bind,
    expired_barriers,
    gang_reached,
    withdraw,
)
from extender.core.decide.holders import Holder, holders_in_the_way, waiting_reason
from extender.core.decide.preemption import PreemptionPlan, plan_victims
from extender.core.decide.settings import CoreSettings
from extender.core.decide.slots import PlannedMember, pin, plan_lost_room, plan_misses
from extender.core.gang.capacity import (
    NodeCapacity,
    demand_of,
    describe_free,
    empty_capacity,
    empty_of,
    fits,
    index_of,
)
from extender.core.gang.constraints import exclusive_fences
from extender.core.gang.ledger import (
    Ledger,
    free_capacity,
    occupants,
    per_node,
    per_role,
    placed_counts,
    placed_in_of,
)
from extender.core.gang.narrowed import left_out, unplaced_narrower
from extender.core.gang.placement import (
    Infeasible,
    Plan,
    placed_domain,
    plan_gang,
)
from extender.core.gang.scoring import node_score
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, GangKey, NodeName, PodInfo

__all__ = [
    "BindDecision",
    "BindOutcome",
    "CoreSettings",
    "FilterDecision",
    "FilterOutcome",
    "barrier_expired",
    "barriers_on_lost_nodes",
    "decide_bind",
    "decide_filter",
    "decide_preempt",
    "decide_prioritize",
    "expired_barriers",
    "gang_reached",
    "withdraw",
]

_NONE: Mapping[NodeName, str] = MappingProxyType({})


class FilterOutcome(StrEnum):
    PINNED = "pinned"
    """A member of a gang with a live plan: only its planned nodes pass."""
    PLANNED = "planned"
    """This member's filter planned its whole gang."""
    SURPLUS = "surplus"
    """A member beyond what the gang's plan needs (its minimum is covered)."""
    WAITING = "waiting"
    """The gang does not fit now; every node fails."""
    NON_GANG = "non_gang"
    REJECTED = "rejected"
    """The gang could not fit even on an empty cluster, or the pod is malformed."""


@dataclass(frozen=True, slots=True)
class FilterDecision:
    passed: tuple[NodeName, ...]
    failed: Mapping[NodeName, str]
    """Nodes that fail now but preemption could help."""
    unresolvable: Mapping[NodeName, str]
    """Nodes that fail whatever is preempted."""
    outcome: FilterOutcome
    reason: str
    gang: GangKey | None = None
    plan: Plan | None = field(default=None, compare=False)
    holders: tuple[Holder, ...] = ()
    """WAITING: the other gangs' plans and pods in flight holding what the gang needs."""


def _pinned(
    member: PlannedMember, candidates: Sequence[NodeName], *, snapshot: ClusterSnapshot,
    ledger: Ledger, settings: CoreSettings, outcome: FilterOutcome,
) -> FilterDecision | None:
    """The member's planned nodes as filter's answer (:func:`~extender.core.decide.slots.pin`);
    ``None`` if the plan has no slot left for it."""
    pinned = pin(member, candidates, snapshot=snapshot, ledger=ledger, settings=settings)
    if pinned is None:
        return None
    return FilterDecision(pinned.passed, _NONE, pinned.unresolvable, outcome, pinned.reason,
                          member.gang.key, member.plan)

def _free_fit(
    pod: PodInfo, candidates: Sequence[NodeName], *, snapshot: ClusterSnapshot, ledger: Ledger,
    settings: CoreSettings, outcome: FilterOutcome, gang: GangKey | None,
) -> FilterDecision:
    """Pass candidates where ``pod`` fits without eating capacity reserved for gangs.

    kube-scheduler has already checked the scalar fit; this adds what it cannot see: other
    gangs' reservations, pods at our bind barrier, and GPU devices (a sharing pod needs room
    on one device).
    """
    gpu = settings.gpu_resource
    demand = demand_of(pod.shape, gpu=gpu)
    reserved_nodes: dict[NodeName, list[str]] = {}
    for key, res in ledger.reservations():
        if key != gang:
            for node, _, _ in res.plan.slots:
                reserved_nodes.setdefault(node, []).append(key)
    if not reserved_nodes and not ledger.in_flight() and not demand.gpu_milli:
        return FilterDecision(tuple(candidates), _NONE, _NONE, outcome,
                              "no reservations in the way", gang)
    with_res = free_capacity(snapshot, ledger, gpu=gpu, exclude=gang)
    without = free_capacity(snapshot, ledger, gpu=gpu, reservations=False)
    passed, failed, reserved = [], {}, {}
    for n in candidates:
        if n not in with_res:
            failed[n] = f"node {n} is not in the extender's snapshot yet"
        elif fits(with_res[n], demand):
            passed.append(n)
        elif n in reserved_nodes and fits(without[n], demand):
            gangs = ", ".join(sorted(set(reserved_nodes[n])))
            reserved[n] = f"capacity on {n} is reserved for gang {gangs}"
        else:
            failed[n] = f"{pod.key} does not fit on {n}: free {describe_free(without[n])}"
    reason = "fits outside reservations" if passed else "no candidate has room outside reservations"
    return FilterDecision(tuple(passed), MappingProxyType(failed), MappingProxyType(reserved),
                          outcome, reason, gang)


def _one_for_claims(
    pod: PodInfo, decided: FilterDecision, *, snapshot: ClusterSnapshot, ledger: Ledger,
    now: float, settings: CoreSettings,
) -> FilterDecision:
    """A pod of no gang that takes devices through ResourceClaims goes to one node, the one
    the policy scores best, and is counted there at once, in flight until it binds or the
    plan TTL passes. kube-scheduler's PreBind allocates its claims before its bind comes,
    and refusing that bind would not free them; a gang planned over the node meanwhile, from
    a count that left the pod out, would find the devices gone. Such pods give up
    kube-scheduler's scoring among the nodes Muster passes, as a gang's members do."""
    scored = decide_prioritize(pod, decided.passed, snapshot=snapshot, ledger=ledger, now=now,
                               settings=settings)
    best = max(scored, key=lambda ns: ns[1])[0]  # the first of the best, in kube's order
    ledger.mark_bind_requested(pod.uid, best, now=now, ttl=settings.plan_ttl)
    others = f"Muster sent pod {pod.key} to {best}, where it is counted until it binds"
    failed = {**decided.failed, **{n: others for n in decided.passed if n != best}}
    return replace(decided, passed=(best,), failed=MappingProxyType(failed),
                   reason=f"{decided.reason}; sent to {best}")


def decide_filter(
    pod: PodInfo, candidates: Sequence[NodeName], *, snapshot: ClusterSnapshot, ledger: Ledger,
    now: float, settings: CoreSettings,
) -> FilterDecision:
    ledger.expire(now)
    gang = snapshot.gang_of(pod.uid)
    pending = snapshot.unresolved.get(pod.uid)
    if gang is None and pending is not None:
        why = f"pod {pod.key} waits: {pending}; it may be a gang member"
        return FilterDecision((), MappingProxyType(dict.fromkeys(candidates, why)), _NONE,
                              FilterOutcome.WAITING, why, None)
    if gang is None:
        free = _free_fit(pod, candidates, snapshot=snapshot, ledger=ledger, settings=settings,
                         outcome=FilterOutcome.NON_GANG, gang=None)
        return _one_for_claims(pod, free, snapshot=snapshot, ledger=ledger, now=now,
                               settings=settings) if pod.claimed and free.passed else free
    ledger.recheck_admitted(gang.key, snapshot, gpu=settings.gpu_resource)
    role = snapshot.memberships[pod.uid].role
    if gang.member(role) is None:
        why = f"pod {pod.key} claims role {role!r}, which gang {gang.key} does not have"
        return FilterDecision((), _NONE, MappingProxyType(dict.fromkeys(candidates, why)),
                              FilterOutcome.REJECTED, why, gang.key)
    plan = ledger.plan_for(gang.key)
    planned = None if plan is None else PlannedMember(pod, gang, role, plan)
    if planned is not None and (
            plan_lost_room(planned, snapshot=snapshot, ledger=ledger, settings=settings)
            or plan_misses(planned, snapshot=snapshot, ledger=ledger, settings=settings)):
        # Something took the room of this member's every open slot behind Muster's back (a
        # pod of another scheduler, one bound by hand), or none is on a node the member's own
        # pod may use (its claim was allocated to another): kube-scheduler would never offer
        # those nodes, and the gang would wait out its plan. Plan it again now, around the
        # members already placed.
        ledger.drop_plan(gang.key)
        plan = planned = None
    if planned is not None:
        pinned = _pinned(planned, candidates, snapshot=snapshot, ledger=ledger,
                         settings=settings, outcome=FilterOutcome.PINNED)
        if pinned is not None:
            if pinned.passed:  # a member new to the plan keeps it alive (Ledger.progress)
                ledger.progress(gang.key, pod.uid, now=now, ttl=settings.plan_ttl)
            return pinned
    gpu = settings.gpu_resource
    at = placed_counts(gang.key, snapshot, ledger, gpu=gpu, exclude=pod.uid)
    by_role = per_role(at)
    domain = _gang_domain(gang, snapshot, ledger, gpu=gpu)
    if plan is not None and (ledger.is_admitted(gang.key) or left_out(plan, pod.uid) or
                             sum(by_role.values()) >= gang.min_member):
        # The plan is used up and the minimum is covered, or it left this member out as an
        # extra that did not fit where its own pod may go: this member is extra.
        extra = _free_fit(pod, candidates, snapshot=snapshot, ledger=ledger, settings=settings,
                          outcome=FilterOutcome.SURPLUS, gang=gang.key)
        return _fence(_keep_to_domain(extra, gang, domain, snapshot), gang, snapshot, ledger,
                      gpu=gpu)
    capacity = free_capacity(snapshot, ledger, gpu=gpu, exclude=gang.key)
    inside = placed_in_of(gang, snapshot, ledger, gpu=gpu, exclude=pod.uid)
    unplaced = tuple(unplaced_narrower(gang, snapshot, ledger.in_flight(), gpu=gpu,
                                       exclude=pod.uid))
    result = plan_gang(gang, snapshot=snapshot, capacity=capacity, placed=by_role,
                       policy=settings.policy, gpu=gpu, budget=settings.search_budget,
                       within=domain, occupied=occupants(snapshot, ledger, gpu=gpu),
                       placed_at=at, placed_in=inside, pending=unplaced)
    if isinstance(result, Infeasible):
        return _infeasible(result, gang, candidates, snapshot=snapshot, ledger=ledger,
                           settings=settings, placed=by_role, within=domain,
                           where=(at, inside), unplaced=unplaced)
    ledger.reserve(result, now=now, ttl=settings.plan_ttl)
    decided = _pinned(PlannedMember(pod, gang, role, result), candidates, snapshot=snapshot,
                      ledger=ledger, settings=settings, outcome=FilterOutcome.PLANNED)
    if decided is not None:
        return decided
    extra = _free_fit(pod, candidates, snapshot=snapshot, ledger=ledger, settings=settings,
                      outcome=FilterOutcome.SURPLUS, gang=gang.key)
    return _fence(_keep_to_domain(extra, gang, result.domain or domain, snapshot), gang,
                  snapshot, ledger, gpu=gpu)


def _infeasible(
    result: Infeasible, gang: Gang, candidates: Sequence[NodeName], *,
    snapshot: ClusterSnapshot, ledger: Ledger, settings: CoreSettings,
    placed: Mapping[str, int], within: str | None,
    where: tuple[Mapping[tuple[NodeName, str], int],
                 Mapping[tuple[NodeName, str, str], int] | None],
    unplaced: Sequence[PodInfo],
) -> FilterDecision:
    """Fail every node; unresolvable if even an empty cluster could not hold the gang, both
    from its templates and with its ``unplaced`` members whose pods carry node constraints
    their templates do not (a claim allocated to a node pins a member only until
    kube-scheduler deallocates it, and its devices are in no node's free count meanwhile).
    Otherwise the reason names who holds what the gang needs, if anyone in Muster does.
    ``where`` is where its placed pods run (``placed_at``, ``placed_in``)."""
    gpu = settings.gpu_resource
    empty = empty_of(snapshot, gpu=gpu)
    never = plan_gang(gang, snapshot=snapshot, capacity=empty, placed=placed,
                      policy=settings.policy, gpu=gpu, budget=settings.search_budget,
                      placed_at=where[0], placed_in=where[1])
    if isinstance(never, Infeasible) and unplaced:
        never = plan_gang(gang, snapshot=snapshot, capacity=empty, placed=placed,
                          policy=settings.policy, gpu=gpu, budget=settings.search_budget,
                          placed_at=where[0], placed_in=where[1], pending=unplaced)
    if isinstance(never, Infeasible):
        why = f"{result.reason} (it would not fit an empty cluster either)"
        return FilterDecision((), _NONE, MappingProxyType(dict.fromkeys(candidates, why)),
                              FilterOutcome.REJECTED, why, gang.key)
    holders = holders_in_the_way(gang, snapshot=snapshot, ledger=ledger, settings=settings,
                                 placed=placed, within=within)
    why = waiting_reason(result.reason, holders)
    return FilterDecision((), MappingProxyType(dict.fromkeys(candidates, why)), _NONE,
                          FilterOutcome.WAITING, why, gang.key, holders=holders)


def decide_prioritize(
    pod: PodInfo, candidates: Sequence[NodeName], *, snapshot: ClusterSnapshot, ledger: Ledger,
    now: float, settings: CoreSettings,
) -> list[tuple[NodeName, int]]:
    """0..10 per candidate: planned nodes first, then packing, GPU fragments and topology.

    A member's planned nodes score 10 and others 0. Everyone else is scored by the policy on
    capacity left outside reservations (:func:`~extender.core.gang.scoring.node_score`; under the
    default ``binpack`` at most 9: inside the topology domain the gang's placed members are in
    first, then nodes left without a new GPU fragment, the fuller node first).
    """
    del now  # scores depend on state only; kept for a uniform signature
    gang = snapshot.gang_of(pod.uid)
    if gang is not None:
        plan = ledger.plan_for(gang.key)
        role = snapshot.memberships[pod.uid].role
        if plan is not None and plan.nodes_for(role):
            planned = set(plan.nodes_for(role))
            return [(n, 10 if n in planned else 0) for n in candidates]
    gpu = settings.gpu_resource
    capacity = free_capacity(snapshot, ledger, gpu=gpu,
                             exclude=None if gang is None else gang.key)
    demand = demand_of(pod.shape, gpu=gpu)
    domain = _gang_domain(gang, snapshot, ledger, gpu=gpu)
    out = []
    # Nodes of a pool mostly share a few capacities: each is scored once per call.
    scores: dict[tuple[NodeCapacity, NodeCapacity, bool | None], int] = {}
    for n in candidates:
        node = snapshot.nodes.get(n)
        if node is None:
            out.append((n, 0))
            continue
        in_domain = None if domain is None or gang is None or gang.topology is None else (
            node.label(gang.topology.key) == domain)
        key = (capacity[n], empty_capacity(node, gpu=gpu), in_domain)
        score = scores.get(key)
        if score is None:
            score = scores[key] = node_score(settings.policy, key[0], demand, empty=key[1],
                                             in_domain=in_domain)
        out.append((n, score))
    return out


def _gang_domain(
    gang: Gang | None, snapshot: ClusterSnapshot, ledger: Ledger, *, gpu: str
) -> str | None:
    """The topology domain most of the gang's placed pods are in (ties: smallest value)."""
    if gang is None or gang.topology is None:
        return None
    return placed_domain(gang, snapshot, per_node(ledger.placed(gang.key, snapshot, gpu=gpu)))


def _fence(
    decision: FilterDecision, gang: Gang, snapshot: ClusterSnapshot, ledger: Ledger, *, gpu: str,
) -> FilterDecision:
    """A member beyond the plan may not go into a domain an exclusive other gang holds."""
    fenced, _ = exclusive_fences(gang, snapshot, occupants(snapshot, ledger, gpu=gpu))
    inside = [n for n in decision.passed if n in fenced]
    if not inside:
        return decision
    why = "the node is in a domain an exclusive gang holds"
    unresolvable = {**decision.unresolvable, **dict.fromkeys(inside, why)}
    passed = tuple(n for n in decision.passed if n not in fenced)
    return replace(decision, passed=passed, unresolvable=MappingProxyType(unresolvable),
                   reason=decision.reason if passed else why)


def _keep_to_domain(
    decision: FilterDecision, gang: Gang, domain: str | None, snapshot: ClusterSnapshot,
) -> FilterDecision:
    """A member beyond the plan of a gang that must stay in one domain: only that domain's
    nodes may pass."""
    topology = gang.topology
    if topology is None or not topology.required or domain is None:
        return decision
    outside = [n for n in decision.passed if snapshot.nodes[n].label(topology.key) != domain]
    if not outside:
        return decision
    why = f"gang {gang.key} keeps to {topology.key} {domain}, where its members run"
    unresolvable = {**decision.unresolvable, **dict.fromkeys(outside, why)}
    passed = tuple(n for n in decision.passed if n not in set(outside))
    return replace(decision, passed=passed, unresolvable=MappingProxyType(unresolvable),
                   reason=decision.reason if passed else why)


def decide_preempt(
    pod: PodInfo, victims: Mapping[NodeName, Sequence[str]], *, snapshot: ClusterSnapshot,
    ledger: Ledger, settings: CoreSettings, plan: PreemptionPlan | None = None,
) -> dict[NodeName, tuple[str, ...]]:
    """The victims to evict, per node kube-scheduler offered.

    A member of a gang without a placement gets only its gang's preemption ``plan``'s victims
    (:func:`plan_victims`), and none without a plan: evicting for one member of a gang that
    would still not fit whole helps nobody. Otherwise keep only nodes whose victims are
    whole gangs (all of a gang's pods on that node) or no gang member at all; a gang member
    with a placement may preempt only on its planned nodes."""
    own = snapshot.gang_of(pod.uid)
    if own is not None and ledger.plan_for(own.key) is None:
        return {} if plan is None or plan.gang != own.key else plan_victims(plan, victims,
                                                                           snapshot)
    gpu = settings.gpu_resource
    index = index_of(snapshot, gpu=gpu)
    allowed: set[NodeName] | None = None
    if own is not None:
        placement = ledger.plan_for(own.key)
        if placement is not None:
            allowed = set(placement.nodes_for(snapshot.memberships[pod.uid].role))
    out: dict[NodeName, tuple[str, ...]] = {}
    for node in sorted(victims):
        if allowed is not None and node not in allowed:
            continue
        chosen: set[str] = set()
        whole = True
        for uid in victims[node]:
            chosen.add(uid)
            gang = snapshot.gang_of(uid)
            if gang is None:
                continue
            if own is not None and gang.key == own.key:
                whole = False  # never preempt one's own gang
                break
            holding = [u for u in index.gang_pods.get(gang.key, ())
                       if snapshot.pods[u].holds_resources or u in ledger.in_flight()]
            if any(snapshot.pods[u].node_name != node for u in holding):
                whole = False  # the gang spans nodes: evicting here would leave it partial
                break
            chosen.update(holding)
        if whole and chosen:
            out[node] = tuple(sorted(chosen))
    return out

