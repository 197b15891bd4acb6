"""The core's tunables: one frozen value, validated when built, passed to every decision."""

from __future__ import annotations

from dataclasses import dataclass

from extender.core.decide.errors import DecisionError
from extender.core.gang.ledger import INFLIGHT_TTL
from extender.core.gang.placement import SEARCH_BUDGET
from extender.core.gang.scoring import Policy, policy_named
from extender.core.model.resources import GPU
from extender.core.workloads.admission import GATE
from extender.core.workloads.workload import DEFAULT_LIMITS, WorkloadLimits


@dataclass(frozen=True, slots=True)
class CoreSettings:
    """Tunables of the core, validated when built: a value out of range raises
    :class:`DecisionError` naming it, an unknown ``scoring`` policy the gang layer's
    :class:`~extender.core.gang.scoring.UnknownPolicyError`."""

    plan_ttl: float = 60.0
    """Seconds a gang's plan reserves capacity while its members arrive."""
    replacement_ttl: float = 60.0
    """Seconds the capacity of an admitted gang's members that went (deleted, evicted,
    failed) is held for their replacements once the gang is below its minimum, so that no
    other gang takes it while their workload's controller makes them again (a Job's
    pod-failure backoff starts at 10 s); none coming by then, it is free again."""
    bind_timeout: float = 3.0
    """Seconds the bind barrier waits for a gang's next member before all held are failed;
    also about how long one bind request is held (kube-scheduler's extender ``httpTimeout``
    must be at least 1.5 times it)."""
    scoring: str = Policy.BINPACK.value
    """Scoring policy: binpack, spread, topology or fragmentation."""
    gpu_resource: str = GPU
    """The extended resource counted per device."""
    inflight_ttl: float = INFLIGHT_TTL
    """Seconds a pod at bind is charged before it must be observed bound."""
    search_budget: int = SEARCH_BUDGET
    """Placements the placement search may try after greedy placement fails."""
    stage_ttl: float = 600.0
    """Seconds a staged gang's plan keeps holding its later stages' capacity once an earlier
    stage is released, while its operator creates their pods (after pulling images and
    starting the earlier stage); a stage that does not appear by then gives its capacity back."""
    max_held: int | None = None
    """Bind requests held open at the barrier at most (the server: its threads less those
    kept for filters); members beyond it are parked. ``None``: no limit."""
    hold_grace: float = 1.25
    """A held request may wait up to this many times ``bind_timeout`` when its gang's
    barrier ends by then (members that came together time out together)."""
    yield_every: float = 2.0
    """Seconds between checks for gangs deadlocked at the bind barrier."""
    gate: str = GATE
    """The scheduling gate Muster's admission webhook puts on new gang pods and removes once
    their gang's plan is made (:mod:`extender.core.decide.gating`)."""
    gate_bound: float = 120.0
    """Seconds a pod may stay behind :attr:`gate` without a gang Muster can resolve (its
    owner never observed, its workload refused) before its gate is removed anyway: a gated
    pod is never stuck for good; filter and bind still treat it as strictly as any."""
    gate_retry: float = 10.0
    """Seconds before asking again to remove a gate that is still there (the patch failed)."""
    pod_events_after: float = 5.0
    """Seconds a gang waits behind its gates for want of room before its pods are told why
    (``GangWaiting`` on each pod; its workload and Gang object say it at once): a gang that
    waits only a moment never writes an Event per pod (:mod:`extender.core.decide.podnews`).
    0 tells at once."""
    scheduler_names: tuple[str, ...] = ("muster",)
    """The ``schedulerName`` of the pods this Muster serves: it ungates only those."""
    workload_limits: WorkloadLimits = DEFAULT_LIMITS
    """The most pods and gangs one workload may resolve to; a workload beyond either is
    refused whole (reported with its name and the limit) instead of being planned."""

    def __post_init__(self) -> None:
        policy_named(self.scoring)  # raises a clear error naming the known policies
        if self.max_held is not None and self.max_held < 1:
            raise DecisionError(f"CoreSettings.max_held must be at least 1, got {self.max_held}")
        if self.hold_grace < 1:
            raise DecisionError("CoreSettings.hold_grace must be at least 1, got "
                                f"{self.hold_grace}")
        for name in ("plan_ttl", "replacement_ttl", "bind_timeout", "inflight_ttl",
                     "yield_every", "stage_ttl", "gate_bound", "gate_retry"):
            if getattr(self, name) <= 0:
                raise DecisionError(f"CoreSettings.{name} must be positive, got "
                                    f"{getattr(self, name)}")
        if not 0 <= self.pod_events_after < float("inf"):
            raise DecisionError("CoreSettings.pod_events_after must be 0 or more seconds, got "
                                f"{self.pod_events_after}")

    @property
    def policy(self) -> Policy:
        return policy_named(self.scoring)
