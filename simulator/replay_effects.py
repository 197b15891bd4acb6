"""The replay's hand for the session's effects: each kind carried out on the virtual clock.

:class:`ReplayEffects` is the simulator's :class:`~extender.core.decide.effects.EffectHandler`,
the counterpart of the server's ``ServiceEffects``: a released or failed held request polls at
once (the server wakes its thread), a parked member is bound by Muster, requeued pods go back
to the queue, ungated pods lose Muster's gate and enter the queue. Effects the server only
writes out (events, logs) or that the replay's kube-scheduler model never gives rise to are
handled too, each saying why nothing is done. It decides nothing and changes nothing but the
scheduler model it acts on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from extender.core.decide import effects as fx

if TYPE_CHECKING:
    from simulator.scheduler import SchedulerModel


class ReplayEffects:
    """Carries out effects for ``model`` at virtual time ``now``."""

    __slots__ = ("model", "now")

    def __init__(self, model: SchedulerModel, now: float) -> None:
        self.model = model
        self.now = now

    def emit(self, effect: fx.Emit) -> None:
        """Nothing to do: the replay keeps no events (the session's journal has them)."""

    def release(self, effect: fx.Release) -> None:
        self.model._poll(effect.ticket, self.now)

    def fail_held(self, effect: fx.FailHeld) -> None:
        self.model._poll(effect.ticket, self.now)

    def bind_parked(self, effect: fx.BindParked) -> None:
        self.model._bind_parked(effect.pod.uid, effect.node, self.now)

    def requeue(self, effect: fx.Requeue) -> None:
        model = self.model
        model._move([p.uid for p in effect.pods if p.uid in model._unschedulable], self.now)

    def ungate(self, effect: fx.Ungate) -> None:
        model, gate = self.model, self.model.settings.core.gate
        for ref in effect.pods:
            pod = model.cluster.pods.get(ref.uid)
            if pod is None or gate not in pod.gates:
                continue
            model.cluster.set_gates(ref.uid, tuple(g for g in pod.gates if g != gate))
            model.counters.ungated += 1
            model.enqueue(ref.uid, self.now)

    def evict(self, effect: fx.Evict) -> None:
        """Nothing to do: the replay's kube-scheduler model never calls preempt, the one verb
        that evicts. A driver that asks it must delete the victims, as the Eviction API
        does (the conformance test does so on both sides)."""

    def withdrawn(self, effect: fx.Withdrawn) -> None:
        self.model.counters.withdrawn += 1

    def plan_expired(self, effect: fx.PlanExpired) -> None:
        """Nothing to do: the session counts expired plans itself (``expired_total``)."""

    def workload_refused(self, effect: fx.WorkloadRefused) -> None:
        """Nothing to do: the server only logs it, and the replay writes no log."""
