"""A gang's lifecycle: its one record in the ledger, its state, and the transitions between.

:class:`GangRecord` holds everything the ledger keeps for one gang (its plan, its preemption
hold, its barrier and the members held there, when it was admitted and up to which stage,
the members seen and the slots claimed on its plan, the settle memo). :attr:`GangRecord.state`
is the one place a gang's :class:`GangState` is worked out from it, as kube-scheduler's
``cache/interface.go`` draws a pod. Each arrow is a method of
:class:`~extender.core.gang.ledger.Ledger` (those that return nothing else return the
:class:`Transition`)::

  (none) ──hold (a preemption plan)──▶ PREEMPTING ──unhold, expire (its deadline)──▶ (none)
    │                                      │
    │ reserve (filter plans the gang)      │ reserve (the plan replaces the hold)
    ▼                                      ▼
  PLANNED ◀────────────────────────────────┘
    │  └──expire (plan TTL), release, drop_plan, settle (filled, no pod left)──▶ (none)
    │
    │ arrive (a member reaches bind; also from (none): a plan dropped)
    ▼
  AT_BARRIER ◀──┐ arrive (a new member restarts the barrier's clock; a retry does not)
    │  ├────────┘ drop_plan (the members held stay)
    │  └──withdraw (bind timeout, yield, node lost), release, settle, forget_pod (the last
    │     member held) ──▶ what the record still holds: ADMITTED, PLANNED, PREEMPTING, (none)
    │
    │ admit (the minimum, or a stage's, at bind or bound; members of later stages kept
    ▼        held stay AT_BARRIER)
  ADMITTED ──arrive (a later stage's member reaches bind)──▶ AT_BARRIER
    │         reserve, settle (a plan for the rest comes and goes; the gang stays ADMITTED)
    │         keep_for_replacements (members went, below its minimum: a plan holds their
    │         capacity for their replacements; the gang stays ADMITTED)
    └──recheck_admitted (no pod left holding anything), settle (workload gone)──▶ (none)

  any ──forget_gang (the workload is gone)──▶ (none)

The states the cluster shows rather than the ledger (waiting with no promise, bound,
finished) are worked out by :func:`observed_state`, the one place every view (inspect, Gang
objects, the CLI, metrics) gets a gang's state from. Pure: no clock, no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from extender.core.gang.placement import Plan
from extender.core.model.values import GangKey, NodeName, PodShape


class GangState(enum.StrEnum):
    """Where a gang is in its lifecycle. The first four are the ledger's
    (:meth:`~extender.core.gang.ledger.Ledger.state`); the last three are what the cluster
    shows of a gang the ledger promises nothing to (:func:`observed_state`)."""

    PREEMPTING = "preempting"
    """Held for preemption: the capacity its preemption plan frees is held for it while its
    victims are evicted (``hold``), no plan yet."""
    PLANNED = "planned"
    """A plan reserves capacity for its members until the plan's deadline (``reserve``)."""
    AT_BARRIER = "at_barrier"
    """Members are held at bind, its barrier's clock running, until its minimum (or the
    next stage's) has arrived (``arrive``)."""
    ADMITTED = "admitted"
    """Its barrier released (``admit``): later members of a released stage bind at once."""
    WAITING = "waiting"
    """Nothing promised to it: no plan, not at the barrier, not admitted."""
    BOUND = "bound"
    """At least its minimum of members hold resources on nodes."""
    FINISHED = "finished"
    """It ran whole and its pods are ending (a Job's pods succeed)."""


VIEW_STATES = (GangState.WAITING, GangState.PLANNED, GangState.BOUND, GangState.FINISHED)
"""The states :func:`observed_state` gives: what inspect, the Gang objects and the gang
gauge show."""

STATE_AFTER_EVENT: Mapping[str, GangState] = {
    "GangWaiting": GangState.WAITING, "GangPlanned": GangState.PLANNED,
    "GangAdmitted": GangState.ADMITTED, "GangBindTimeout": GangState.WAITING,
    "GangYielded": GangState.WAITING, "GangNodeLost": GangState.WAITING,
    "GangPlanExpired": GangState.WAITING, "GangHoldingForReplacement": GangState.PLANNED,
}
"""The state a gang is in after Muster wrote the event of this reason on its workload (after
a timeout, a yield, a lost node or an expired plan it waits to be planned again)."""


