"""The gang session: every decision Muster makes about gangs, and the state they need.

One :class:`GangSession` owns the ledger (plans, pods in flight, barriers), the bind requests
held at the barrier (:mod:`extender.core.decide.held`), the pods turned away and the last reason and
event per gang and pod. Its verbs (``filter``, ``prioritize``, ``bind``/``poll``,
``preempt``, ``tick``) take the snapshot and ``now`` and return their decision with the
effects to carry out (:mod:`extender.core.decide.effects`). It reads no clock, holds no lock and
does no I/O: the server (real time, threads, the API server) and the simulator (a virtual
clock) drive the same session, so they decide alike by construction.

What happens to a plan, in one place::

    filter ─plan─▶ reserved ─members reach bind─▶ barrier ─minimum─▶ admitted ─filled─▶ settled
                      │ TTL                          │ bind timeout / yield / node lost
                      ▼                              ▼
                   expired                        withdrawn (held requests fail; planned again)

A gang whose workload is deleted is forgotten at the next look at the cluster (``_sweep``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from extender.core.decide.barrier import (
    BindOutcome,
    barriers_on_lost_nodes,
    decide_bind,
    expired_barriers,
    withdraw,
)
from extender.core.decide.decisions import (
    FilterDecision,
    FilterOutcome,
    decide_preempt,
    decide_prioritize,
    open_slots,
    plan_lost_room,
)
from extender.core.decide.effects import (
    BindParked,
    BindStep,
    Effect,
    Emit,
    Evict,
    FailHeld,
    PlanExpired,
    Release,
    Requeue,
    Step,
    Withdrawn,
    WorkloadRefused,
)
from extender.core.decide.gating import GATHERING, GateBook, decide_ungates
from extender.core.decide.held import HeldBinds, Hold
from extender.core.decide.holders import Holder
from extender.core.decide.planning import GangPlanner
from extender.core.decide.podnews import PodNews
from extender.core.decide.preemption import PreemptionPlan, plan_preemption
from extender.core.decide.settings import CoreSettings
from extender.core.decide.yields import decide_yields
from extender.core.gang.ledger import Ledger
from extender.core.model.notices import EventType, PodEvent, PodRef, WorkloadEvent
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import GangKey, NodeName, PodInfo

_STALE_REASONS = 256
"""Reasons kept for gangs that are gone before they are forgotten in one pass."""


@dataclass(frozen=True, slots=True)
class TurnedAway:
    """A pod filter failed everywhere, and what could change that without kube-scheduler
    seeing a cluster event."""

    pod: PodRef
    untrusted: bool
    """Turned away because the cluster state was not trusted (not synced, watch broken)."""
    unresolved: bool
    """Its workload or an owner between was not observed yet."""
    plans: frozenset[GangKey]
    """The plans holding capacity at the time; one of them ending may make room."""


class Offer(Protocol):
    """The nodes kube-scheduler's own filters passed, asked for lazily.

    The extender protocol sends every one of them; a caller that can list a subset cheaply
    (the simulator, with 10,000 nodes) offers this instead, and the session asks only for the
    nodes the answer can depend on: a planned member passes exactly the offered nodes among
    its plan's open slots, so those are all it needs."""

    def all(self) -> Sequence[NodeName]:
        """Every offered node."""

    def among(self, names: Sequence[NodeName]) -> Sequence[NodeName]:
        """The offered nodes among ``names``, in the order of ``names``."""


@dataclass(frozen=True, slots=True)
class FilterStep:
    decision: FilterDecision
    effects: tuple[Effect, ...] = ()


@dataclass(frozen=True, slots=True)
class PreemptStep:
    victims: dict[NodeName, tuple[str, ...]]
    """Node -> the pod UIDs kube-scheduler may evict there (only nodes with victims)."""
    effects: tuple[Effect, ...] = ()


@dataclass(frozen=True, slots=True)
class Entry:
    """One line of the session's journal: a verb, who asked, what it decided, its effects."""

    verb: str
    now: float
    pod: str
    outcome: str
    reason: str
    effects: tuple[Effect, ...] = field(default=())


