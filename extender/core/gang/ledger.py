"""What Muster has promised but the cluster does not show yet: plans, pods in flight, barriers.

kube-scheduler tells an extender nothing about assumed or half-bound pods, so the ledger keeps
them: a *plan* reserves capacity for a gang's members until its deadline; a pod *in flight*
has reached bind but is not yet observed bound; a gang's *barrier* holds its members at bind
until its minimum has arrived. The ledger is mutable but pure: it reads no clock (every method
that needs time takes ``now``) and does no I/O. Its one owner is the gang session
(:mod:`extender.core.decide.session`), which the server calls under one lock.

A gang the ledger promises something to has one record
(:class:`~extender.core.gang.lifecycle.GangRecord`): its state machine is drawn in
:mod:`extender.core.gang.lifecycle`, and each of its arrows is a method here (those that return
nothing else return the :class:`~extender.core.gang.lifecycle.Transition`).

The questions that change nothing (a gang's record and state, plans, holds, claims, pods in
flight, barriers) are :class:`~extender.core.gang.ledgerview.LedgerView`'s; the verbs are here.
A *pod* is in flight from ``mark_bind_requested`` until ``confirm_bound`` (observed bound),
``forget_pod`` (deleted, bind failed) or its own TTL (``expire``). ``rebuild`` starts over
from the cluster after a restart: gangs with bound members are admitted, and one left below
its minimum gets a plan for the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from extender.core.gang.capacity import gang_stamps, index_of
from extender.core.gang.freeview import (
    free_capacity,
    in_flight_demands,
    occupants,
    per_node,
    per_role,
    placed_counts,
    placed_in_of,
    placed_subgroups,
    short_node,
)
from extender.core.gang.ledgerview import LedgerView
from extender.core.gang.lifecycle import GangRecord, GangState, InFlight, Reservation, Transition
from extender.core.gang.placement import Plan
from extender.core.gang.settling import departures, plan_filled, restored
from extender.core.model.resources import GPU
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import GangKey, NodeName

__all__ = [
    "INFLIGHT_TTL", "GangRecord", "GangState", "InFlight", "Ledger", "Reservation", "Transition",
    # The free-capacity view's names, imported from here by the decisions that read both.
    "free_capacity", "in_flight_demands", "occupants", "per_node", "per_role",
    "placed_counts", "placed_in_of", "placed_subgroups",
]

INFLIGHT_TTL = 120.0
"""Seconds a pod stays in flight without being observed bound before it is forgotten."""
_SHORT_MEMO_MAX = 4096
"""Plans whose shortness is remembered at once (one per gang planned; cleared past it)."""


class Ledger(LedgerView):
    """One :class:`GangRecord` per gang (plan, hold, barrier, admission), and the pods in
    flight, keyed for quick lookup; its views are :class:`LedgerView`'s, its verbs here."""

    def clone(self) -> Ledger:
        """An independent copy (memos dropped): for what-if questions and replay checks."""
        twin = Ledger()
        twin._book = self._book.copy()
        twin._inflight = dict(self._inflight)
        twin.version = self.version
        return twin

    # plans ---------------------------------------------------------------------------------
    def reserve(self, plan: Plan, *, now: float, ttl: float,
                replacing: tuple[str, ...] = ()) -> Transition | None:
        gang = plan.gang
        record = self._book.open(gang)
        before = record.state
        self._book.set_plan(record, Reservation(plan, now, now + ttl, replacing))
        record.plan_went()  # what was kept was about the old plan, if any
        self._book.set_hold(record, None)  # admitted: its plan holds what it needs now
        self.version += 1
        return self._book.moved(gang, before, "reserve")

    # capacity held for a preemptor ---------------------------------------------------------
    def hold(self, placement: Plan, *, now: float, deadline: float) -> Transition | None:
        """Hold ``placement`` for its gang, which is evicting victims to fit: other gangs
        and pods see that capacity as taken (even while the victims still use it) until the
        gang is planned, the hold is dropped, or ``deadline`` passes."""
        gang = placement.gang
        record = self._book.open(gang)
        before = record.state
        self._book.set_hold(record, Reservation(plan=placement, reserved_at=now, deadline=deadline))
        self.version += 1
        return self._book.moved(gang, before, "hold")

    def unhold(self, gang: GangKey) -> Transition | None:
        record = self._book.writable(gang)
        if record is None or record.hold is None:
            return None
        before = record.state
        self._book.set_hold(record, None)
        self.version += 1
        self.plans_ended += 1
        return self._book.moved(gang, before, "unhold")

    def progress(self, gang: GangKey, pod_uid: str, *, now: float, ttl: float) -> bool:
        """A member of the gang was filtered onto its plan or reached bind. The first time
        since the plan was made is progress: the plan then lasts ``ttl`` from ``now`` at
        least, so a gang whose members keep arriving (a slow scheduler queue, a large gang)
        is not expired and planned over again while it gathers; and the gang's barrier, if
        members wait there, restarts its clock as for a member reaching bind (:meth:`arrive`):
        a member sent onto its plan is on its way to bind, through kube-scheduler's PreBind,
        which writes its claims first and may take seconds on a busy API server. A member
        retrying is not progress. Returns whether it was."""
        record = self._book.get(gang)
        if record is None or record.plan is None or pod_uid in record.seen:
            return False
        owned = self._book.owned(gang)
        owned.seen.add(pod_uid)
        if owned.barrier is not None and owned.barrier < now:
            self._book.set_barrier(owned, now)
        self.extend(gang, deadline=now + ttl)
        return True

    def extend(self, gang: GangKey, *, deadline: float) -> None:
        """Keep the gang's plan until ``deadline`` at least: a staged gang's plan holds the
        later stages' capacity while the operator creates their pods."""
        record = self._book.writable(gang)
        res = None if record is None else record.plan
        if record is not None and res is not None and res.deadline < deadline:
            self._book.set_plan(record, Reservation(res.plan, res.reserved_at, deadline))
            self.version += 1

    def claim(self, gang: GangKey, pod_uid: str, node: NodeName, role: str) -> None:
        """A member's filter passed it ``node`` alone, one of its plan's open slots of
        ``role``. kube-scheduler skips scoring for a pod with one feasible node and binds it
        there; until that bind arrives, other members' filters leave the slot to it (two
        members offered the same open nodes could otherwise both pick one, and one bind
        would be turned away). A claim is a hint for the filter only: binds check the plan's
        slots as always. It goes with the plan; a member filtered again claims anew."""
        record = self._book.writable(gang)
        if record is not None and record.plan is not None:
            record.claims[pod_uid] = (node, role)

    def _end_plan(self, record: GangRecord) -> bool:
        """End the record's plan, if any (what is kept per plan goes with it); whether one
        ended."""
        record.plan_went()
        if record.plan is None:
            return False
        self._book.set_plan(record, None)
        self.plans_ended += 1
        return True

    def drop_plan(self, gang: GangKey) -> Transition | None:
        """End the gang's plan only; its barrier and held members stay. For a plan the cluster
        no longer honours (a slot taken behind Muster's back): the next member's filter plans
        the rest of the gang again around the members already held."""
        record = self._book.writable(gang)
        if record is None:
            return None
        before = record.state
        if self._end_plan(record):
            self.version += 1
        return self._book.moved(gang, before, "drop_plan")

    def release(self, gang: GangKey) -> Transition | None:
        """Drop the gang's plan and barrier (its in-flight pods stay until observed)."""
        record = self._book.writable(gang)
        self.version += 1
        if record is None:
            return None
        before = record.state
        self._end_plan(record)
        self._book.set_barrier(record, None)
        self._book.unwait(gang, record)
        return self._book.moved(gang, before, "release")

    def expire(self, now: float) -> list[GangKey]:
        """Drop plans whose deadline has come, and stale in-flight pods; return the gangs."""
        gone = [g for g, r in self._book.plans() if r.deadline <= now]
        for gang in gone:
            record = self._book.owned(gang)
            before = record.state
            self._end_plan(record)
            self._book.moved(gang, before, "expire")
        lapsed = [g for g, r in self._book.holds() if r.deadline <= now]
        for gang in lapsed:
            record = self._book.owned(gang)
            before = record.state
            self._book.set_hold(record, None)
            self.plans_ended += 1
            self._book.moved(gang, before, "expire")
        stale = [uid for uid, f in self._inflight.items() if f.deadline <= now]
        for uid in stale:
            self.forget_pod(uid)
        if gone or lapsed or stale:
            self.version += 1
        return gone

    def placed(
        self, gang: GangKey, snapshot: ClusterSnapshot, *, gpu: str = GPU
    ) -> Mapping[tuple[NodeName, str], int]:
        """:func:`placed_counts`, memoised until the snapshot or the ledger changes (every
        pinned member's filter asks it; a 64-pod gang makes that worth keeping)."""
        memo = self._placed_memo.get(gang)
        if memo is not None and memo[0] is snapshot and memo[1] == self.version:
            return memo[2]
        counts = placed_counts(gang, snapshot, self, gpu=gpu)
        self._placed_memo[gang] = (snapshot, self.version, counts)
        return counts

    def plan_short_on(self, plan: Plan, snapshot: ClusterSnapshot, *,
                      gpu: str) -> NodeName | None:
        """:func:`~extender.core.gang.freeview.short_node`, asked again only when the
        snapshot or the plan changes: what makes a plan short is the cluster taking room
        behind Muster's back, which comes with a new snapshot (the ledger's own changes
        never plan over a plan). Every planned member's filter asks it."""
        memo = self._short_memo.get(plan.gang)
        if memo is not None and memo[0] is snapshot and memo[1] is plan:
            return memo[2]
        if len(self._short_memo) > _SHORT_MEMO_MAX:
            self._short_memo.clear()
        found = short_node(plan, snapshot, self, gpu=gpu)
        self._short_memo[plan.gang] = (snapshot, plan, found)
        return found

    # pods in flight ------------------------------------------------------------------------
    def mark_bind_requested(
        self, pod_uid: str, node: NodeName, *, now: float, ttl: float = INFLIGHT_TTL
    ) -> None:
        current = self._inflight.get(pod_uid)
        if current is not None and current.node == node:
            # A retried bind of the same pod (or the bind of a pod its filter sent there)
            # keeps its first timestamp, and its deadline as far as either asks.
            if current.deadline < now + ttl:
                self._inflight[pod_uid] = replace(current, deadline=now + ttl)
            return
        self._inflight[pod_uid] = InFlight(node=node, since=now, deadline=now + ttl)
        self.version += 1

    def confirm_bound(self, pod_uid: str, node: NodeName) -> None:
        """The pod is observed bound: the snapshot now charges it, so stop charging it here."""
        self._inflight.pop(pod_uid, None)
        self._book.unhold_pod(pod_uid)  # off its barrier, which keeps its clock
        self.version += 1

    def forget_pod(self, pod_uid: str) -> None:
        """The pod was deleted, or its bind failed: it holds nothing any more."""
        self._inflight.pop(pod_uid, None)
        for gang in self._book.unhold_pod(pod_uid):
            record = self._book.owned(gang)
            before = record.state
            if not record.waiting:
                self._book.set_barrier(record, None)
            self._book.moved(gang, before, "forget_pod")
        self.version += 1

    # barriers ------------------------------------------------------------------------------
    def arrive(self, gang: GangKey, pod_uid: str, node: NodeName, *,
               now: float) -> Transition | None:
        """A member reached bind: hold it at the gang's barrier.

        A member arriving for the first time is progress: the barrier's clock restarts, so a
        gang whose members keep coming (a large gang, a busy scheduler queue) is not failed
        while it gathers, and one whose next member does not come within the timeout is. A
        member retrying its bind is not progress.
        """
        record = self._book.open(gang)
        before = record.state
        if pod_uid not in record.waiting or record.barrier is None:
            self._book.set_barrier(record, now)
        self._book.hold_member(gang, record, pod_uid, node)
        self.version += 1
        return self._book.moved(gang, before, "arrive")

    def admit(self, gang: GangKey, *, now: float, stage: int = 0,
              keep: frozenset[str] = frozenset()) -> tuple[tuple[str, NodeName], ...]:
        """Open the barrier up to ``stage``: return the members held there, now free to bind.
        Members in ``keep`` (of later stages) stay held, their barrier restarted at ``now``.
        The gang is admitted (at the barrier again if members were kept)."""
        record = self._book.open(gang)
        held = self._book.unwait(gang, record)
        released = tuple(sorted((u, n) for u, n in held.items() if u not in keep))
        kept = {u: n for u, n in held.items() if u in keep}
        self._book.set_barrier(record, None)
        if kept:
            for uid, node in kept.items():
                self._book.hold_member(gang, record, uid, node)
            self._book.set_barrier(record, now)
        if record.admitted is None:
            record.admitted = now
        record.stage = max(stage, record.stage)
        self.version += 1
        return released

    def withdraw(self, gang: GangKey) -> tuple[tuple[str, NodeName], ...]:
        """The barrier timed out: drop the gang's plan and its held members (returned), so
        kube-scheduler requeues them and the capacity goes to someone else."""
        held = self.waiting(gang)
        for uid, _ in held:
            self._inflight.pop(uid, None)
        self.release(gang)
        return held

    def settle(self, snapshot: ClusterSnapshot, *, gpu: str = GPU) -> list[GangKey]:
        """Close out what the cluster has caught up with; return the gangs whose plan ended:
        a plan whose every role has its members bound or in flight (:func:`plan_filled`),
        and one whose gang has no pod left (nothing can use it). (A gang admitted earlier
        with no pod left holding anything starts over at the barrier:
        :meth:`recheck_admitted`.)"""
        done: list[GangKey] = []
        members = index_of(snapshot, gpu=gpu).gang_pods
        stamps = gang_stamps(snapshot)
        for gang, res in self.reservations():
            pods, record = members.get(gang), self._book.owned(gang)
            if not pods or plan_filled(gang, res.plan, pods, record=record, stamps=stamps,
                                       snapshot=snapshot, ledger=self, gpu=gpu):
                before = record.state
                self._end_plan(record)
                self._book.set_barrier(record, None)
                self._book.moved(gang, before, "settle")
                done.append(gang)
        if self._book.forget_admitted(snapshot.gangs) or done:
            self.version += 1
        return done

    def keep_for_replacements(self, snapshot: ClusterSnapshot, *, now: float, ttl: float,
                              gpu: str = GPU, spare: frozenset[GangKey] = frozenset(),
                              ) -> list[Transition]:
        """Hold for ``ttl`` what an admitted gang's members that went used, for their
        replacements, and end such holds no longer wanted (:func:`departures`); return one
        :class:`Transition` per hold begun (``why`` ``keep_for_replacements``) or ended
        (``drop_plan``), the gang ADMITTED before and after."""
        made: list[Transition] = []
        for found in departures(snapshot, self, gpu=gpu, spare=spare):
            record = self._book.owned(found.gang)
            record.members, record.members_stamp, before = found.members, found.stamp, record.state
            if found.hold is not None:
                self.reserve(found.hold, now=now, ttl=ttl, replacing=found.gone)
            elif not (found.end and self._end_plan(record)):
                continue
            self.version += 1
            made.append(Transition(found.gang, before, record.state, "keep_for_replacements"
                                   if found.hold is not None else "drop_plan"))
        return made

    def recheck_admitted(self, gang: GangKey, snapshot: ClusterSnapshot, *,
                         gpu: str = GPU) -> Transition | None:
        """A gang admitted earlier with no pod left holding anything starts over at the
        barrier, so a recreated gang (a JobSet restart) is again bound all or nothing. Asked
        for the gang a decision is about, before it reads :meth:`admitted_stage`."""
        record = self._book.get(gang)
        if (record is None or record.admitted is None or record.plan is not None
                or record.waiting):
            return None
        if placed_counts(gang, snapshot, self, gpu=gpu):
            return None
        record = self._book.owned(gang)
        before = record.state
        record.admitted, record.stage = None, -1
        self.version += 1
        return self._book.moved(gang, before, "recheck_admitted")

    def forget_gang(self, gang: GangKey) -> Transition | None:
        """The gang's workload is gone."""
        moved = self.release(gang)
        record = self._book.writable(gang)
        if record is None:
            return moved
        before = record.state if moved is None else moved.before
        self._book.set_hold(record, None)
        record.admitted, record.stage = None, -1
        return self._book.moved(gang, before, "forget_gang")

    # after a restart -----------------------------------------------------------------------
    def rebuild(
        self, snapshot: ClusterSnapshot, *, now: float, ttl: float, gpu: str = GPU,
        stage_ttl: float | None = None,
    ) -> None:
        """Start over from what the cluster shows: gangs with bound members were admitted
        before the restart (the barrier released them), and a gang left below its minimum
        (a crash between two binds) gets a plan for the rest of its minimum."""
        self._book.clear()  # a preemptor's hold is made again at its next preempt call
        self._placed_memo.clear()
        self._inflight.clear()
        for gang, stage, plan in restored(snapshot, self, gpu=gpu):
            record = self._book.open(gang.key)
            record.admitted, record.stage = now, stage
            if plan is not None:
                # A staged gang released up to a stage waits for its next stage's pods to be
                # created: its plan holds them as long as the barrier would have.
                staged = stage_ttl is not None and stage < gang.last_stage
                self.reserve(plan, now=now, ttl=max(ttl, stage_ttl) if staged and
                             stage_ttl is not None else ttl)
        self.version += 1
