"""What Muster has promised but the cluster does not show yet: plans, pods in flight, barriers.

kube-scheduler tells an extender nothing about assumed or half-bound pods, so the ledger keeps
them: a *plan* reserves capacity for a gang's members until its deadline; a pod *in flight*
has reached bind but is not yet observed bound; a gang's *barrier* holds its members at bind
until its minimum has arrived. The ledger is mutable but pure: it reads no clock (every method
that needs time takes ``now``) and does no I/O. Its one owner is the gang session
(:mod:`extender.core.decide.session`), which the server calls under one lock.

A gang in the ledger, as kube-scheduler's ``cache/interface.go`` draws a pod::

                    reserve (filter plans the whole gang)
       (none) ────────────────────────────────────▶ planned ──expire (plan TTL)──▶ (none)
         ▲                                            │
         │                    arrive (first member reaches bind)
         │                                            ▼
         │◀──withdraw (bind timeout, yield, ──── at barrier ◀─┐ arrive (each new member
         │    node lost, no room on release)          │       │ restarts its clock)
         │                                            ├───────┘
         │                          admit (minimum at bind or bound)
         │                                            ▼
         │◀──settle (no pod of the gang left) ─── admitted ──settle (plan filled)──▶ plan
         │                                                                   ended; later
         └─────────────── forget_gang (the workload is gone) ◀── any ──     members bind
                                                                              at once

A *pod* is in flight from ``mark_bind_requested`` until ``confirm_bound`` (observed bound),
``forget_pod`` (deleted, bind failed) or its own TTL (``expire``). ``rebuild`` starts over
from the cluster after a restart: gangs with bound members are admitted, and one left below
its minimum gets a plan for the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from extender.core.gang.capacity import gang_priority, gang_stamps, index_of
from extender.core.gang.freeview import (
    CapacityMemo,
    free_capacity,
    in_flight_demands,
    occupants,
    per_node,
    per_role,
    placed_counts,
    placed_in_of,
    placed_subgroups,
)
from extender.core.gang.placement import Plan, placed_domain, plan_gang
from extender.core.model.resources import GPU
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import GangKey, NodeName

__all__ = [
    "INFLIGHT_TTL", "InFlight", "Ledger", "Reservation",
    # The free-capacity view's names, imported from here by the decisions that read both.
    "free_capacity", "in_flight_demands", "occupants", "per_node", "per_role",
    "placed_counts", "placed_in_of", "placed_subgroups",
]

INFLIGHT_TTL = 120.0
"""Seconds a pod stays in flight without being observed bound before it is forgotten."""
_STALE_ADMITTED = 256
"""Admitted gangs whose workload is gone that :meth:`Ledger.settle` lets pile up before it
forgets them in one pass."""


_NO_CLAIMS: Mapping[str, tuple[NodeName, str]] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Reservation:
    plan: Plan
    reserved_at: float
    deadline: float


@dataclass(frozen=True, slots=True)
class InFlight:
    node: NodeName
    since: float
    deadline: float


class Ledger:
    """Plans with deadlines, pods in flight and bind barriers, keyed for quick lookup."""

    def __init__(self) -> None:
        self._plans: dict[GangKey, Reservation] = {}
        self._inflight: dict[str, InFlight] = {}
        self._barrier: dict[GangKey, float] = {}
        """Gang -> when its latest new member reached bind (while below its minimum)."""
        self._waiting: dict[GangKey, dict[str, NodeName]] = {}
        """Gang -> members held at the barrier: pod uid -> node."""
        self._admitted: dict[GangKey, float] = {}
        """Gang -> when its barrier first released; later members of a released stage bind
        at once."""
        self._stage: dict[GangKey, int] = {}
        """Gang -> the last stage its barrier released (a staged gang is released stage by
        stage as its operator creates the pods of each)."""
        self._seen: dict[GangKey, set[str]] = {}
        """Gang -> members seen since its plan was made (filtered onto it or at bind): a
        member seen for the first time is progress, and keeps the plan alive."""
        self._holds: dict[GangKey, Reservation] = {}
        """Gang -> the capacity its preemption plan frees, held for it while its victims are
        evicted, so that no other gang or pod takes what was freed for it."""
        self.version = 0
        """Bumped on every change, so callers may cache what they derive from the ledger."""
        self.plans_ended = 0
        """Bumped whenever a plan ends (expired, withdrawn, settled, forgotten): capacity went
        back, and pods turned away while it held it may fit now."""
        self._settled: dict[GangKey, tuple[tuple[int | None, Plan, tuple[InFlight | None, ...]],
                                           bool]] = {}
        """Gang -> what :meth:`settle` last found for its plan, and under what (its stamp,
        the plan, its pods in flight); an entry goes with the plan, so there are never more
        than there are plans."""
        self._claims: dict[GangKey, dict[str, tuple[NodeName, str]]] = {}
        """Gang -> pod uid -> (node, role): the one node of the plan a member's filter passed
        it, until its bind arrives (:meth:`claim`); goes with the plan."""
        self._placed_memo: dict[GangKey, tuple[ClusterSnapshot, int, dict[
            tuple[NodeName, str], int]]] = {}
        self._capacity_memo: tuple[ClusterSnapshot | None, int, CapacityMemo] = (
            None, -1, CapacityMemo({}, {}))

    def capacity_memo(self, snapshot: ClusterSnapshot) -> CapacityMemo:
        """Free-capacity changes derived from this snapshot and this ledger, kept until either
        changes (:func:`free_capacity`; every filter asks, most with nothing changed since)."""
        known, version, memo = self._capacity_memo
        if known is not snapshot or version != self.version:
            memo = CapacityMemo({}, {})
            self._capacity_memo = (snapshot, self.version, memo)
        return memo

    def clone(self) -> Ledger:
        """An independent copy (memos dropped): for what-if questions and replay checks."""
        twin = Ledger()
        twin._plans = dict(self._plans)
        twin._inflight = dict(self._inflight)
        twin._barrier = dict(self._barrier)
        twin._waiting = {g: dict(w) for g, w in self._waiting.items()}
        twin._admitted = dict(self._admitted)
        twin._stage = dict(self._stage)
        twin._holds = dict(self._holds)
        twin._seen = {g: set(s) for g, s in self._seen.items()}
        twin._claims = {g: dict(c) for g, c in self._claims.items()}
        twin.version = self.version
        return twin

    # plans ---------------------------------------------------------------------------------
    def plan_for(self, gang: GangKey) -> Plan | None:
        res = self._plans.get(gang)
        return None if res is None else res.plan

    def reservation(self, gang: GangKey) -> Reservation | None:
        return self._plans.get(gang)

    def reservations(self) -> list[tuple[GangKey, Reservation]]:
        return sorted(self._plans.items())

    def reserve(self, plan: Plan, *, now: float, ttl: float) -> None:
        self._plans[plan.gang] = Reservation(plan=plan, reserved_at=now, deadline=now + ttl)
        self._plan_went(plan.gang)  # what was kept was about the old plan, if any
        self._holds.pop(plan.gang, None)  # admitted: its plan holds what it needs now
        self.version += 1

    # capacity held for a preemptor ---------------------------------------------------------
    def hold(self, placement: Plan, *, now: float, deadline: float) -> None:
        """Hold ``placement`` for its gang, which is evicting victims to fit: other gangs
        and pods see that capacity as taken (even while the victims still use it) until the
        gang is planned, the hold is dropped, or ``deadline`` passes."""
        self._holds[placement.gang] = Reservation(plan=placement, reserved_at=now,
                                                  deadline=deadline)
        self.version += 1

    def unhold(self, gang: GangKey) -> None:
        if self._holds.pop(gang, None) is not None:
            self.version += 1
            self.plans_ended += 1

    def holds(self) -> list[tuple[GangKey, Reservation]]:
        """Preemptors' holds, sorted by gang."""
        return sorted(self._holds.items())

    def holding(self) -> frozenset[GangKey]:
        """The gangs holding capacity others may not use: by a plan, or by a hold."""
        return frozenset(self._plans) | frozenset(self._holds)

    def progress(self, gang: GangKey, pod_uid: str, *, now: float, ttl: float) -> bool:
        """A member of the gang was filtered onto its plan or reached bind. The first time
        since the plan was made is progress: the plan then lasts ``ttl`` from ``now`` at
        least, so a gang whose members keep arriving (a slow scheduler queue, a large gang)
        is not expired and planned over again while it gathers. A member retrying is not
        progress. Returns whether it was."""
        if gang not in self._plans:
            return False
        seen = self._seen.setdefault(gang, set())
        if pod_uid in seen:
            return False
        seen.add(pod_uid)
        self.extend(gang, deadline=now + ttl)
        return True

    def extend(self, gang: GangKey, *, deadline: float) -> None:
        """Keep the gang's plan until ``deadline`` at least: a staged gang's plan holds the
        later stages' capacity while the operator creates their pods."""
        res = self._plans.get(gang)
        if res is not None and res.deadline < deadline:
            self._plans[gang] = Reservation(res.plan, res.reserved_at, deadline)
            self.version += 1

    def claim(self, gang: GangKey, pod_uid: str, node: NodeName, role: str) -> None:
        """A member's filter passed it ``node`` alone, one of its plan's open slots of
        ``role``. kube-scheduler skips scoring for a pod with one feasible node and binds it
        there; until that bind arrives, other members' filters leave the slot to it (two
        members offered the same open nodes could otherwise both pick one, and one bind
        would be turned away). A claim is a hint for the filter only: binds check the plan's
        slots as always. It goes with the plan; a member filtered again claims anew."""
        if gang in self._plans:
            self._claims.setdefault(gang, {})[pod_uid] = (node, role)

    def claims(self, gang: GangKey) -> Mapping[str, tuple[NodeName, str]]:
        """Pod uid -> (node, role) claimed on the gang's plan (no copy)."""
        return self._claims.get(gang, _NO_CLAIMS)

    def _plan_went(self, gang: GangKey) -> None:
        """What is kept per plan goes with it."""
        self._seen.pop(gang, None)
        self._settled.pop(gang, None)
        self._claims.pop(gang, None)

    def drop_plan(self, gang: GangKey) -> None:
        """End the gang's plan only; its barrier and held members stay. For a plan the cluster
        no longer honours (a slot taken behind Muster's back): the next member's filter plans
        the rest of the gang again around the members already held."""
        self._plan_went(gang)
        if self._plans.pop(gang, None) is not None:
            self.version += 1
            self.plans_ended += 1

    def release(self, gang: GangKey) -> None:
        """Drop the gang's plan and barrier (its in-flight pods stay until observed)."""
        self._plan_went(gang)
        if self._plans.pop(gang, None) is not None:
            self.plans_ended += 1
        self._barrier.pop(gang, None)
        self._waiting.pop(gang, None)
        self.version += 1

    def expire(self, now: float) -> list[GangKey]:
        """Drop plans whose deadline has come, and stale in-flight pods; return the gangs."""
        gone = sorted(g for g, r in self._plans.items() if r.deadline <= now)
        for gang in gone:
            del self._plans[gang]
            self._plan_went(gang)
        self.plans_ended += len(gone)
        lapsed = [g for g, r in self._holds.items() if r.deadline <= now]
        for gang in lapsed:
            del self._holds[gang]
        self.plans_ended += len(lapsed)
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

    # pods in flight ------------------------------------------------------------------------
    def mark_bind_requested(
        self, pod_uid: str, node: NodeName, *, now: float, ttl: float = INFLIGHT_TTL
    ) -> None:
        current = self._inflight.get(pod_uid)
        if current is not None and current.node == node:
            return  # a retried bind of the same pod keeps its first timestamp
        self._inflight[pod_uid] = InFlight(node=node, since=now, deadline=now + ttl)
        self.version += 1

    def confirm_bound(self, pod_uid: str, node: NodeName) -> None:
        """The pod is observed bound: the snapshot now charges it, so stop charging it here."""
        self._inflight.pop(pod_uid, None)
        for waiting in self._waiting.values():
            waiting.pop(pod_uid, None)
        self.version += 1

    def forget_pod(self, pod_uid: str) -> None:
        """The pod was deleted, or its bind failed: it holds nothing any more."""
        self._inflight.pop(pod_uid, None)
        for gang in [g for g, w in self._waiting.items() if pod_uid in w]:
            del self._waiting[gang][pod_uid]
            if not self._waiting[gang]:
                del self._waiting[gang]
                self._barrier.pop(gang, None)
        self.version += 1

    def in_flight(self) -> Mapping[str, InFlight]:
        return self._inflight

    # barriers ------------------------------------------------------------------------------
    def arrive(self, gang: GangKey, pod_uid: str, node: NodeName, *, now: float) -> None:
        """A member reached bind: hold it at the gang's barrier.

        A member arriving for the first time is progress: the barrier's clock restarts, so a
        gang whose members keep coming (a large gang, a busy scheduler queue) is not failed
        while it gathers, and one whose next member does not come within the timeout is. A
        member retrying its bind is not progress.
        """
        held = self._waiting.setdefault(gang, {})
        if pod_uid not in held or gang not in self._barrier:
            self._barrier[gang] = now
        held[pod_uid] = node
        self.version += 1

    def waiting(self, gang: GangKey) -> tuple[tuple[str, NodeName], ...]:
        return tuple(sorted(self._waiting.get(gang, {}).items()))

    def held(self, gang: GangKey) -> Mapping[str, NodeName]:
        """Pod UID -> node of the gang's members held at the barrier (unsorted, no copy: for
        checks on every arrival)."""
        return MappingProxyType(self._waiting.get(gang, {}))

    def barrier_started(self, gang: GangKey) -> float | None:
        """When the gang's latest new member reached the barrier (``None``: no barrier)."""
        return self._barrier.get(gang)

    def barriers(self) -> list[tuple[GangKey, float]]:
        return sorted(self._barrier.items())

    def admit(self, gang: GangKey, *, now: float, stage: int = 0,
              keep: frozenset[str] = frozenset()) -> tuple[tuple[str, NodeName], ...]:
        """Open the barrier up to ``stage``: return the members held there, now free to bind.
        Members in ``keep`` (of later stages) stay held, their barrier restarted at ``now``."""
        held = self._waiting.pop(gang, {})
        released = tuple(sorted((u, n) for u, n in held.items() if u not in keep))
        kept = {u: n for u, n in held.items() if u in keep}
        self._barrier.pop(gang, None)
        if kept:
            self._waiting[gang] = kept
            self._barrier[gang] = now
        self._admitted.setdefault(gang, now)
        self._stage[gang] = max(stage, self._stage.get(gang, -1))
        self.version += 1
        return released

    def is_admitted(self, gang: GangKey) -> bool:
        """Whether the gang's barrier released (its first stage at least)."""
        return gang in self._admitted

    def admitted_stage(self, gang: GangKey) -> int:
        """The last stage of the gang its barrier released; -1 before the first."""
        return self._stage.get(gang, 0) if gang in self._admitted else -1

    def withdraw(self, gang: GangKey) -> tuple[tuple[str, NodeName], ...]:
        """The barrier timed out: drop the gang's plan and its held members (returned), so
        kube-scheduler requeues them and the capacity goes to someone else."""
        held = self.waiting(gang)
        for uid, _ in held:
            self._inflight.pop(uid, None)
        self.release(gang)
        return held

    def settle(self, snapshot: ClusterSnapshot, *, gpu: str = GPU) -> list[GangKey]:
        """Close out what the cluster has caught up with; return the gangs whose plan ended.

        A plan whose every role has as many of the gang's pods bound (or in flight) as its
        slots hold has done its job: the snapshot charges those pods now, so keeping it would
        reserve their capacity a second time once they finish or are deleted. Counted per
        role, not per slot: kube-scheduler may put two members of a role on one planned node
        where the plan had one there and one on another (the filter offers each member every
        node with a slot open for its role when they are decided together), and the slot left
        empty would otherwise hold its node's capacity from every other pod until the plan's
        TTL. The members placed when the plan was made (:attr:`Plan.placed`: it was made for
        the rest, after a plan ended or a restart) are counted on top of its slots; otherwise
        such a plan would end at once, and what it holds for the rest of the gang would go to
        the next gang planned before the rest binds there. A plan whose gang has no pod left
        ends too: nothing can use it. (A gang admitted
        earlier with no pod left holding anything starts over at the barrier:
        :meth:`recheck_admitted`.)
        """
        done: list[GangKey] = []
        members = index_of(snapshot, gpu=gpu).gang_pods
        stamps = gang_stamps(snapshot)
        changed = False
        for gang, res in self.reservations():
            pods = members.get(gang)
            # With every pod of the gang deleted, nothing can use the plan any more.
            if not pods or self._filled(gang, res.plan, pods, stamps, snapshot, gpu=gpu):
                del self._plans[gang]
                self._plan_went(gang)
                self.plans_ended += 1
                self._barrier.pop(gang, None)
                done.append(gang)
                changed = True
        if len(self._admitted) > len(snapshot.gangs) + _STALE_ADMITTED:
            # Gangs whose workload is gone, forgotten now and then rather than on every call
            # (this runs after every bind); a recreated gang is caught by recheck_admitted.
            for gang in [g for g in self._admitted if g not in snapshot.gangs]:
                del self._admitted[gang]
                self._stage.pop(gang, None)
            changed = True
        if changed:
            self.version += 1
        return done

    def _filled(self, gang: GangKey, plan: Plan, pods: tuple[str, ...],
                stamps: Mapping[str, int] | None, snapshot: ClusterSnapshot, *,
                gpu: str) -> bool:
        """Whether every role of ``plan`` has as many of the gang's pods bound or in flight
        as it holds. Kept while the gang's stamp, its pods in flight and the plan stay the
        same: settling runs on every new snapshot, and most pod events touch no planned
        gang, so counting every member of every plan each time was most of its cost."""
        stamp = None if stamps is None else stamps.get(gang)
        flights = tuple(map(self._inflight.get, pods))
        key = (stamp, plan, flights)
        if stamp is not None:
            kept = self._settled.get(gang)
            if kept is not None and kept[0] == key:
                return kept[1]
        placed: dict[str, int] = {}
        for (_node, role), n in placed_counts(gang, snapshot, self, gpu=gpu).items():
            placed[role] = placed.get(role, 0) + n
        wanted: dict[str, int] = {}
        for _node, role, n in plan.slots:
            wanted[role] = wanted.get(role, 0) + n
        for role, n in plan.placed:  # a plan made for the rest of the gang
            if role in wanted:
                wanted[role] += n
        filled = all(placed.get(role, 0) >= n for role, n in wanted.items())
        if stamp is not None:
            self._settled[gang] = (key, filled)
        return filled

    def recheck_admitted(self, gang: GangKey, snapshot: ClusterSnapshot, *,
                         gpu: str = GPU) -> None:
        """A gang admitted earlier with no pod left holding anything starts over at the
        barrier, so a recreated gang (a JobSet restart) is again bound all or nothing. Asked
        for the gang a decision is about, before it reads :meth:`admitted_stage`."""
        if gang not in self._admitted or gang in self._plans or self._waiting.get(gang):
            return
        if not placed_counts(gang, snapshot, self, gpu=gpu):
            del self._admitted[gang]
            self._stage.pop(gang, None)
            self.version += 1

    def forget_gang(self, gang: GangKey) -> None:
        """The gang's workload is gone."""
        self.release(gang)
        self._holds.pop(gang, None)
        self._admitted.pop(gang, None)
        self._stage.pop(gang, None)

    # after a restart -----------------------------------------------------------------------
    def rebuild(
        self, snapshot: ClusterSnapshot, *, now: float, ttl: float, gpu: str = GPU,
        stage_ttl: float | None = None,
    ) -> None:
        """Start over from what the cluster shows: gangs with bound members were admitted
        before the restart (the barrier released them), and a gang left below its minimum
        (a crash between two binds) gets a plan for the rest of its minimum."""
        self._plans.clear()
        self._seen.clear()
        self._placed_memo.clear()
        self._settled.clear()
        self._claims.clear()
        self._inflight.clear()
        self._barrier.clear()
        self._waiting.clear()
        self._admitted.clear()
        self._stage.clear()
        self._holds.clear()  # a preemptor's plan is made again at its next preempt call
        order = sorted(snapshot.gangs.values(),
                       key=lambda g: (-gang_priority(g, snapshot, gpu=gpu), g.created, g.key))
        for gang in order:
            bound = placed_counts(gang.key, snapshot, self, gpu=gpu)  # nothing is in flight
            placed, nodes = per_role(bound), per_node(bound)
            if not placed:
                continue
            self._admitted[gang.key] = now
            # Members the barrier released are bound; their latest stage was released.
            self._stage[gang.key] = max(gang.stage_of(role) for role in placed)
            if sum(placed.values()) >= gang.min_member:
                continue
            capacity = free_capacity(snapshot, self, gpu=gpu)
            plan = plan_gang(gang, snapshot=snapshot, capacity=capacity, placed=placed, gpu=gpu,
                             within=placed_domain(gang, snapshot, nodes),
                             occupied=occupants(snapshot, self, gpu=gpu))
            if isinstance(plan, Plan) and plan.slots:
                # A staged gang released up to a stage waits for its next stage's pods to be
                # created: its plan holds them as long as the barrier would have.
                staged = stage_ttl is not None and self._stage[gang.key] < gang.last_stage
                self.reserve(plan, now=now, ttl=max(ttl, stage_ttl) if staged and
                             stage_ttl is not None else ttl)
        self.version += 1
