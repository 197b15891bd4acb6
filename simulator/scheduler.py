"""A model of kube-scheduler, alone ("default") or with Muster as its extender ("muster").

Per pod, one scheduling cycle, as kube-scheduler runs it:

1. the queue hands out the pod of highest priority, then earliest arrival;
2. filter plugins: resource fit (GPUs per device, shares of one device), nodeSelector, required
   node affinity, taints, cordons (:mod:`extender.core.constraints`), on the scheduler cache;
3. in Muster mode, the extender's filter (:func:`~extender.core.decisions.decide_filter`);
4. scores: NodeResourcesFit's default LeastAllocated (CPU and memory, 0..100) plus, in Muster
   mode, the extender's 0..10 x weight x 10 (:func:`~extender.core.decisions.decide_prioritize`);
   the best node wins, ties to the first name;
5. the pod is assumed on the node; in Muster mode the bind goes through
   :func:`~extender.core.decisions.decide_bind` and its barrier (held members wait, a barrier
   older than ``bind_timeout`` on the virtual clock fails them all); otherwise it binds.

A pod that fails goes to the unschedulable pool with a backoff (1 s doubling to 10 s); cluster
events (pods freed) move the pool back to the queue, and pods left there five minutes are
flushed back anyway, as kube-scheduler does.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from extender.core.capacity import Demand, NodeCapacity, demand_of, take
from extender.core.decisions import (
    BindOutcome,
    CoreSettings,
    FilterDecision,
    FilterOutcome,
    decide_bind,
    decide_filter,
    decide_prioritize,
    expired_barriers,
    withdraw,
)
from extender.core.ledger import Ledger
from extender.core.model import GangKey, NodeName, PodInfo
from extender.core.resources import CPU, MEMORY
from simulator.cluster import ClusterModel
from simulator.engine import EventQueue, Priority


class Mode(StrEnum):
    DEFAULT = "default"
    """kube-scheduler alone: pods bind one by one, gangs may be left partial."""
    MUSTER = "muster"
    """kube-scheduler with Muster's filter, prioritize and bind (the gang barrier)."""


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    mode: Mode = Mode.MUSTER
    core: CoreSettings = field(default_factory=CoreSettings)
    """Muster's settings (plan TTL, bind timeout, scoring policy)."""
    extender_weight: int = 10
    """The extender's weight in the scheduler configuration (manifests use 10)."""
    initial_backoff: float = 1.0
    max_backoff: float = 10.0
    unschedulable_timeout: float = 300.0
    """Pods left unschedulable this long go back to the queue without a cluster event."""

    def __post_init__(self) -> None:
        if not 0 < self.initial_backoff <= self.max_backoff:
            raise ValueError("backoff: need 0 < initial_backoff <= max_backoff")


@dataclass(frozen=True, slots=True)
class BackoffEnd:
    uid: str


@dataclass(frozen=True, slots=True)
class Flush:
    uid: str
    since: float


@dataclass(frozen=True, slots=True)
class BarrierCheck:
    gang: GangKey


SchedulerEvent = BackoffEnd | Flush | BarrierCheck


@dataclass(slots=True)
class _Waiting:
    since: float
    until: float
    """Backoff expiry."""


def least_allocated(free_after: NodeCapacity, empty: NodeCapacity) -> int:
    """kube-scheduler's default NodeResourcesFit score (LeastAllocated, CPU and memory)."""
    total, count = 0, 0
    for name in (CPU, MEMORY):
        capacity = empty.free.get(name, 0)
        if capacity > 0:
            total += max(free_after.free.get(name, 0), 0) * 100 // capacity
            count += 1
    return total // count if count else 0


