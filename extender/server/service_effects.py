"""The server's hand for the session's effects: each effect kind carried out through a port.

:class:`ServiceEffects` is the server's :class:`~extender.core.decide.effects.EffectHandler`:
events go to the event sink, evictions, requeues and ungatings to their ports (only while
this replica leads), withdrawn barriers and refused workloads to the log. It runs under the
service's lock and must not block there: it never posts a Binding and never waits on the
network. What needs the lock's condition variable or the bind pool (waking held requests,
binding parked members) it only collects, for the service to do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from extender.core.decide.effects import (
    BindParked,
    Effect,
    Emit,
    Evict,
    FailHeld,
    PlanExpired,
    Release,
    Requeue,
    Ungate,
    Withdrawn,
    WorkloadRefused,
    dispatch,
)
from extender.state.ports import EventSink, Evictor, Requeuer, Ungater

log = logging.getLogger("muster.service")


class ServiceEffects:
    """Carries out one batch of effects at a time (:meth:`apply`), under the service's lock."""

    def __init__(self, *, events: EventSink, requeuer: Requeuer, evictor: Evictor,
                 ungater: Ungater, may_act: Callable[[], bool]) -> None:
        self._events = events
        self._requeuer = requeuer
        self._evictor = evictor
        self._ungater = ungater
        self._may_act = may_act
        """False once this replica no longer leads: it then evicts and ungates nothing."""
        self._wake = False
        self._parked: list[BindParked] = []

    def apply(self, effects: Iterable[Effect]) -> tuple[bool, list[BindParked]]:
        """Carry out ``effects`` in order. Returns whether held requests must be woken (one
        was released or failed) and the parked members to bind, off the lock."""
        self._wake, self._parked = False, []
        dispatch(effects, self)
        return self._wake, self._parked

    def emit(self, effect: Emit) -> None:
        self._events.emit(effect.event)

    def release(self, effect: Release) -> None:
        self._wake = True  # the held request reads its answer when it polls

    def fail_held(self, effect: FailHeld) -> None:
        self._wake = True  # the same

    def bind_parked(self, effect: BindParked) -> None:
        self._parked.append(effect)

    def requeue(self, effect: Requeue) -> None:
        log.info("event=requeue pods=%d reason=%r", len(effect.pods), effect.reason)
        self._requeuer.requeue(effect.pods, effect.reason)

    def ungate(self, effect: Ungate) -> None:
        if not self._may_act():  # its plan is in a ledger no longer leading
            log.warning("event=ungate-skipped gang=%s pods=%d reason=not-leader",
                        effect.gang or "-", len(effect.pods))
            return
        log.info("event=ungate gang=%s pods=%d reason=%r", effect.gang or "-",
                 len(effect.pods), effect.reason)
        self._ungater.ungate(effect.pods, effect.reason)

    def evict(self, effect: Evict) -> None:
        if not self._may_act():  # a replica that no longer leads evicts nothing
            log.warning("verb=preempt gang=%s event=evict-skipped pods=%d reason=not-leader",
                        effect.gang, len(effect.pods))
            return
        log.info("verb=preempt gang=%s event=evict pods=%d reason=%r", effect.gang,
                 len(effect.pods), effect.reason)
        self._evictor.evict(effect.pods, effect.reason)

    def withdrawn(self, effect: Withdrawn) -> None:
        log.warning("verb=bind gang=%s outcome=withdrawn cause=%s members=%d reason=%r",
                    effect.gang, effect.outcome, effect.members, effect.reason)

    def plan_expired(self, effect: PlanExpired) -> None:
        """Nothing to do: the session counts expired plans (``expired_total``, read by the
        metrics) and tells them as ``GangPlanExpired`` events, which come as :class:`Emit`."""

    def workload_refused(self, effect: WorkloadRefused) -> None:
        log.warning("workload=%s outcome=refused reason=%r", effect.workload,
                    effect.reason[:500])
