"""What a gang session asks its adapter to do, as values: the session decides, adapters act.

Every verb of :class:`~extender.core.decide.session.GangSession` returns its decision together with
a tuple of these effects. The session has already changed its own state (ledger, barrier
tables); an effect is what only the adapter can do: write an event, wake or fail a bind
request it holds, post a Binding Muster makes itself, requeue pods, ungate or evict pods, log,
count. The server does them with threads and the API server, the simulator on its virtual
clock; both go through :func:`dispatch` with their :class:`EffectHandler`, so an effect kind
neither driver handles fails type checking, and the conformance test compares what both
decide.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, assert_never

from extender.core.model.notices import AnyEvent, PodRef
from extender.core.model.values import GangKey, NodeName


@dataclass(frozen=True, slots=True)
class Emit:
    """Write this event (the session already dropped repetitions)."""

    event: AnyEvent


@dataclass(frozen=True, slots=True)
class Release:
    """The held bind request ``ticket`` may bind ``pod`` now, to ``node`` (its gang is
    admitted): wake it; its next :meth:`GangSession.poll` answers BIND."""

    ticket: int
    pod: PodRef
    node: NodeName


@dataclass(frozen=True, slots=True)
class FailHeld:
    """The held bind request ``ticket`` fails (its gang timed out, yielded or lost a node, the
    pod was deleted, a newer request replaced it): wake it; its next poll answers REFUSE."""

    ticket: int
    pod: PodRef
    outcome: str
    reason: str


@dataclass(frozen=True, slots=True)
class BindParked:
    """Post ``pod``'s Binding to ``node`` now: a parked member (its request was failed while
    its gang gathered) of a gang that was just admitted. Report the result back with
    :meth:`GangSession.bound` or :meth:`GangSession.bind_failed`."""

    pod: PodRef
    node: NodeName


@dataclass(frozen=True, slots=True)
class Requeue:
    """Make kube-scheduler try these pods again: what stopped them is gone, and no cluster
    event kube-scheduler watches says so."""

    pods: tuple[PodRef, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class Ungate:
    """Remove Muster's scheduling gate (only that one) from these pods: their gang's plan is
    made (or they turned out to be in no gang), so kube-scheduler may queue them now."""

    pods: tuple[PodRef, ...]
    reason: str
    gang: GangKey | None = None


@dataclass(frozen=True, slots=True)
class Withdrawn:
    """A gang's barrier was withdrawn: its held members fail and its plan is dropped."""

    gang: GangKey
    members: int
    outcome: str
    """timed_out, yielded, node_gone or rejected."""
    reason: str


@dataclass(frozen=True, slots=True)
class PlanExpired:
    """A gang's plan reached its TTL before every member arrived."""

    gang: GangKey


@dataclass(frozen=True, slots=True)
class WorkloadRefused:
    """A workload Muster cannot schedule; told once per change of the reason."""

    workload: str
    reason: str


@dataclass(frozen=True, slots=True)
class Evict:
    """Evict these pods now, through the Eviction API (PodDisruptionBudgets are honoured):
    the whole victims of a gang's preemption plan. kube-scheduler evicts only the victims
    on the one node it picks per preemption call, which would leave a victim gang that spans
    nodes partly running until the preemptor's next members call; Muster evicts every victim
    of the plan at once instead."""

    gang: GangKey
    """The preemptor's gang."""
    pods: tuple[PodRef, ...]
    reason: str


Effect = (Emit | Release | FailHeld | BindParked | Requeue | Ungate | Evict | Withdrawn
          | PlanExpired | WorkloadRefused)
"""Every effect a session returns: a closed union, carried out only through :func:`dispatch`."""


class EffectHandler(Protocol):
    """What a driver does with each kind of effect, one method per kind. A driver that does
    nothing for one says so in that method, with its reason."""

    def emit(self, effect: Emit) -> None: ...
    def release(self, effect: Release) -> None: ...
    def fail_held(self, effect: FailHeld) -> None: ...
    def bind_parked(self, effect: BindParked) -> None: ...
    def requeue(self, effect: Requeue) -> None: ...
    def ungate(self, effect: Ungate) -> None: ...
    def evict(self, effect: Evict) -> None: ...
    def withdrawn(self, effect: Withdrawn) -> None: ...
    def plan_expired(self, effect: PlanExpired) -> None: ...
    def workload_refused(self, effect: WorkloadRefused) -> None: ...


def dispatch(effects: Iterable[Effect], handler: EffectHandler) -> None:
    """Hand each effect, in order, to ``handler``'s method for its kind: the one dispatch
    both drivers go through. An effect kind added to :data:`Effect` and not handled here
    fails type checking (``assert_never``), and so does a handler without its method."""
    for effect in effects:
        match effect:
            case Emit():
                handler.emit(effect)
            case Release():
                handler.release(effect)
            case FailHeld():
                handler.fail_held(effect)
            case BindParked():
                handler.bind_parked(effect)
            case Requeue():
                handler.requeue(effect)
            case Ungate():
                handler.ungate(effect)
            case Evict():
                handler.evict(effect)
            case Withdrawn():
                handler.withdrawn(effect)
            case PlanExpired():
                handler.plan_expired(effect)
            case WorkloadRefused():
                handler.workload_refused(effect)
            case _:
                assert_never(effect)


class Step(StrEnum):
    BIND = "bind"
    """Post this pod's Binding now (outside any lock), then report it."""
    HOLD = "hold"
    """Keep the request open until woken or ``deadline``, then poll ``ticket``."""
    REFUSE = "refuse"
    """Answer the bind request with ``reason`` as its error."""


@dataclass(frozen=True, slots=True)
class BindStep:
    """One step of a bind request through the barrier."""

    step: Step
    outcome: str
    """bound, released, already_admitted, parked, rejected, timed_out, superseded, node_gone,
    pod_gone, yielded: the counter label."""
    reason: str = ""
    gang: GangKey | None = None
    ticket: int = 0
    """For HOLD: the request's ticket (poll it)."""
    deadline: float = 0.0
    """For HOLD: poll by then at the latest."""
    effects: tuple[Effect, ...] = field(default=())
