"""The gang session: every decision Muster makes about gangs, and the state they need.

One :class:`GangSession` owns the ledger (plans, pods in flight, barriers), the bind requests
held at the barrier (:mod:`extender.core.decide.bindverbs`), the pods turned away and what it
told per gang and pod (:mod:`extender.core.decide.narration`). Its verbs (``filter``,
``prioritize``, ``bind``/``poll``, ``preempt``, ``tick``, ``ungate``) take the snapshot and
``now``, bring the session up to them first (:mod:`extender.core.decide.upkeep`), and return
their decision with the effects to carry out (:mod:`extender.core.decide.effects`). It reads
no clock, holds no lock and does no I/O: the server (real time, threads, the API server) and
the simulator (a virtual clock) drive the same session, so they decide alike by construction.

What happens to a plan, in one place::

    filter ─plan─▶ reserved ─members reach bind─▶ barrier ─minimum─▶ admitted ─filled─▶ settled
                      │ TTL                          │ bind timeout / yield / node lost
                      ▼                              ▼
                   expired                        withdrawn (held requests fail; planned again)

A gang whose workload is deleted is forgotten at the next look at the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from extender.core.decide.barrier import withdraw
from extender.core.decide.bindverbs import BindDesk
from extender.core.decide.decisions import (
    FilterDecision,
    FilterOutcome,
    decide_preempt,
    decide_prioritize,
)
from extender.core.decide.effects import BindStep, Effect, Requeue, Step
from extender.core.decide.gating import GateBook, decide_ungates
from extender.core.decide.held import HeldBinds
from extender.core.decide.holders import Holder
from extender.core.decide.narration import Entry, Narrator
from extender.core.decide.planning import GangPlanner
from extender.core.decide.podnews import PodNews
from extender.core.decide.preempting import PreemptionDesk
from extender.core.decide.preemption import PreemptionPlan
from extender.core.decide.settings import CoreSettings
from extender.core.decide.slots import PlannedMember, open_slots, plan_lost_room
from extender.core.decide.upkeep import Upkeep
from extender.core.decide.yields import decide_yields
from extender.core.gang.ledger import Ledger
from extender.core.model.notices import PodRef
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import GangKey, NodeName, PodInfo

__all__ = ["Entry", "FilterStep", "GangSession", "Offer", "PreemptStep", "Step", "TurnedAway"]

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



class GangSession:
    """Gang decisions over time; see the module docstring."""

    def __init__(self, settings: CoreSettings, *, journal: list[Entry] | None = None) -> None:
        self.settings = settings
        self.ledger = Ledger()
        self.narrator = Narrator(settings, journal=journal)
        """What the session told (:mod:`extender.core.decide.narration`); ``journal``: when a
        list is given, every verb appends what it decided (the conformance test compares the
        server's and the simulator's)."""
        self.binds = BindDesk(settings, self.ledger, self.narrator)
        """The bind requests held at the barrier (:mod:`extender.core.decide.bindverbs`)."""
        self.turned_away: dict[str, TurnedAway] = {}
        self._next_yield_check = 0.0
        self._now = 0.0
        """The latest time any verb was asked at."""
        self._ended_seen = 0
        """``ledger.plans_ended`` at the last tick: a plan ending since may requeue pods."""
        self.preempting = PreemptionDesk(settings, self.ledger)
        """The preemption plans kept per gang (:mod:`extender.core.decide.preempting`)."""
        self.gates = GateBook()
        """What ungating remembers (:mod:`extender.core.decide.gating`)."""
        self.planning = GangPlanner(settings)
        """The gangs found not to fit in the current look, for filter and ungating alike
        (:mod:`extender.core.decide.planning`)."""
        self.pod_news = PodNews()
        """When the pods of gangs gated for want of room hear why
        (:mod:`extender.core.decide.podnews`)."""
        self.upkeep = Upkeep(self.binds, news=self.pod_news, preemptions=self.preempting.plans)
        """The look at the cluster each verb takes first (:mod:`extender.core.decide.upkeep`)."""

    @property
    def held(self) -> HeldBinds:
        return self.binds.held

    @property
    def preemptions(self) -> dict[GangKey, PreemptionPlan]:
        """Gang -> its preemption plan, kept until its deadline or until the gang fits."""
        return self.preempting.plans

    @property
    def last_reason(self) -> dict[GangKey, str]:
        """Gang -> the last reason said about it."""
        return self.narrator.last_reason

    @property
    def reasons_version(self) -> int:
        """Bumped whenever a gang's last reason changes (what shows it may be written again)."""
        return self.narrator.reasons_version

    @property
    def holders(self) -> dict[GangKey, tuple[Holder, ...]]:
        """Gang -> who held what it needed at its last filter (empty once it fits)."""
        return self.narrator.holders

    @property
    def expired_total(self) -> int:
        """Plans expired so far."""
        return self.upkeep.expired_total

    # --- looking at the cluster ---------------------------------------------------------------

    def _prepare(self, snapshot: ClusterSnapshot, now: float, out: list[Effect]) -> None:
        self._now = max(self._now, now)
        self.upkeep.prepare(snapshot, now, out)

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
        self.narrator.tell_filter(pod, decision, snapshot=snapshot, out=out)
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
        self.narrator.log(Entry("filter", now, pod.key, str(decision.outcome),
                                decision.reason, tuple(out)))
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
        self.binds.fail_held(gone, snapshot, out, outcome="unplanned", event="GangWaiting")

    def _narrowed(self, pod: PodInfo, offer: Offer,
                  snapshot: ClusterSnapshot) -> Sequence[NodeName]:
        """The offered nodes the filter's answer can depend on (see :class:`Offer`)."""
        gang = snapshot.gang_of(pod.uid)
        member = snapshot.memberships.get(pod.uid)
        plan = None if gang is None else self.ledger.plan_for(gang.key)
        if gang is None or member is None or plan is None or gang.member(member.role) is None:
            return offer.all()
        planned = PlannedMember(pod, gang, member.role, plan)
        if not open_slots(planned, snapshot=snapshot, ledger=self.ledger,
                          settings=self.settings):
            return offer.all()  # the plan is used up: the member is surplus
        if plan_lost_room(planned, snapshot=snapshot, ledger=self.ledger,
                          settings=self.settings):
            return offer.all()  # the filter plans the gang again, anywhere
        return offer.among(plan.nodes_for(member.role))

    def prioritize(self, pod: PodInfo, candidates: Sequence[NodeName], *,
                   snapshot: ClusterSnapshot, now: float) -> list[tuple[NodeName, int]]:
        out: list[Effect] = []
        self._prepare(snapshot, now, out)
        scores = decide_prioritize(pod, candidates, snapshot=snapshot, ledger=self.ledger,
                                   now=now, settings=self.settings)
        self.narrator.log(Entry("prioritize", now, pod.key, "scored", "", tuple(out)))
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
        plan = self.preempting.plan_for(pod, snapshot, now, pdb_violations or {}, out)
        chosen = decide_preempt(pod, victims, snapshot=snapshot, ledger=self.ledger,
                                settings=self.settings, plan=plan)
        gang = snapshot.gang_of(pod.uid)
        if gang is not None and self.ledger.plan_for(gang.key) is None:
            self.narrator.tell_preemption(pod, gang.key, plan, chosen, out)
        self.narrator.log(Entry("preempt", now, pod.key, "victims" if chosen else "none", "",
                                tuple(out)))
        return PreemptStep(chosen, tuple(out))

    def turn_away(self, pod: PodRef, *, untrusted: bool) -> None:
        """Remember a pod the adapter turned away itself (the cluster state not trusted)."""
        self.turned_away[pod.uid] = TurnedAway(pod, untrusted=untrusted, unresolved=False,
                                               plans=frozenset())

    # --- bind: the gang barrier (:mod:`extender.core.decide.bindverbs`) ------------------------

    def bind(self, ref: PodRef, node: NodeName, *, snapshot: ClusterSnapshot,
             now: float) -> BindStep:
        """A bind request reaches the barrier: BIND it, REFUSE it, or HOLD it (then
        :meth:`poll` its ticket when woken or at its deadline)."""
        out: list[Effect] = []
        self._prepare(snapshot, now, out)
        step = self.binds.bind(ref, node, snapshot, now, out)
        return self.narrator.done("bind", now, ref, step, out)

    def poll(self, ticket: int, *, snapshot: ClusterSnapshot, now: float) -> BindStep:
        """What became of a held request: BIND (released), REFUSE, or HOLD again."""
        out: list[Effect] = []
        hold = self.held.find(ticket)
        if hold is None:
            step = BindStep(Step.REFUSE, "rejected", f"no bind request with ticket {ticket}")
            return self.narrator.done("poll", now, PodRef("", "", ""), step, out)
        step = self.binds.poll(hold, snapshot, now, out)
        if step.step is not Step.HOLD:
            self.held.close(ticket)
        return self.narrator.done("poll", now, hold.pod, step, out)

    def close(self, ticket: int) -> None:
        """The adapter stopped waiting on ``ticket`` (any way out; idempotent)."""
        self.held.close(ticket)

    def bound(self, uid: str, node: NodeName, *,
              current: Callable[[], ClusterSnapshot]) -> None:
        """The adapter posted the pod's Binding (:meth:`BindDesk.bound`)."""
        self.binds.bound(uid, node, current=current)

    def bind_failed(self, uid: str, *, current: Callable[[], ClusterSnapshot]) -> None:
        """The adapter's Binding failed: the pod holds nothing (:meth:`BindDesk.bind_failed`)."""
        self.binds.bind_failed(uid, current=current)

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
        self.narrator.log(Entry("tick", now, "", "ticked", "", tuple(out)))
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
            self.binds.fail_held(gone, snapshot, out, outcome="yielded", event="GangYielded")

    def ungate(self, snapshot: ClusterSnapshot, *, now: float) -> tuple[Effect, ...]:
        """Ungate the gated pods whose gang is planned (or that are in none); say why the
        others stay gated (:mod:`extender.core.decide.gating`). Call it with a trusted
        snapshot, as often as :meth:`tick`: it decides only when something could change."""
        out: list[Effect] = []
        self._prepare(snapshot, now, out)
        found = decide_ungates(snapshot, now=now, ledger=self.ledger, settings=self.settings,
                               book=self.gates, planning=self.planning)
        self.narrator.tell_ungating(found, self.pod_news, snapshot=snapshot, now=now, out=out)
        self.narrator.log(Entry("ungate", now, "", "ungated" if found.ungates else "gated", "",
                                tuple(out)))
        return tuple(out)

    # --- introspection ------------------------------------------------------------------------

    def open_requests(self) -> dict[str, GangKey | None]:
        """Pod UID -> gang of every bind request held open."""
        return self.binds.open_requests()
