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
from extender.core.decide.holders import Holder, describe_holders, holders_in_the_way
from extender.core.decide.preemption import PreemptionPlan
from extender.core.decide.settings import CoreSettings
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
from extender.core.gang.narrowed import (
    kept_for_others,
    left_out,
    narrower,
    own_nodes,
    unplaced_narrower,
)
from extender.core.gang.placement import (
    Infeasible,
    Plan,
    placed_domain,
    plan_gang,
)
from extender.core.gang.room import lack_of_room
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
    "open_slots",
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
    pod: PodInfo, gang: Gang, role: str, plan: Plan, candidates: Sequence[NodeName], *,
    snapshot: ClusterSnapshot, ledger: Ledger, settings: CoreSettings, outcome: FilterOutcome,
) -> FilterDecision | None:
    """Pass one of the plan's open nodes for ``role`` (:func:`_claim`), or all of the offered
    ones if other members' claims cover them; ``None`` if the plan has none left."""
    slots = _open_counts(pod, gang, role, plan, snapshot=snapshot, ledger=ledger,
                         settings=settings)
    if not slots:
        return None
    passed = tuple(n for n in candidates if n in slots)
    if passed:
        one = _claim(pod, gang, role, passed, slots, snapshot=snapshot, ledger=ledger)
        if one is not None:
            passed = (one,)
    shown = passed or tuple(sorted(slots))
    where = ", ".join(shown[:8]) + (f" and {len(shown) - 8} more" if len(shown) > 8 else "")
    note = f"gang {gang.key} placed this {role} on {where}"
    others = f"gang {gang.key} placed this {role} elsewhere (reserved plan)"
    # Reasons for the other nodes matter only when none passed (kube-scheduler reports them);
    # a pinned member of a big gang is filtered every cycle, over thousands of nodes.
    unresolvable = {} if passed else {n: others for n in candidates if n not in slots}
    reason = note if passed else f"{note}, but kube-scheduler offered none of them"
    return FilterDecision(passed, _NONE, MappingProxyType(unresolvable), outcome, reason,
                          gang.key, plan)


def _claim(
    pod: PodInfo, gang: Gang, role: str, offered: Sequence[NodeName],
    slots: Mapping[NodeName, int], *, snapshot: ClusterSnapshot, ledger: Ledger,
) -> NodeName | None:
    """The one offered open node this member takes, claimed in the ledger; ``None`` when
    other members' claims fill every offered slot (a claim whose pod never came to bind:
    the member is then offered them all, as before claims).

    With one node passed, kube-scheduler binds the pod there without scoring (no prioritize
    call, none of its own score plugins). Its own earlier claim is kept if still offered, so
    a member filtered again goes where it was sent. Other members' claims count against a
    node's open slots until their pod is placed (in flight or bound; then ``slots`` counts
    it) or gone."""
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
    pod: PodInfo, gang: Gang, role: str, plan: Plan, *, snapshot: ClusterSnapshot,
    ledger: Ledger, settings: CoreSettings,
) -> set[NodeName]:
    """The nodes where ``plan`` still has a slot of ``role`` open for ``pod``: the only nodes a
    planned member's filter can pass, whatever else is offered."""
    return set(_open_counts(pod, gang, role, plan, snapshot=snapshot, ledger=ledger,
                            settings=settings))


def _open_counts(
    pod: PodInfo, gang: Gang, role: str, plan: Plan, *, snapshot: ClusterSnapshot,
    ledger: Ledger, settings: CoreSettings,
) -> dict[NodeName, int]:
    """Node -> slots of ``role`` ``plan`` still has open there for ``pod`` (only nodes with
    one at least) that its own pod may use (:func:`_open_to_role`)."""
    out = _open_to_role(pod, gang, role, plan, snapshot=snapshot, ledger=ledger,
                        settings=settings)
    member = gang.member(role)
    own = None if member is None else own_nodes(pod, member.shape, tuple(out), snapshot)
    return out if own is None else {n: k for n, k in out.items() if n in own}