class SchedulerModel:
    """Queue and cycle of one scheduler profile; owns Muster's ledger in Muster mode."""

    def __init__(
        self, cluster: ClusterModel, settings: SchedulerSettings, *,
        events: EventQueue[object], on_bound: Callable[[PodInfo, float], None],
    ) -> None:
        self.cluster = cluster
        self.settings = settings
        self.events = events
        self.on_bound = on_bound
        self.ledger = Ledger()
        self._active: list[tuple[int, float, int, str]] = []
        self._in_active: set[str] = set()
        self._seq = itertools.count()
        self._attempts: dict[str, int] = {}
        self._unschedulable: dict[str, _Waiting] = {}
        self._backing_off: set[str] = set()
        self._barrier_checks: set[tuple[GangKey, float]] = set()
        self._no_fit: dict[object, int] = {}
        """Memo: pod shape -> cache revision at which no node fit it."""
        self._waiting_memo: dict[tuple[object, ...], FilterDecision] = {}
        self.attempts = 0
        self.core_calls = 0

    # queue -----------------------------------------------------------------------------------
    def enqueue(self, uid: str) -> None:
        if uid in self._in_active or uid not in self.cluster.pods:
            return
        pod = self.cluster.pods[uid]
        heapq.heappush(self._active, (-pod.shape.priority, pod.created, next(self._seq), uid))
        self._in_active.add(uid)

    def pending(self) -> int:
        return len(self._in_active) + len(self._unschedulable) + len(self._backing_off)

    def forget_pod(self, uid: str) -> None:
        """The pod is gone (finished or deleted)."""
        self._unschedulable.pop(uid, None)
        self._backing_off.discard(uid)
        self._attempts.pop(uid, None)
        self.ledger.forget_pod(uid)

    def cluster_changed(self, now: float) -> None:
        """Capacity was freed: unschedulable pods go back to the queue (after their backoff)."""
        for uid in sorted(self._unschedulable, key=lambda u: self._unschedulable[u].since):
            waiting = self._unschedulable.pop(uid)
            if waiting.until <= now:
                self.enqueue(uid)
            else:
                self._backing_off.add(uid)
                self.events.schedule(waiting.until, BackoffEnd(uid), priority=Priority.RETRY)

    def handle(self, event: SchedulerEvent, now: float) -> None:
        if isinstance(event, BackoffEnd):
            if event.uid in self._backing_off:
                self._backing_off.discard(event.uid)
                self.enqueue(event.uid)
        elif isinstance(event, Flush):
            waiting = self._unschedulable.get(event.uid)
            if waiting is not None and waiting.since == event.since:
                del self._unschedulable[event.uid]
                self.enqueue(event.uid)
        else:
            self._barrier_expired(now)

    def run(self, now: float) -> None:
        """Schedule every pod in the queue once (new failures wait for their backoff)."""
        while self._active:
            *_, uid = heapq.heappop(self._active)
            self._in_active.discard(uid)
            if uid in self.cluster.pods and uid not in self.cluster.assumed and \
                    self.cluster.pods[uid].node_name is None:
                self._attempt(uid, now)

    def _fail(self, uid: str, now: float) -> None:
        n = self._attempts.get(uid, 0) + 1
        self._attempts[uid] = n
        backoff = min(self.settings.initial_backoff * 2 ** (n - 1), self.settings.max_backoff)
        self._unschedulable[uid] = _Waiting(since=now, until=now + backoff)
        self.events.schedule(now + self.settings.unschedulable_timeout, Flush(uid, now),
                             priority=Priority.RETRY)

    # one cycle -------------------------------------------------------------------------------
    def _attempt(self, uid: str, now: float) -> None:
        self.attempts += 1
        pod = self.cluster.pods[uid]
        demand = demand_of(pod.shape, gpu=self.cluster.gpu)
        revision = self.cluster.cache_revision
        if self._no_fit.get(pod.shape) == revision:
            self._fail(uid, now)
            return
        classes = list(self.cluster.feasible(pod.shape, demand))
        if not classes:
            self._no_fit[pod.shape] = revision
            self._fail(uid, now)
            return
        if self.settings.mode is Mode.DEFAULT:
            node = self._best_default(classes, demand)
            self.cluster.assume(uid, node)
            self._bind(uid, node, now)
            return
        # Class by class, as the cache yields them: the extender keeps this order, and the
        # winner is chosen by score then name, so sorting 10,000 names per pod buys nothing.
        candidates = [n for _, names in classes for n in names]
        decision = self._filter(pod, candidates, now)
        if not decision.passed:
            self._fail(uid, now)
            return
        node = self._best_muster(pod, decision.passed, demand, now)
        self.cluster.assume(uid, node)
        self._muster_bind(uid, node, now)

    def _best_default(self, classes: list[tuple[NodeCapacity, list[NodeName]]],
                      demand: Demand) -> NodeName:
        best: tuple[int, NodeName] | None = None
        for cap, names in classes:
            score = self._score(names[0], cap, demand)
            key = (-score, names[0])
            if best is None or key < (-best[0], best[1]):
                best = (score, names[0])
        assert best is not None
        return best[1]

    def _score(self, node: NodeName, cap: NodeCapacity, demand: Demand) -> int:
        return least_allocated(take(cap, demand, force=True), self.cluster.empty[node])

    def _filter(self, pod: PodInfo, candidates: list[NodeName], now: float) -> FilterDecision:
        snapshot = self.cluster.snapshot()
        member = snapshot.memberships.get(pod.uid)
        key: tuple[object, ...] | None = None
        if member is not None and member.gang is not None:
            # Members of one gang and role ask the same question of the same state.
            key = (member.gang, member.role, snapshot.revision, self.ledger.version, now)
            memo = self._waiting_memo.get(key)
            if memo is not None:
                return memo
        self.core_calls += 1
        decision = decide_filter(pod, candidates, snapshot=snapshot, ledger=self.ledger,
                                 now=now, settings=self.settings.core)
        if key is not None and decision.outcome in (FilterOutcome.WAITING,
                                                    FilterOutcome.REJECTED):
            if len(self._waiting_memo) > 4096:
                self._waiting_memo.clear()
            self._waiting_memo[key] = decision
        return decision

    def _best_muster(self, pod: PodInfo, passed: tuple[NodeName, ...], demand: Demand,
                     now: float) -> NodeName:
        snapshot = self.cluster.snapshot()
        self.core_calls += 1
        extender = decide_prioritize(pod, passed, snapshot=snapshot, ledger=self.ledger,
                                     now=now, settings=self.settings.core)
        weight = self.settings.extender_weight * 10
        ranked = sorted((-(self._score(n, self.cluster.cache[n], demand) + s * weight), n)
                        for n, s in extender)
        return ranked[0][1]

    def _bind(self, uid: str, node: NodeName, now: float) -> None:
        pod = self.cluster.bind(uid, node)
        self._attempts.pop(uid, None)
        self.on_bound(pod, now)

    def _muster_bind(self, uid: str, node: NodeName, now: float) -> None:
        self.core_calls += 1
        decision = decide_bind(uid, node, snapshot=self.cluster.snapshot(), ledger=self.ledger,
                               now=now, settings=self.settings.core)
        if decision.outcome is BindOutcome.BIND:
            for member, where in decision.release:
                if member in self.cluster.assumed:
                    self._bind(member, where, now)
                    self.ledger.confirm_bound(member, where)
        elif decision.outcome is BindOutcome.WAIT:
            started = self.ledger.barrier_started(decision.gang) if decision.gang else None
            if decision.gang is not None and started is not None and \
                    (decision.gang, started) not in self._barrier_checks:
                self._barrier_checks.add((decision.gang, started))
                self.events.schedule(started + self.settings.core.bind_timeout,
                                     BarrierCheck(decision.gang), priority=Priority.RETRY)
        else:
            self._reject([(uid, node), *decision.rejected], now)

    def _reject(self, pairs: list[tuple[str, NodeName]], now: float) -> None:
        for member, _ in sorted(set(pairs)):
            if member in self.cluster.assumed:
                self.cluster.forget(member)
                self._fail(member, now)
        self.cluster_changed(now)

    def _barrier_expired(self, now: float) -> None:
        for gang in expired_barriers(ledger=self.ledger, now=now, settings=self.settings.core):
            self.core_calls += 1
            decision = withdraw(gang, ledger=self.ledger)
            self._reject(list(decision.rejected), now)
