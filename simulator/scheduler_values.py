"""The kube-scheduler model's values: its mode, its settings, the events it schedules on the
replay's queue, the counters of what it did, a pod's wait in the unschedulable pool and the
nodes its filter passed.

Values only: nothing here queues, scores or binds (:class:`~simulator.scheduler.SchedulerModel`
does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from extender.core.decide.decisions import CoreSettings
from extender.core.gang.nodecapacity import Demand, NodeCapacity
from extender.core.model.values import NodeName, PodShape
from simulator.cluster import ClusterModel
from simulator.kube_scoring import Weights


class Mode(StrEnum):
    DEFAULT = "default"
    """kube-scheduler alone: pods bind one by one, gangs may be left partial."""
    MUSTER = "muster"
    """kube-scheduler with Muster's filter, prioritize and bind (the gang barrier)."""
    GATED = "muster+gates"
    """As ``muster``, and each new gang member is created behind Muster's scheduling gate (as
    the admission policy or webhook puts it there): it enters kube-scheduler's queue only once
    an ungating look (:meth:`GangSession.ungate`, the server's own) planned its gang whole."""


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    mode: Mode = Mode.MUSTER
    core: CoreSettings = field(default_factory=CoreSettings)
    """Muster's settings (plan TTL, bind timeout, scoring policy)."""
    extender_weight: int = 10
    """The extender's weight in the scheduler configuration (manifests use 10)."""
    weights: Weights = field(default_factory=Weights)
    """kube-scheduler's score plugin weights (its default profile's)."""
    initial_backoff: float = 1.0
    max_backoff: float = 10.0
    unschedulable_timeout: float = 300.0
    """Pods left unschedulable this long go back to the queue without a cluster event."""
    flush_interval: float = 30.0
    """How often kube-scheduler looks for such pods."""
    seed: int = 0
    """Seeds the draw among nodes with the best score (kube-scheduler draws at random)."""
    exhaustive: bool = False
    """Hand the extender every feasible node and every question, as a real cluster would;
    slower, and the same decisions (see :mod:`simulator.extender_model`)."""

    def __post_init__(self) -> None:
        if not 0 < self.initial_backoff <= self.max_backoff:
            raise ValueError("backoff: need 0 < initial_backoff <= max_backoff")


@dataclass(frozen=True, slots=True)
class BackoffEnd:
    uid: str


@dataclass(frozen=True, slots=True)
class Flush:
    """kube-scheduler's periodic look for pods left unschedulable too long."""


@dataclass(frozen=True, slots=True)
class PollHeld:
    """A bind request held at Muster's barrier reaches its deadline."""

    ticket: int


@dataclass(frozen=True, slots=True)
class Tick:
    """Something falls due in Muster's session (a plan's TTL, a barrier's timeout)."""


@dataclass(frozen=True, slots=True)
class Look:
    """An ungating look falls due without a change (``muster+gates``)."""


SchedulerEvent = BackoffEnd | Flush | PollHeld | Tick | Look


@dataclass(slots=True)
class Waiting:
    """A pod in the unschedulable pool: since when, and until when it backs off."""

    since: float
    until: float
    """Backoff expiry."""


@dataclass(slots=True)
class Counters:
    """What the scheduler did, for benchmarks and tests."""

    attempts: int = 0
    """Scheduling cycles run."""
    failed: int = 0
    """Cycles that found no node (the pod backs off)."""
    held: int = 0
    """Binds held at Muster's barrier."""
    withdrawn: int = 0
    """Gangs whose barrier timed out (their held members failed)."""
    rejected_binds: int = 0
    """Held or assumed pods whose bind failed and went back to the queue."""
    gated: int = 0
    """Pods created behind Muster's gate (``muster+gates``)."""
    ungated: int = 0
    """Gated pods whose gate a look lifted."""


class FeasibleNodes:
    """kube-scheduler's filter result for one pod: the classes the cache yielded."""

    __slots__ = ("cluster", "demand", "groups", "shape")

    def __init__(self, cluster: ClusterModel, shape: PodShape, demand: Demand,
                 groups: list[tuple[NodeCapacity, list[NodeName]]]) -> None:
        self.cluster, self.shape, self.demand, self.groups = cluster, shape, demand, groups

    def all(self) -> list[NodeName]:
        # Class by class, as the cache yields them; the winner is chosen by score and a draw
        # over the sorted passed nodes, so sorting 10,000 names here would buy nothing.
        return [n for _, names in self.groups for n in names]

    def among(self, names: Sequence[NodeName]) -> list[NodeName]:
        return self.cluster.feasible_among(self.shape, self.demand, names)