@dataclass(frozen=True, slots=True)
class Reservation:
    plan: Plan
    reserved_at: float
    deadline: float
    replacing: tuple[str, ...] = ()
    """The uids of the admitted gang's members that went, whose capacity this plan holds for
    their replacements (:meth:`~extender.core.gang.ledger.Ledger.keep_for_replacements`);
    empty for any other plan."""


@dataclass(frozen=True, slots=True)
class InFlight:
    """A pod at bind the snapshot does not show bound yet (or a pod of no gang taking
    devices through claims, from the filter that sent it to one node): the node it was sent
    to, since when, and until when the ledger charges it there."""

    node: NodeName
    since: float
    deadline: float


@dataclass(frozen=True, slots=True)
class Transition:
    """A gang's state changed: from ``before`` to ``after`` (``None``: no record), by the
    ledger method ``why``."""

    gang: GangKey
    before: GangState | None
    after: GangState | None
    why: str


Member = tuple[NodeName, str, PodShape]
"""Where an admitted gang's member holds resources: its node, its role, its pod's shape."""

SettleMemo = tuple[tuple[int | None, Plan, tuple[object, ...]], bool]
"""What :meth:`~extender.core.gang.ledger.Ledger.settle` last found for a plan (filled or
not), and under what: the gang's stamp, the plan, its pods in flight."""


@dataclass(slots=True)
class GangRecord:
    """Everything the ledger keeps for one gang. The plan's companions (``seen``, ``claims``,
    ``settled``) go with the plan; a record with no state left is dropped."""

    plan: Reservation | None = None
    """Capacity reserved for the gang's members until the reservation's deadline."""
    hold: Reservation | None = None
    """The capacity its preemption plan frees, held for it while its victims are evicted, so
    that no other gang or pod takes what was freed for it."""
    barrier: float | None = None
    """When its latest new member reached bind (while below its minimum)."""
    waiting: dict[str, NodeName] = field(default_factory=dict)
    """Members held at the barrier: pod uid -> node."""
    admitted: float | None = None
    """When its barrier first released; later members of a released stage bind at once."""
    stage: int = -1
    """The last stage its barrier released (a staged gang is released stage by stage as its
    operator creates the pods of each)."""
    seen: set[str] = field(default_factory=set)
    """Members seen since its plan was made (filtered onto it or at bind): a member seen for
    the first time is progress, and keeps the plan alive."""
    claims: dict[str, tuple[NodeName, str]] = field(default_factory=dict)
    """Pod uid -> (node, role): the one node of the plan a member's filter passed it, until
    its bind arrives."""
    settled: SettleMemo | None = None
    members: dict[str, Member] = field(default_factory=dict)
    """An admitted gang's members last seen holding resources, by pod uid: where a member
    that goes was, so that its capacity is held for its replacement."""
    members_stamp: int | None = None
    """The gang's stamp when ``members`` was read (``None``: read again at every look)."""

    @property
    def state(self) -> GangState | None:
        """The gang's state in the ledger (``None``: the ledger promises it nothing)."""
        if self.barrier is not None:
            return GangState.AT_BARRIER
        if self.admitted is not None:
            return GangState.ADMITTED
        if self.plan is not None:
            return GangState.PLANNED
        if self.hold is not None:
            return GangState.PREEMPTING
        return None

    def empty(self) -> bool:
        """Whether nothing is kept for the gang any more (its record can go)."""
        return (self.plan is None and self.hold is None and self.barrier is None
                and not self.waiting and self.admitted is None)

    def plan_went(self) -> None:
        """What is kept per plan goes with it."""
        self.seen = set()
        self.claims = {}
        self.settled = None

    def copy(self) -> GangRecord:
        """An independent copy (the settle memo dropped)."""
        return GangRecord(plan=self.plan, hold=self.hold, barrier=self.barrier,
                          waiting=dict(self.waiting), admitted=self.admitted, stage=self.stage,
                          seen=set(self.seen), claims=dict(self.claims),
                          members=self.members, members_stamp=self.members_stamp)


def observed_state(record: GangRecord | None, *, min_member: int, bound: int, finished: int,
                   held_at_bind: int) -> GangState:
    """A gang's state as the views show it: ``bound`` (at least ``min_member`` members hold
    resources), ``finished`` (it ran whole, ``finished`` members succeeded), ``planned`` (a
    plan and no member's bind held open), else ``waiting``."""
    if bound >= min_member:
        return GangState.BOUND
    if finished and bound + finished >= min_member:
        return GangState.FINISHED
    if record is not None and record.plan is not None and not held_at_bind:
        return GangState.PLANNED
    return GangState.WAITING