class GangSession:
    """Gang decisions over time; see the module docstring."""

    def __init__(self, settings: CoreSettings, *, journal: list[Entry] | None = None) -> None:
        self.settings = settings
        self.ledger = Ledger()
        self.held = HeldBinds()
        self.journal = journal
        """When a list is given, every verb appends what it decided (the conformance test
        compares the server's and the simulator's)."""
        self.turned_away: dict[str, TurnedAway] = {}
        self.last_reason: dict[GangKey, str] = {}
        self.reasons_version = 0
        """Bumped whenever a gang's last reason changes (what shows it may be written again)."""
        self.holders: dict[GangKey, tuple[Holder, ...]] = {}
        """Gang -> who held what it needed at its last filter (empty once it fits)."""
        self.expired_total = 0
        self._last_event: dict[str, tuple[str, str]] = {}
        self._refusals_told: dict[str, str] = {}
        self._workload_told: dict[GangKey, tuple[str, str]] = {}
        """Gang -> the last state event on its workload (reason, message)."""
        self._rebuilt = False
        self._swept_revision = -1
        self._next_yield_check = 0.0
        self._now = 0.0
        """The latest time any verb was asked at."""
        self._ended_seen = 0
        """``ledger.plans_ended`` at the last tick: a plan ending since may requeue pods."""
        self._prepared: tuple[int, int, int, float] | None = None
        """(revision, snapshot identity, ledger version, now) of the last complete look."""
        self.preemptions: dict[GangKey, PreemptionPlan] = {}
        """Gang -> its preemption plan, kept until its deadline or until the gang fits."""
        self.gates = GateBook()
        """What ungating remembers (:mod:`extender.core.decide.gating`)."""
        self.planning = GangPlanner(settings)
        """The gangs found not to fit in the current look, for filter and ungating alike
        (:mod:`extender.core.decide.planning`)."""
        self.pod_news = PodNews()
        """When the pods of gangs gated for want of room hear why
        (:mod:`extender.core.decide.podnews`)."""

    # --- looking at the cluster ---------------------------------------------------------------

    def _prepare(self, snapshot: ClusterSnapshot, now: float, out: list[Effect]) -> None:
        """Rebuild the ledger once (after a restart), forget what the cluster no longer has,
        withdraw barriers nobody waits on any more, expire plans past their TTL."""
        self._now = max(self._now, now)
        seen = (snapshot.revision, id(snapshot), self.ledger.version, now)
        if seen == self._prepared:
            return  # nothing changed since the last look at this very instant: all no-ops
        if not self._rebuilt:
            # After a restart the ledger is empty but pods Muster planned may be half bound.
            self.ledger.rebuild(snapshot, now=now, ttl=self.settings.plan_ttl,
                                gpu=self.settings.gpu_resource,
                                stage_ttl=self.settings.stage_ttl)
            self._rebuilt = True
        if snapshot.revision != self._swept_revision:
            self._sweep(snapshot, out)
            self._keep_for_replacements(snapshot, now, out)
        for gang in expired_barriers(ledger=self.ledger, now=now, settings=self.settings):
            gone = withdraw(gang, ledger=self.ledger)
            self._fail_held(gone.rejected, gone.reason, snapshot, gang, out)
        for gang in self.ledger.expire(now):
            self.expired_total += 1
            out.append(PlanExpired(gang))
            if self._stage_expired(gang, snapshot, out):
                continue
            if self.ledger.is_admitted(gang):
                why = (f"gang {gang}: no member came to take the capacity held for the rest "
                       "of it (replacements for members that went) within its TTL; that "
                       "capacity is free again")
                self._remember_reason(gang, why)
                self._tell_workload(gang, EventType.WARNING, "GangPlanExpired", why,
                                    snapshot=snapshot, out=out)
                continue
            self._remember_reason(gang, "plan expired: no new member arrived within the "
                                        "plan's TTL")
            for pod in snapshot.pods_of_gang(gang):
                if pod.node_name is None:
                    self._event(pod, EventType.WARNING, "GangPlanExpired",
                                f"gang {gang}: plan expired before all members arrived; "
                                "the gang backs off and is planned again", out)
            self._tell_workload(gang, EventType.WARNING, "GangPlanExpired",
                                f"gang {gang}: plan expired before all members arrived; "
                                "it is planned again", snapshot=snapshot, out=out)
        self._prepared = (snapshot.revision, id(snapshot), self.ledger.version, now)

    def _stage_expired(self, gang_key: GangKey, snapshot: ClusterSnapshot,
                       out: list[Effect]) -> bool:
        """A staged gang's plan ran out while a released stage waited for the next one to be
        created (its dependency never became Ready, or the operator failed): say so on the
        workload, whose pods are all bound and would otherwise say nothing."""
        gang = snapshot.gangs.get(gang_key)
        stage = self.ledger.admitted_stage(gang_key)
        if gang is None or stage < 0 or stage >= gang.last_stage:
            return False
        roles = ", ".join(m.role for m in gang.members if m.stage == stage + 1)
        why = (f"gang {gang_key}: stage {stage + 1} ({roles}) did not appear within "
               f"{self.settings.stage_ttl:g}s of stage {stage} being released; the capacity held "
               "for it is given back, and it is planned again when its pods appear")
        self._remember_reason(gang_key, why)
        ref = gang.workload
        out.append(Emit(WorkloadEvent(ref.api_version, ref.kind, ref.namespace, ref.name,
                                      ref.uid, EventType.WARNING, "GangStageExpired", why,
                                      gang=gang_key)))
        return True

    def _sweep(self, snapshot: ClusterSnapshot, out: list[Effect]) -> None:
        """Forget what the cluster no longer has: a deleted workload's plan would otherwise
        hold its GPUs until the plan's TTL, and a deleted pod in flight until its own."""
        self._swept_revision = snapshot.revision
        for gang, _ in self.ledger.reservations():
            if gang not in snapshot.gangs:
                self.ledger.forget_gang(gang)
                self.last_reason.pop(gang, None)
        for uid in [u for u in self.ledger.in_flight() if u not in snapshot.pods]:
            self.ledger.forget_pod(uid)
        for uid, hold in list(self.held.by_pod.items()):
            if uid in snapshot.pods or hold.ticket in self.held.failed:
                continue
            # Fail a deleted pod's held request now: held until its timeout, its failure would
            # reach kube-scheduler later, perhaps once a newer pod of the same name exists,
            # and kube-scheduler writes the failure's PodScheduled=False onto a pod by name.
            self.ledger.forget_pod(uid)
            self._fail_ticket(hold, "pod_gone", f"pod uid {uid} was deleted while its bind "
                                                "was held; not binding it", out)
        for gang, reason in barriers_on_lost_nodes(snapshot=snapshot, ledger=self.ledger):
            gone = withdraw(gang, ledger=self.ledger, reason=reason)
            self._fail_held(gone.rejected, gone.reason, snapshot, gang, out,
                            outcome="node_gone", event="GangNodeLost")
        # Plans filled by bound pods end here; otherwise they would reserve those pods'
        # capacity again once the pods finish or are deleted.
        self.ledger.settle(snapshot, gpu=self.settings.gpu_resource)
        for uid in [u for u in self._last_event if u not in snapshot.pods]:
            del self._last_event[uid]
        if len(self.last_reason) > len(snapshot.gangs) + _STALE_REASONS:
            # Reasons of gangs whose workload went without a plan to forget them by.
            for gang in [g for g in self.last_reason if g not in snapshot.gangs]:
                del self.last_reason[gang]
        for key in [k for k in self._workload_told if k not in snapshot.gangs]:
            del self._workload_told[key]
        for key in [k for k in self.holders if k not in snapshot.gangs]:
            del self.holders[key]
        self.pod_news.keep_only(snapshot.gangs)
        self._tell_refusals(snapshot, out)

    def _keep_for_replacements(self, snapshot: ClusterSnapshot, now: float,
                               out: list[Effect]) -> None:
        """Hold what an admitted gang's members that went used for their replacements
        (:meth:`~extender.core.gang.ledger.Ledger.keep_for_replacements`), and say so on its
        workload; a preemption's victims hold nothing."""
        spare = frozenset(v.gang for p in self.preemptions.values() for v in p.victims
                          if v.gang is not None)
        for moved in self.ledger.keep_for_replacements(
                snapshot, now=now, ttl=self.settings.replacement_ttl,
                gpu=self.settings.gpu_resource, spare=spare):
            gang, res = moved.gang, self.ledger.reservation(moved.gang)
            if moved.why == "keep_for_replacements" and res is not None:
                nodes = ", ".join(sorted({n for n, _, _ in res.plan.slots}))
                why = (f"gang {gang}: {len(res.replacing)} member(s) went and it is below its "
                       f"minimum; what they used on {nodes} is held for their replacements "
                       f"for up to {self.settings.replacement_ttl:g}s")
                self._remember_reason(gang, why)
                self._tell_workload(gang, EventType.NORMAL, "GangHoldingForReplacement", why,
                                    snapshot=snapshot, out=out)
            elif moved.why == "drop_plan":
                self._remember_reason(gang, f"gang {gang}: no member is left, or it is ending; "
                                            "the capacity held for replacements is free again")

    def _tell_refusals(self, snapshot: ClusterSnapshot, out: list[Effect]) -> None:
        """A workload Muster cannot schedule gets one Warning event saying why, on the
        workload itself (its pods only say they wait), once per change of the reason."""
        told = self._refusals_told
        for key in [k for k in told if k not in snapshot.refused]:
            del told[key]
        for key, (ref, why) in snapshot.refused.items():
            if told.get(key) == why:
                continue
            told[key] = why
            out.append(WorkloadRefused(key, why))
            out.append(Emit(WorkloadEvent(ref.api_version, ref.kind, ref.namespace, ref.name,
                                          ref.uid, EventType.WARNING, "WorkloadRefused",
                                          f"Muster cannot schedule this workload: {why}")))

    def refresh(self, snapshot: ClusterSnapshot, now: float) -> tuple[Effect, ...]:
        """Bring the session up to ``snapshot`` and ``now`` (what every verb does first), for
        an adapter that reads the ledger before it asks."""
        out: list[Effect] = []
        self._prepare(snapshot, now, out)
        return tuple(out)

    def next_due(self) -> float | None:
        """The earliest time something falls due without a request (a plan's TTL, a barrier's
        timeout, a pod in flight too long, a deadlock check while gangs are held), for an
        adapter that ticks only when needed (the simulator); ``None``: nothing is."""
        ledger, settings = self.ledger, self.settings
        times = [r.deadline for _, r in ledger.reservations()]
        times += [started + settings.bind_timeout for _, started in ledger.barriers()]
        times += [f.deadline for f in ledger.in_flight().values()]
        if len(ledger.barriers()) >= 2:
            times.append(self._next_yield_check)
        if self.turned_away and ledger.plans_ended != self._ended_seen:
            times.append(self._now)  # a plan ended: turned-away pods may be requeued now
        return min(times) if times else None

    # --- filter, prioritize, preempt ----------------------------------------------------------

    def filter(self, pod: PodInfo, candidates: Sequence[NodeName] | Offer, *,
               snapshot: ClusterSnapshot, now: float) -> FilterStep:
        out: list[Effect] = []
        self._prepare(snapshot, now, out)
        if not isinstance(candidates, Sequence):
            candidates = self._narrowed(pod, candidates, snapshot)
        decision = self.planning.plan_for_gang(pod, candidates, snapshot=snapshot,
                                               ledger=self.ledger, now=now).decision
        gang = decision.gang
        if gang is not None:
            self._remember_reason(gang, decision.reason)
            self.holders[gang] = decision.holders
            # Most core reasons already name the gang; say it once.
            message = (decision.reason if decision.reason.startswith(f"gang {gang}")
                       else f"gang {gang}: {decision.reason}")
            # A passing member says nothing on itself: kube-scheduler's Scheduled event will,
            # and its gang's story is told once on the workload, not once per pod (two Events
            # a member were most of the API server's writes in a burst of gangs).
            if not decision.passed:
                self._event(pod, EventType.WARNING, "GangWaiting", message, out)
                self._tell_workload(gang, EventType.WARNING, "GangWaiting", message,
                                    snapshot=snapshot, out=out)
            if decision.outcome is FilterOutcome.PLANNED and decision.plan is not None:
                nodes = sorted({n for n, _, _ in decision.plan.slots})
                where = ", ".join(nodes[:8]) + (f" and {len(nodes) - 8} more"
                                                if len(nodes) > 8 else "")
                self._tell_workload(gang, EventType.NORMAL, "GangPlanned",
                                    f"gang {gang}: planned on {where}; waiting for its "
                                    "members to reach bind", snapshot=snapshot, out=out)
        if gang is not None and not decision.passed:
            self._unheld(gang, decision.reason, snapshot, out)
        if decision.passed:
            self.turned_away.pop(pod.uid, None)
        elif decision.outcome is not FilterOutcome.REJECTED:
            # REJECTED: not even an empty cluster holds the gang; only new nodes (a cluster
            # event kube-scheduler sees) can change that.
            self.turned_away[pod.uid] = TurnedAway(
                PodRef(pod.namespace, pod.name, pod.uid), untrusted=False,
                unresolved=pod.uid in snapshot.unresolved,
                plans=self.ledger.holding())
        self._log("filter", now, pod.key, str(decision.outcome), decision.reason, out=out)
        return FilterStep(decision, tuple(out))

    def _unheld(self, gang: GangKey, why: str, snapshot: ClusterSnapshot,
                out: list[Effect]) -> None:
        """A gang whose plan ended (its TTL, or a slot's room taken and the plan dropped at
        bind) while members were held at the barrier, and whose next member's filter could
        not plan the rest again around them: fail the held members now. Held, they keep
        their nodes' capacity in kube-scheduler's cache and in flight in the ledger, from
        every other pod, until the barrier's timeout, for a gang that cannot complete."""
        ledger = self.ledger
        if (not ledger.held(gang) or ledger.plan_for(gang) is not None
                or ledger.is_admitted(gang)):
            return
        gone = withdraw(gang, ledger=ledger,
                        reason=f"gang {gang}: its plan ended and the rest of the gang does "
                               f"not fit now ({why}); the members held at bind are failed so "
                               "the capacity they hold goes to others")
        self._fail_held(gone.rejected, gone.reason, snapshot, gang, out, outcome="unplanned",
                        event="GangWaiting")

    def _narrowed(self, pod: PodInfo, offer: Offer,
                  snapshot: ClusterSnapshot) -> Sequence[NodeName]:
        """The offered nodes the filter's answer can depend on (see :class:`Offer`)."""
        gang = snapshot.gang_of(pod.uid)
        member = snapshot.memberships.get(pod.uid)
        plan = None if gang is None else self.ledger.plan_for(gang.key)
        if gang is None or member is None or plan is None or gang.member(member.role) is None:
            return offer.all()
        if not open_slots(pod, gang, member.role, plan, snapshot=snapshot, ledger=self.ledger,
                          settings=self.settings):
            return offer.all()  # the plan is used up: the member is surplus
        if plan_lost_room(pod, gang, member.role, plan, snapshot=snapshot, ledger=self.ledger,
                          settings=self.settings):
            return offer.all()  # the filter plans the gang again, anywhere
        return offer.among(plan.nodes_for(member.role))

    def prioritize(self, pod: PodInfo, candidates: Sequence[NodeName], *,
                   snapshot: ClusterSnapshot, now: float) -> list[tuple[NodeName, int]]:
        out: list[Effect] = []
        self._prepare(snapshot, now, out)
        scores = decide_prioritize(pod, candidates, snapshot=snapshot, ledger=self.ledger,
                                   now=now, settings=self.settings)
        self._log("prioritize", now, pod.key, "scored", "", out=out)
        return scores

    def preempt(self, pod: PodInfo, victims: Mapping[NodeName, Sequence[str]], *,
                snapshot: ClusterSnapshot, now: float,
                pdb_violations: Mapping[NodeName, int] | None = None) -> PreemptStep:
        """The victims kube-scheduler may evict for ``pod``, per offered node.

        A member of a gang that does not fit is answered from its gang's one preemption plan,
        computed at its first call and kept until its deadline (or until the gang fits):
        every member's call evicts only that plan's victims, and none if no plan lets the
        whole gang fit. ``pdb_violations`` (node -> count, from kube-scheduler) steer the
        plan away from nodes where evicting would break a PodDisruptionBudget."""
        out: list[Effect] = []
        self._prepare(snapshot, now, out)
        plan = self._preemption_plan(pod, snapshot, now, pdb_violations or {}, out)
        chosen = decide_preempt(pod, victims, snapshot=snapshot, ledger=self.ledger,
                                settings=self.settings, plan=plan)
        gang = snapshot.gang_of(pod.uid)
        if gang is not None and self.ledger.plan_for(gang.key) is None:
            self._tell_preemption(pod, gang.key, plan, chosen, out)
        self._log("preempt", now, pod.key, "victims" if chosen else "none", "", out=out)
        return PreemptStep(chosen, tuple(out))

    def _preemption_plan(self, pod: PodInfo, snapshot: ClusterSnapshot, now: float,
                         pdb_violations: Mapping[NodeName, int],
                         out: list[Effect]) -> PreemptionPlan | None:
        """The pod's gang's preemption plan: the one kept, or a new one past its deadline.
        A new plan's victims are all evicted at once (:class:`Evict`), and what they free is
        held for the gang."""
        for key in [k for k, p in self.preemptions.items()
                    if p.deadline <= now or k not in snapshot.gangs]:
            del self.preemptions[key]
            self.ledger.unhold(key)
        gang = snapshot.gang_of(pod.uid)
        if gang is None or self.ledger.plan_for(gang.key) is not None:
            if gang is not None and self.preemptions.pop(gang.key, None) is not None:
                self.ledger.unhold(gang.key)  # it fits now: nothing more to evict
            return None
        kept = self.preemptions.get(gang.key)
        if kept is not None:
            return kept
        plan = plan_preemption(gang, snapshot=snapshot, ledger=self.ledger,
                               settings=self.settings, now=now,
                               pdb_nodes={n for n, c in pdb_violations.items() if c > 0})
        if plan is not None:
            self.preemptions[gang.key] = plan
            # What its victims free is the gang's: others see it taken until it is planned.
            self.ledger.hold(plan.placement, now=now, deadline=plan.deadline)
            pods = tuple(PodRef(p.namespace, p.name, p.uid) for p in (
                snapshot.pods[u] for u in sorted(plan.pods())))
            out.append(Evict(gang.key, pods, f"preempted by gang {gang.key} (priority "
                                              f"{plan.preemptor_priority}), which evicts "
                                              f"{len(plan.victims)} whole victims to fit"))
        return plan

    def _tell_preemption(self, pod: PodInfo, gang: GangKey, plan: PreemptionPlan | None,
                         chosen: Mapping[NodeName, Sequence[str]], out: list[Effect]) -> None:
        """Say on the preemptor's pod whom its gang evicts, or that it evicts nobody."""
        if plan is None:
            self._event(pod, EventType.NORMAL, "GangNotPreempting",
                        f"gang {gang}: evicting every lower-priority gang and pod it may "
                        "evict would still not let it fit whole, or its pods may not "
                        "preempt (preemptionPolicy: Never); nothing is evicted", out)
            return
        names = ", ".join(v.key for v in plan.victims[:20])
        more = f" and {len(plan.victims) - 20} more" if len(plan.victims) > 20 else ""
        here = ", ".join(f"{n} ({len(u)} pods)" for n, u in sorted(chosen.items()))
        self._event(pod, EventType.NORMAL, "GangPreempting",
                    f"gang {gang} (priority {plan.preemptor_priority}) preempts "
                    f"{len(plan.victims)} whole victims to fit whole: {names}{more}; "
                    f"evicting now on {here or 'no offered node'}", out)

    def turn_away(self, pod: PodRef, *, untrusted: bool) -> None:
        """Remember a pod the adapter turned away itself (the cluster state not trusted)."""
        self.turned_away[pod.uid] = TurnedAway(pod, untrusted=untrusted, unresolved=False,
                                               plans=frozenset())

    # --- bind: the gang barrier ---------------------------------------------------------------

    def bind(self, ref: PodRef, node: NodeName, *, snapshot: ClusterSnapshot,
             now: float) -> BindStep:
        """A bind request reaches the barrier: BIND it, REFUSE it, or HOLD it (then
        :meth:`poll` its ticket when woken or at its deadline)."""
        out: list[Effect] = []
        self._prepare(snapshot, now, out)
        step = self._bind(ref, node, snapshot, now, out)
        return self._done("bind", now, ref, step, out)

    def _bind(self, ref: PodRef, node: NodeName, snapshot: ClusterSnapshot, now: float,
              out: list[Effect]) -> BindStep:
        held = self.held
        earlier = held.by_pod.get(ref.uid)
        if earlier is not None:
            if earlier.ticket in held.released:
                # The earlier request binds the pod where the ledger charged it; this one
                # must bind it neither elsewhere nor twice.
                return BindStep(Step.REFUSE, "rejected",
                                f"pod {ref.key} is being bound to "
                                f"{held.released[earlier.ticket]} by an earlier request; not "
                                "binding it again", earlier.gang)
            # kube-scheduler gave up on the earlier request and retried: this one decides.
            held.superseded.add(earlier.ticket)
            held.failed.pop(earlier.ticket, None)
            out.append(FailHeld(earlier.ticket, earlier.pod, "superseded",
                                f"a newer bind request for pod {ref.key} replaced this one"))
        decision = decide_bind(ref.uid, node, snapshot=snapshot, ledger=self.ledger, now=now,
                               settings=self.settings)
        gang = decision.gang
        if gang is not None:
            self._remember_reason(gang, decision.reason)
        if decision.outcome is BindOutcome.REJECT:
            self._fail_held(decision.rejected, decision.reason, snapshot, gang, out)
            return BindStep(Step.REFUSE, "rejected", decision.reason, gang)
        if decision.outcome is BindOutcome.BIND:
            releasing: set[str] = {ref.uid}
            for uid, member_node in decision.release:
                if uid == ref.uid:
                    continue
                hold = held.by_pod.get(uid)
                if hold is not None:
                    held.released[hold.ticket] = member_node
                    out.append(Release(hold.ticket, hold.pod, member_node))
                    releasing.add(uid)
                    continue
                parked = snapshot.pods.get(uid)
                if parked is not None and parked.node_name is None:
                    out.append(BindParked(PodRef(parked.namespace, parked.name, uid),
                                          member_node))
                    releasing.add(uid)
            if gang is not None:
                held.releasing.setdefault(gang, set()).update(releasing)
                self._tell_workload(gang, EventType.NORMAL, "GangAdmitted",
                                    f"gang {gang}: minimum reached; binding all members",
                                    snapshot=snapshot, out=out)
            return BindStep(Step.BIND, "bound", decision.reason, gang)
        # WAIT. Each held request takes one of the adapter's threads (and kube-scheduler's
        # HTTP request); with as many held as it allows, the member is *parked* instead: its
        # request fails now (kube-scheduler retries it after a backoff), but it stays counted
        # at the barrier with its node in flight, and when its gang completes the adapter
        # binds it itself (BindParked). No thread waits, so gangs of any size can gather.
        limit = self.settings.max_held
        if gang is not None and limit is not None and len(held.by_pod) >= limit:
            return BindStep(Step.REFUSE, "parked",
                            f"{decision.reason}; not held (every server thread that may hold "
                            "a bind is in use): Muster binds this pod when its gang completes",
                            gang)
        # The barrier's clock restarts with every new member (see Ledger.arrive), but one
        # request is held about bind_timeout (kube-scheduler's httpTimeout is at least 1.5
        # times it): a little longer if the barrier ends soon after, else it is parked.
        timeout = self.settings.bind_timeout
        hold = held.open(ref, gang, node, deadline=now + timeout,
                         limit=now + timeout * self.settings.hold_grace)
        return BindStep(Step.HOLD, "held", decision.reason, gang, hold.ticket, hold.deadline)

    def poll(self, ticket: int, *, snapshot: ClusterSnapshot, now: float) -> BindStep:
        """What became of a held request: BIND (released), REFUSE, or HOLD again."""
        out: list[Effect] = []
        hold = self.held.find(ticket)
        if hold is None:
            step = BindStep(Step.REFUSE, "rejected", f"no bind request with ticket {ticket}")
            return self._done("poll", now, PodRef("", "", ""), step, out)
        step = self._poll(hold, snapshot, now, out)
        if step.step is not Step.HOLD:
            self.held.close(ticket)
        return self._done("poll", now, hold.pod, step, out)

    def _poll(self, hold: Hold, snapshot: ClusterSnapshot, now: float,
              out: list[Effect]) -> BindStep:
        held, ref, gang = self.held, hold.pod, hold.gang
        released_to = held.released.get(hold.ticket)
        if released_to is not None:
            return self._released(hold, released_to, snapshot)
        if hold.ticket in held.superseded:
            return BindStep(Step.REFUSE, "superseded",
                            f"a newer bind request for pod {ref.key} replaced this one", gang)
        failed = held.failed.get(hold.ticket)
        if failed is not None:
            return BindStep(Step.REFUSE, failed[0], failed[1], gang)
        if gang is None:
            return BindStep(Step.HOLD, "held", "", gang, hold.ticket, hold.limit)
        timeout = self.settings.bind_timeout
        if now >= hold.deadline:
            started = self.ledger.barrier_started(gang)
            if started is not None and started + timeout > now:
                if started + timeout > hold.limit:
                    # The gang is still gathering: stop holding, keep counting.
                    return BindStep(Step.REFUSE, "parked",
                                    f"gang {gang}: held {timeout:g}s while the gang gathers; "
                                    "not held longer: Muster binds this pod when its gang "
                                    "completes", gang)
                hold.deadline = started + timeout
        if now >= hold.deadline:
            timed_out = withdraw(gang, ledger=self.ledger, also=(ref.uid, hold.node))
            self._fail_held(timed_out.rejected, timed_out.reason, snapshot, gang, out)
            return BindStep(Step.REFUSE, "timed_out", timed_out.reason, gang)
        return BindStep(Step.HOLD, "held", "", gang, hold.ticket, hold.deadline)

    def _released(self, hold: Hold, released_to: NodeName,
                  snapshot: ClusterSnapshot) -> BindStep:
        """A member its gang released binds to the node it was released to (the one the
        ledger charged), only while that node still exists, and never elsewhere."""
        ref, node = hold.pod, hold.node
        if released_to != node:
            # Cannot happen while one request per pod is held (the ledger charged the node this
            # request named); if it did, binding here would use room nobody checked.
            self.bind_failed(ref.uid, current=lambda: snapshot)
            return BindStep(Step.REFUSE, "rejected",
                            f"pod {ref.key} was released to bind to {released_to}, not {node}; "
                            "not binding it elsewhere", hold.gang)
        if node not in snapshot.nodes:
            self.bind_failed(ref.uid, current=lambda: snapshot)
            return BindStep(Step.REFUSE, "node_gone",
                            f"node {node} was deleted before pod {ref.key} could bind there",
                            hold.gang)
        return BindStep(Step.BIND, "released", "", hold.gang)

    def close(self, ticket: int) -> None:
        """The adapter stopped waiting on ``ticket`` (any way out; idempotent)."""
        self.held.close(ticket)

    def bound(self, uid: str, node: NodeName, *,
              current: Callable[[], ClusterSnapshot]) -> None:
        """The adapter posted the pod's Binding. ``current`` gives the snapshot with it, and
        is called only when this Binding ends its gang's release (the plan is settled then):
        bringing the snapshot up to date after every Binding of a burst would make one
        snapshot per Binding where the next request makes one for them all."""
        self.ledger.confirm_bound(uid, node)
        self._done_releasing(uid, current)

    def bind_failed(self, uid: str, *, current: Callable[[], ClusterSnapshot]) -> None:
        """The adapter's Binding failed: the pod holds nothing (``current``: as for
        :meth:`bound`)."""
        self.ledger.forget_pod(uid)
        self._done_releasing(uid, current)

    def _done_releasing(self, uid: str, current: Callable[[], ClusterSnapshot]) -> None:
        # The gang's last Binding ends its plan now, not at the next request, which may come
        # only after these pods are gone.
        if self.held.done_releasing(uid) is not None:
            self.ledger.settle(current(), gpu=self.settings.gpu_resource)

    def _fail_held(self, rejected: Sequence[tuple[str, NodeName]], reason: str,
                   snapshot: ClusterSnapshot, gang: GangKey | None, out: list[Effect], *,
                   outcome: str = "timed_out", event: str = "GangBindTimeout") -> None:
        """Fail every held request of the members the core failed, so kube-scheduler
        requeues them all."""
        if not rejected:
            return
        for uid, _node in rejected:
            hold = self.held.by_pod.get(uid)
            if hold is not None:
                self._fail_ticket(hold, outcome, reason, out)
        if gang is not None:
            out.append(Withdrawn(gang, len(rejected), outcome, reason))
            self._remember_reason(gang, reason)
            for pod in snapshot.pods_of_gang(gang):
                if pod.node_name is None:
                    self._event(pod, EventType.WARNING, event, reason, out)
            self._tell_workload(gang, EventType.WARNING, event, reason, snapshot=snapshot,
                                out=out)

    def _fail_ticket(self, hold: Hold, outcome: str, reason: str, out: list[Effect]) -> None:
        self.held.failed[hold.ticket] = (outcome, reason)
        out.append(FailHeld(hold.ticket, hold.pod, outcome, reason))

    # --- time passes and state changes without requests ----------------------------------------

    def tick(self, snapshot: ClusterSnapshot, *, now: float, trusted: bool = True,
             ) -> tuple[Effect, ...]:
        """Expire what is due, break deadlocks at the barrier, and requeue turned-away pods
        whose obstacle is gone. The server calls it every second or so; the simulator at
        every instant something is due."""
        out: list[Effect] = []
        if trusted:
            self._prepare(snapshot, now, out)
            self._break_deadlocks(snapshot, now, out)
        plans = self.ledger.holding()
        due: dict[str, list[PodRef]] = {}
        for uid, away in list(self.turned_away.items()):
            pod = snapshot.pods.get(uid)
            if away.untrusted:
                if not trusted:
                    continue
                reason = "the cluster state is trusted again"
            elif pod is None or pod.node_name is not None:
                del self.turned_away[uid]  # gone or bound: nothing to retry
                continue
            elif away.unresolved and uid not in snapshot.unresolved:
                reason = "its workload is observed now"
            elif away.plans - plans:
                reason = "a gang plan ended and released its capacity"
            else:
                continue
            del self.turned_away[uid]
            due.setdefault(reason, []).append(away.pod)
        for reason, pods in sorted(due.items()):
            out.append(Requeue(tuple(pods), reason))
        self._ended_seen = self.ledger.plans_ended
        self._log("tick", now, "", "ticked", "", out=out)
        return tuple(out)

    def _break_deadlocks(self, snapshot: ClusterSnapshot, now: float,
                         out: list[Effect]) -> None:
        """Gangs held at the barrier that wait for each other (each holds what the next
        needs) would all time out together and may deadlock again; the core picks one per
        cycle to yield now, so the others complete. Checked at most every ``yield_every``
        seconds: gangs are rarely stuck, and the check plans every held gang."""
        if now < self._next_yield_check:
            return
        self._next_yield_check = now + self.settings.yield_every
        for y in decide_yields(snapshot=snapshot, ledger=self.ledger, now=now,
                               settings=self.settings):
            gone = withdraw(y.gang, ledger=self.ledger, reason=y.reason)
            self._fail_held(gone.rejected, gone.reason, snapshot, y.gang, out,
                            outcome="yielded", event="GangYielded")

    def ungate(self, snapshot: ClusterSnapshot, *, now: float) -> tuple[Effect, ...]:
        """Ungate the gated pods whose gang is planned (or that are in none); say why the
        others stay gated (:mod:`extender.core.decide.gating`). Call it with a trusted
        snapshot, as often as :meth:`tick`: it decides only when something could change."""
        out: list[Effect] = []
        self._prepare(snapshot, now, out)
        found = decide_ungates(snapshot, now=now, ledger=self.ledger, settings=self.settings,
                               book=self.gates, planning=self.planning)
        for still in found.gated:
            self._remember_reason(still.gang, still.reason)
            self.holders[still.gang] = still.holders
            message = (still.reason if still.reason.startswith(f"gang {still.gang}")
                       else f"gang {still.gang}: {still.reason}")
            kind = EventType.WARNING if still.event == "GangWaiting" else EventType.NORMAL
            if still.event == "GangWaiting":
                if self.pod_news.waits(still.gang, still.pods, message, now=now,
                                       after=self.settings.pod_events_after):
                    self._tell_pods(still.pods, message, snapshot, out)
            else:
                self.pod_news.settled(still.gang)
            self._tell_workload(still.gang, kind, still.event, message, snapshot=snapshot,
                                out=out)
        for ungate in found.ungates:
            if ungate.gang is not None:
                self.pod_news.settled(ungate.gang)
                self._remember_reason(ungate.gang, ungate.reason)
                self.holders[ungate.gang] = ()
                self._tell_workload(ungate.gang, EventType.NORMAL, "GangUngated",
                                    ungate.reason, snapshot=snapshot, out=out)
            out.append(ungate)
        for tell in self.pod_news.due(now):
            self._tell_pods(tell.pods, tell.message, snapshot, out)
        self._log("ungate", now, "", "ungated" if found.ungates else "gated", "", out=out)
        return tuple(out)

    def _tell_pods(self, pods: Sequence[PodInfo], message: str, snapshot: ClusterSnapshot,
                   out: list[Effect]) -> None:
        """``GangWaiting`` on each of ``pods`` still behind Muster's gate."""
        for pod in pods:
            current = snapshot.pods.get(pod.uid)
            if current is not None and self.settings.gate in current.gates:
                self._event(current, EventType.WARNING, "GangWaiting", message, out)

    # --- events and the journal ---------------------------------------------------------------

    def _remember_reason(self, gang: GangKey, reason: str) -> None:
        if self.last_reason.get(gang) != reason:
            self.reasons_version += 1
        self.last_reason[gang] = reason

    def _event(self, pod: PodInfo, type_: EventType, reason: str, message: str,
               out: list[Effect]) -> None:
        # Filter runs on every retry of a pending pod; record a change, not a repetition.
        if self._last_event.get(pod.uid) == (reason, message):
            return
        self._last_event[pod.uid] = (reason, message)
        out.append(Emit(PodEvent(PodRef(pod.namespace, pod.name, pod.uid), type_, reason,
                                 message)))

    def _tell_workload(self, gang: GangKey, type_: EventType, reason: str, message: str, *,
                       snapshot: ClusterSnapshot, out: list[Effect]) -> None:
        """The gang's state on its workload object, so ``kubectl describe jobset`` says why
        it waits (or that it was admitted, timed out...): once per change, as for pods."""
        found = snapshot.gangs.get(gang)
        told = self._workload_told.get(gang)
        if found is None or told == (reason, message):
            return
        if reason == GATHERING and told is not None and told[0] == GATHERING:
            # Said once while a gang's members are created, not once per member ("3 of 16
            # exist", "4 of 16 exist"...: an Event per pod created); the count is in its
            # last reason (`muster describe`, the Gang object).
            return
        self._workload_told[gang] = (reason, message)
        ref = found.workload
        out.append(Emit(WorkloadEvent(ref.api_version, ref.kind, ref.namespace, ref.name,
                                      ref.uid, type_, reason, message, gang=gang)))

    def _done(self, verb: str, now: float, ref: PodRef, step: BindStep,
              out: list[Effect]) -> BindStep:
        effects = tuple(out)
        self._log(verb, now, ref.key, step.outcome, step.reason, out=out)
        return BindStep(step.step, step.outcome, step.reason, step.gang, step.ticket,
                        step.deadline, effects)

    def _log(self, verb: str, now: float, pod: str, outcome: str, reason: str, *,
             out: list[Effect]) -> None:
        if self.journal is None:
            return
        quiet = verb in ("tick", "prioritize", "ungate") or (verb, outcome) == ("poll", "held")
        if not out and quiet:
            return  # nothing decided: a tick with nothing due, a held request still waiting
        self.journal.append(Entry(verb, now, pod, outcome, reason, tuple(out)))

    # --- introspection ------------------------------------------------------------------------

    def open_requests(self) -> dict[str, GangKey | None]:
        """Pod UID -> gang of every bind request held open."""
        return self.held.gangs_of_open()
