"""A model of kube-scheduler, alone ("default") or with Muster as its extender ("muster").

Per pod, one scheduling cycle, as kube-scheduler runs it:

1. the queue hands out the pod of highest priority, then earliest queue time (when it was
   created, or when its last attempt failed: kube-scheduler refreshes the timestamp of a pod
   it puts back), then the order pods were queued in;
2. filter plugins: resource fit (GPUs per device, shares of one device), nodeSelector, required
   node affinity, taints, cordons (:mod:`extender.core.gang.constraints`), on the scheduler cache;
3. in Muster mode, the extender's filter (:mod:`simulator.extender_model`);
4. scores: kube-scheduler's default plugins (:mod:`simulator.kube_scoring`: LeastAllocated,
   BalancedAllocation, TaintToleration, preferred NodeAffinity, with the default weights)
   plus, in Muster mode, the extender's 0..10 x weight x 10; a node drawn uniformly among the
   best, with the replay's seeded generator;
5. the pod is assumed on the node; in Muster mode the bind goes through Muster's session
   (:class:`~extender.core.decide.session.GangSession`, the server's own): a held request is polled
   at its deadline on the virtual clock, the session's effects (a held request released or
   failed, a parked member to bind, pods to requeue) are carried out as the server carries
   them out, and the session is ticked whenever something falls due, as the server's
   housekeeper ticks it every second; otherwise it binds.

In ``muster+gates`` mode a new gang member waits behind Muster's gate instead of entering the
queue. After each instant's events, before the queue runs, Muster takes an ungating look, as
its housekeeper does after changes: a gang planned whole has its members' gates lifted
together, and they enter the queue; one that does not fit stays gated, costing the queue
nothing. A look also falls due when the session asks (:meth:`MusterExtender.gates_due`).

A pod that fails goes to the unschedulable pool with a backoff (1 s doubling to 10 s); cluster
events (pods freed) move the pool back to the queue (pods still backing off wait for its end),
and every 30 s pods left there five minutes are moved back anyway, as kube-scheduler does.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable, Sequence

from extender.core.decide.effects import BindStep, Effect, Step, Ungate, dispatch
from extender.core.gang.ledger import Ledger
from extender.core.gang.nodecapacity import Demand, NodeCapacity
from extender.core.model.values import NodeName, PodInfo
from simulator.cluster import ClusterModel
from simulator.engine import EventQueue, Priority
from simulator.extender_model import MusterExtender
from simulator.kube_scoring import Candidate, candidate, pick, totals
from simulator.preferences import Preferred, per_node
from simulator.replay_effects import ReplayEffects
from simulator.scheduler_values import (
    BackoffEnd,
    Counters,
    FeasibleNodes,
    Flush,
    Look,
    Mode,
    PollHeld,
    SchedulerEvent,
    SchedulerSettings,
    Tick,
    Waiting,
)

__all__ = [
    "BackoffEnd",
    "Counters",
    "Flush",
    "Look",
    "Mode",
    "PollHeld",
    "SchedulerEvent",
    "SchedulerModel",
    "SchedulerSettings",
    "Tick",
]


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
        self.extender = MusterExtender(cluster, settings.core, exhaustive=settings.exhaustive)
        self.counters = Counters()
        self._rng = random.Random(settings.seed)
        self._active: list[tuple[int, float, int, str]] = []
        self._in_active: set[str] = set()
        self._seq = itertools.count()
        self._queued_at: dict[str, float] = {}
        """Pod -> its queue timestamp: when it was first queued or its last attempt failed."""
        self._attempts: dict[str, int] = {}
        self._unschedulable: dict[str, Waiting] = {}
        self._backing_off: set[str] = set()
        self._holds: dict[int, tuple[str, NodeName]] = {}
        """Ticket -> (pod, node) of each bind request held at Muster's barrier."""
        self._ticks: set[float] = set()
        """Times a :class:`Tick` is scheduled for."""
        self._looks: set[float] = set()
        """Times a :class:`Look` is scheduled for."""
        self._flush_due = False
        self._no_fit: dict[object, int] = {}
        """Memo: pod shape -> cache revision at which no node fit it."""

    @property
    def ledger(self) -> Ledger:
        return self.extender.ledger

    def stats(self) -> dict[str, int]:
        c = self.counters
        return {"attempts": c.attempts, "failed": c.failed, "held": c.held,
                "withdrawn": c.withdrawn, "rejected_binds": c.rejected_binds,
                "gated": c.gated, "ungated": c.ungated,
                "core_calls": self.extender.core_calls,
                "answered_by_bound": self.extender.answered_by_bound}

    # queue -----------------------------------------------------------------------------------
    def enqueue(self, uid: str, now: float) -> None:
        if uid in self._in_active or uid not in self.cluster.pods:
            return
        if self._waits_at_gate(uid):
            return
        pod = self.cluster.pods[uid]
        queued = self._queued_at.setdefault(uid, now)
        heapq.heappush(self._active, (-pod.shape.priority, queued, next(self._seq), uid))
        self._in_active.add(uid)

    def queued(self) -> list[str]:
        """The pods in the active queue, in the order the next cycles take them."""
        return [uid for *_, uid in sorted(self._active)]

    def pending(self) -> int:
        return (len(self._in_active) + len(self._unschedulable) + len(self._backing_off)
                + len(self.cluster.gated))

    def gate_new(self, uid: str) -> None:
        """A pod the replay creates is admitted: in ``muster+gates`` mode a gang member gets
        Muster's gate, as the admission policy (or webhook) adds it at creation."""
        member = self.cluster.memberships.get(uid)
        if self.settings.mode is not Mode.GATED or member is None or member.gang is None:
            return
        pod = self.cluster.pods[uid]
        if self.settings.core.gate not in pod.gates:
            self.cluster.set_gates(uid, (*pod.gates, self.settings.core.gate))
            self.counters.gated += 1

    def _waits_at_gate(self, uid: str) -> bool:
        """Whether the pod is kept out of the queue by Muster's gate (``muster+gates`` only:
        the other modes do not model ungating, and queue a recorded gated pod as before)."""
        return (self.settings.mode is Mode.GATED
                and self.settings.core.gate in self.cluster.pods[uid].gates)

    def look(self, now: float) -> None:
        """Muster's ungating look (``muster+gates``): lift the gates of the gangs it planned
        whole, and queue their members."""
        self._looks.discard(now)
        if self.settings.mode is not Mode.GATED or not self.cluster.gated:
            return
        effects = self.extender.ungate(now)
        # Gates lift first, so the ungated members queue ahead of any pod the look's other
        # effects requeue or fail back.
        self._effects([e for e in effects if isinstance(e, Ungate)], now)
        self._effects([e for e in effects if not isinstance(e, Ungate)], now)
        due = self.extender.gates_due()  # inf: nothing falls due; never before the next instant
        if self.cluster.gated and now < due < float("inf") and due not in self._looks:
            self._looks.add(due)
            self.events.schedule(due, Look(), priority=Priority.RETRY)
        self._schedule_tick(now)

    def forget_pod(self, uid: str) -> None:
        """The pod is gone (finished or deleted)."""
        self._unschedulable.pop(uid, None)
        self._backing_off.discard(uid)
        self._attempts.pop(uid, None)
        self._queued_at.pop(uid, None)

    def cluster_changed(self, now: float) -> None:
        """Capacity was freed: unschedulable pods go back to the queue (after their backoff)."""
        self._move(list(self._unschedulable), now)

    def _move(self, uids: list[str], now: float) -> None:
        for uid in sorted(uids, key=lambda u: (self._unschedulable[u].since, u)):
            waiting = self._unschedulable.pop(uid)
            if waiting.until <= now:
                self.enqueue(uid, now)
            else:
                self._backing_off.add(uid)
                self.events.schedule(waiting.until, BackoffEnd(uid), priority=Priority.RETRY)

    def _flush(self, now: float) -> None:
        self._flush_due = False
        timeout = self.settings.unschedulable_timeout
        self._move([u for u, w in self._unschedulable.items() if w.since + timeout <= now], now)
        self._schedule_flush(now)

    def _schedule_flush(self, now: float) -> None:
        if self._unschedulable and not self._flush_due:
            self._flush_due = True
            interval = self.settings.flush_interval
            self.events.schedule((now // interval + 1) * interval, Flush(),
                                 priority=Priority.RETRY)

    def handle(self, event: SchedulerEvent, now: float) -> None:
        if isinstance(event, BackoffEnd):
            if event.uid in self._backing_off:
                self._backing_off.discard(event.uid)
                self.enqueue(event.uid, now)
        elif isinstance(event, Flush):
            self._flush(now)
        elif isinstance(event, PollHeld):
            self._poll(event.ticket, now)
        elif isinstance(event, Look):
            self.look(now)
        else:
            self._ticks.discard(now)
            due = self.extender.next_due()
            if due is not None and due <= now:  # not a tick for something since settled
                self._effects(self.extender.tick(now), now)
            self._schedule_tick(now)

    def run(self, now: float) -> None:
        """Schedule every pod in the queue once (new failures wait for their backoff)."""
        while self._active:
            *_, uid = heapq.heappop(self._active)
            self._in_active.discard(uid)
            if uid in self.cluster.pods and uid not in self.cluster.assumed and \
                    self.cluster.pods[uid].node_name is None:
                self._attempt(uid, now)

    def _fail(self, uid: str, now: float) -> None:
        self.counters.failed += 1
        n = self._attempts.get(uid, 0) + 1
        self._attempts[uid] = n
        self._queued_at[uid] = now
        # Doubling stops at the cap (and before 2**n overflows a float, after 1,000 tries).
        backoff = min(self.settings.initial_backoff * 2.0 ** min(n - 1, 64),
                      self.settings.max_backoff)
        self._unschedulable[uid] = Waiting(since=now, until=now + backoff)
        self._schedule_flush(now)

    # one cycle -------------------------------------------------------------------------------
    def _attempt(self, uid: str, now: float) -> None:
        self.counters.attempts += 1
        pod = self.cluster.pods[uid]
        demand = self.cluster.demand(pod.shape)
        revision = self.cluster.cache_revision
        if self._no_fit.get(pod.shape) == revision:
            self._fail(uid, now)
            return
        groups = list(self.cluster.feasible(pod.shape, demand))
        if not groups:
            self._no_fit[pod.shape] = revision
            self._fail(uid, now)
            return
        if self.settings.mode is Mode.DEFAULT:
            node = self._best_default(pod, groups, demand)
            self.cluster.assume(uid, node)
            self._bind(uid, node, now)
            return
        passed, effects = self.extender.filter(
            pod, FeasibleNodes(self.cluster, pod.shape, demand, groups), now)
        self._effects(effects, now)
        if not passed:
            self._fail(uid, now)
            return
        node = self._best_muster(pod, passed, demand, now)
        self.cluster.assume(uid, node)
        self._muster_bind(uid, node, now)

    def _best_default(self, pod: PodInfo, groups: list[tuple[NodeCapacity, list[NodeName]]],
                      demand: Demand) -> NodeName:
        """Score classes of alike nodes, not nodes: members of a class score the same."""
        preferred = self.cluster.preferred.get(pod.uid, ())
        split = bool(preferred) and per_node(preferred, self.cluster.personal)
        candidates: list[Candidate] = []
        members: list[Sequence[NodeName]] = []
        for cap, names in groups:
            first = names[0]
            if split:
                for name in names:
                    candidates.append(candidate(cap, self.cluster.empty[name], demand,
                                                self.cluster.nodes[name]))
                    members.append((name,))
            else:
                candidates.append(candidate(cap, self.cluster.empty[first], demand,
                                            self.cluster.kind_node(first), size=len(names)))
                members.append(names)
        return self._pick(pod, demand, preferred, candidates, members, extender_weight=0)

    def _best_muster(self, pod: PodInfo, passed: Sequence[NodeName], demand: Demand,
                     now: float) -> NodeName:
        extender = self.extender.prioritize(pod, passed, now)
        ordered = sorted(passed)
        candidates = [candidate(self.cluster.cache[n], self.cluster.empty[n], demand,
                                self.cluster.nodes[n], extender=extender.get(n, 0))
                      for n in ordered]
        return self._pick(pod, demand, self.cluster.preferred.get(pod.uid, ()), candidates,
                          [(n,) for n in ordered], extender_weight=self.settings.extender_weight)

    def _pick(self, pod: PodInfo, demand: Demand, preferred: Preferred,
              candidates: list[Candidate], members: list[Sequence[NodeName]], *,
              extender_weight: int) -> NodeName:
        scores = totals(pod.shape, demand, preferred, candidates, weights=self.settings.weights,
                        extender_weight=extender_weight)
        i, j = pick(scores, [c.size for c in candidates], self._rng)
        return members[i][j]

    def _bind(self, uid: str, node: NodeName, now: float) -> None:
        pod = self.cluster.bind(uid, node)
        self._attempts.pop(uid, None)
        self._queued_at.pop(uid, None)
        self.on_bound(pod, now)

    def _muster_bind(self, uid: str, node: NodeName, now: float) -> None:
        step = self.extender.bind(self.cluster.pods[uid], node, now)
        self._effects(step.effects, now)
        if step.step is Step.HOLD:
            self.counters.held += 1
            self._holds[step.ticket] = (uid, node)
            self.events.schedule(step.deadline, PollHeld(step.ticket), priority=Priority.RETRY)
        else:
            self._answered(step, uid, node, now)
        self._schedule_tick(now)

    def _answered(self, step: BindStep, uid: str, node: NodeName, now: float) -> None:
        """A bind request got its answer: post the Binding, or fail the pod back to the queue."""
        if step.step is Step.BIND:
            if uid in self.cluster.assumed:
                self._bind(uid, node, now)
                self.extender.bound(uid, NodeName(node))
        else:
            self._reject([(uid, node)], now)

    def _poll(self, ticket: int, now: float) -> None:
        hold = self._holds.get(ticket)
        if hold is None:
            return  # answered already (woken by an effect)
        step = self.extender.poll(ticket, now)
        if step.step is Step.HOLD:
            self._effects(step.effects, now)
            self.events.schedule(step.deadline, PollHeld(ticket), priority=Priority.RETRY)
            return
        del self._holds[ticket]  # first: its own effects may name it (a gang failed whole)
        self._effects(step.effects, now)
        self._answered(step, *hold, now)
        self._schedule_tick(now)

    def _effects(self, effects: Sequence[Effect], now: float) -> None:
        """Carry out the session's effects as the server does (:class:`ReplayEffects`): a
        woken held request polls at once, a parked member is bound by Muster, requeued pods
        go back to the queue, ungated pods enter it."""
        dispatch(effects, ReplayEffects(self, now))

    def _bind_parked(self, uid: str, node: NodeName, now: float) -> None:
        pod = self.cluster.pods.get(uid)
        if pod is None or pod.node_name is not None:
            return
        if uid in self.cluster.assumed:  # a retry is in its binding cycle: it binds itself
            return
        try:
            self.cluster.assume(uid, node)
        except ValueError:
            self.extender.bind_failed(uid)
            return
        self._unschedulable.pop(uid, None)
        self._backing_off.discard(uid)
        self._bind(uid, node, now)
        self.extender.bound(uid, node)

    def _schedule_tick(self, now: float) -> None:
        due = self.extender.next_due()
        if due is None:
            return
        due = max(due, now)
        if due not in self._ticks:
            self._ticks.add(due)
            self.events.schedule(due, Tick(), priority=Priority.RETRY)

    def restart_muster(self, now: float) -> None:
        """Muster restarts: its held requests fail (their connections drop) and a new session
        rebuilds its state from the cluster at its first request."""
        held = sorted(self._holds.values())
        self._holds.clear()
        self.extender.restart()
        self._reject(held, now)

    def _reject(self, pairs: list[tuple[str, NodeName]], now: float) -> None:
        for member, _ in sorted(set(pairs)):
            if member in self.cluster.assumed:
                self.counters.rejected_binds += 1
                self.cluster.forget(member)
                self._fail(member, now)
        self.cluster_changed(now)