def _open_to_role(
    pod: PodInfo, gang: Gang, role: str, plan: Plan, *, snapshot: ClusterSnapshot,
    ledger: Ledger, settings: CoreSettings,
) -> dict[NodeName, int]:
    """Node -> slots of ``role`` ``plan`` still has open there for any pod of the role like
    ``pod`` (not those it keeps for other members still to be placed)."""
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
    pod: PodInfo, gang: Gang, role: str, plan: Plan, *, snapshot: ClusterSnapshot,
    ledger: Ledger, settings: CoreSettings,
) -> bool:
    """Whether ``plan`` has slots of ``role`` open but none on a node ``pod``'s own
    constraints allow (a plan made before its claim was allocated to a node), though it was
    not made knowing it could leave ``pod`` out."""
    member = gang.member(role)
    if member is None or not narrower(pod.shape, member.shape) or left_out(plan, pod.uid):
        return False
    return bool(_open_to_role(pod, gang, role, plan, snapshot=snapshot, ledger=ledger,
                              settings=settings)) and not _open_counts(
        pod, gang, role, plan, snapshot=snapshot, ledger=ledger, settings=settings)


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
    pod: PodInfo, gang: Gang, role: str, plan: Plan, *, snapshot: ClusterSnapshot,
    ledger: Ledger, settings: CoreSettings,
) -> bool:
    """Whether ``plan`` has slots of ``role`` open for ``pod`` but none of their nodes has
    room for it any more (capacity taken behind Muster's back since the plan was made)."""
    slots = open_slots(pod, gang, role, plan, snapshot=snapshot, ledger=ledger,
                       settings=settings)
    return bool(slots) and all(
        lack_of_room(pod, n, snapshot=snapshot, ledger=ledger, gpu=settings.gpu_resource,
                     exclude=gang.key) is not None for n in sorted(slots))


def _where(pod: PodInfo, ledger: Ledger) -> NodeName | None:
    """Where the pod itself is counted as placed (bound or in flight), if anywhere."""
    if pod.node_name is not None:
        return pod.node_name if pod.holds_resources else None
    flight = ledger.in_flight().get(pod.uid)
    return None if flight is None else flight.node


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
        return _free_fit(pod, candidates, snapshot=snapshot, ledger=ledger, settings=settings,
                         outcome=FilterOutcome.NON_GANG, gang=None)
    ledger.recheck_admitted(gang.key, snapshot, gpu=settings.gpu_resource)
    role = snapshot.memberships[pod.uid].role
    if gang.member(role) is None:
        why = f"pod {pod.key} claims role {role!r}, which gang {gang.key} does not have"
        return FilterDecision((), _NONE, MappingProxyType(dict.fromkeys(candidates, why)),
                              FilterOutcome.REJECTED, why, gang.key)
    plan = ledger.plan_for(gang.key)
    if plan is not None and (
            plan_lost_room(pod, gang, role, plan, snapshot=snapshot, ledger=ledger,
                           settings=settings)
            or plan_misses(pod, gang, role, plan, snapshot=snapshot, ledger=ledger,
                           settings=settings)):
        # Something took the room of this member's every open slot behind Muster's back (a
        # pod of another scheduler, one bound by hand), or none is on a node the member's own
        # pod may use (its claim was allocated to another): kube-scheduler would never offer
        # those nodes, and the gang would wait out its plan. Plan it again now, around the
        # members already placed.
        ledger.drop_plan(gang.key)
        plan = None
    if plan is not None:
        pinned = _pinned(pod, gang, role, plan, candidates, snapshot=snapshot, ledger=ledger,
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
    decided = _pinned(pod, gang, role, result, candidates, snapshot=snapshot, ledger=ledger,
                      settings=settings, outcome=FilterOutcome.PLANNED)
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
    why = f"{result.reason}; {describe_holders(holders)}" if holders else result.reason
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


def plan_victims(plan: PreemptionPlan, offered: Mapping[NodeName, Sequence[str]],
                 snapshot: ClusterSnapshot) -> dict[NodeName, tuple[str, ...]]:
    """Per offered node, every pod of the plan's victims there that still runs.

    kube-scheduler evicts the victims of the one node it picks, and an extender may only name
    pods on that node; a victim gang spanning nodes is evicted over the preemptor's next
    members' calls, which get the same plan. To leave no victim gang partial for longer
    than needed, nodes holding the rest of a victim already partly evicted are answered
    alone when offered."""
    out: dict[NodeName, tuple[str, ...]] = {}
    for node in sorted(offered):
        running = tuple(u for u in plan.pods_on(node) if u in snapshot.pods
                        and not snapshot.pods[u].deleting and snapshot.pods[u].holds_resources)
        if running:
            out[node] = running
    started = {v.key for v in plan.victims
               if any(u not in snapshot.pods or snapshot.pods[u].deleting or
                      not snapshot.pods[u].holds_resources for u, _ in v.pods)}
    if started:
        unfinished = {n for v in plan.victims if v.key in started for _, n in v.pods}
        first = {n: uids for n, uids in out.items() if n in unfinished}
        if first:
            return first
    return out
