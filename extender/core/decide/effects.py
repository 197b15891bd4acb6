"""What a gang session asks its adapter to do, as values: the session decides, adapters act.

Every verb of :class:`~extender.core.decide.session.GangSession` returns its decision together with
a tuple of these effects. The session has already changed its own state (ledger, barrier
tables); an effect is what only the adapter can do: write an event, wake or fail a bind
request it holds, post a Binding Muster makes itself, requeue pods, log, count. The server
does them with threads and the API server, the simulator on its virtual clock; both read
the same effects, which is what the conformance test compares.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

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


@dataclass(frozen=True, slots=True)
class WaitUntil:
    """The session has something to do at ``deadline`` (a held bind's limit): call
    :meth:`GangSession.poll` (or :meth:`GangSession.tick`) then, even if nothing happens."""

    deadline: float


Effect = (Emit | Release | FailHeld | BindParked | Requeue | Withdrawn | PlanExpired
          | WorkloadRefused | Evict | WaitUntil | Ungate)


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
