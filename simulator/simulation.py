"""One replay: workloads arrive, controllers create pods, the scheduler model places them,
pods run for their run time and free their capacity; metrics are taken throughout.

A gang's members start working when its minimum is bound (a distributed job waits for its
peers): from then its run time counts, and then all its pods finish together. Members bound
while the gang is below its minimum hold their GPUs idle; that is the waste partial gangs
cause. Pods outside gangs run from their own bind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from extender.core.model.values import GangKey, Membership, NodeInfo, PodInfo, WorkloadTree
from extender.core.workloads.descriptor import GangPolicy
from simulator.cluster import ClusterModel
from simulator.controllers import Unit, create_pods, first_units, per_replica
from simulator.engine import EventQueue, Priority
from simulator.metrics import Metrics, Report
from simulator.preferences import Preferred, preferred_affinity
from simulator.scheduler import (
    BackoffEnd,
    Flush,
    Look,
    Mode,
    PollHeld,
    SchedulerModel,
    SchedulerSettings,
    Tick,
)


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """A workload of the input: its resolved tree, when it arrives and how long it runs."""

    tree: WorkloadTree
    policy: GangPolicy
    arrival: float = 0.0
    runtime: float | None = None
    """Seconds from start to completion; ``None`` runs forever."""
    pods: tuple[tuple[PodInfo, Membership | None], ...] = ()
    """Pods it already has (a recorded cluster); the controller creates the rest."""


@dataclass(frozen=True, slots=True)
class Scenario:
    """Everything a replay needs: the cluster and the workloads, all resolved."""

    nodes: tuple[NodeInfo, ...]
    workloads: tuple[WorkloadSpec, ...]
    loose_pods: tuple[PodInfo, ...] = ()
    """Pods of no described workload (scheduled one by one, never finish)."""
    name: str = "scenario"
    loose_arrivals: Mapping[str, float] = field(default_factory=dict)
    """Pod UID -> when a loose pod appears (seconds; absent: at 0)."""
    preferred: Mapping[str, Preferred] = field(default_factory=dict)
    """Pod UID -> preferred node affinity of the pods the input holds (created pods take
    their role template's)."""
    domain_label: str | None = None
    """A node label whose domains (racks) the report counts gangs within."""


@dataclass(frozen=True, slots=True)
class Arrive:
    workload: int


@dataclass(frozen=True, slots=True)
class ArrivePod:
    index: int
    """Into :attr:`Scenario.loose_pods`."""


@dataclass(frozen=True, slots=True)
class FinishGang:
    gang: GangKey


@dataclass(frozen=True, slots=True)
class FinishPod:
    uid: str


@dataclass
class Result:
    report: Report
    utilization: list[tuple[float, float]]
    waits: list[float]
    stats: dict[str, int] = field(default_factory=dict)


class Simulation:
    def __init__(self, scenario: Scenario, settings: SchedulerSettings) -> None:
        self.scenario = scenario
        self.settings = settings
        self.events: EventQueue[object] = EventQueue()
        self.cluster = ClusterModel(scenario.nodes, gpu=settings.core.gpu_resource)
        self.metrics = Metrics(total_gpu_milli=self.cluster.total_gpu_milli)
        self._nodes = {n.name: n for n in scenario.nodes}
        self.scheduler = SchedulerModel(self.cluster, settings, events=self.events,
                                        on_bound=self._bound)
        self._runtime: dict[str, float | None] = {}
        """Workload key -> run time."""
        self._started: set[GangKey] = set()
        self._gang_pods: dict[GangKey, set[str]] = {}
        self._workload_of_pod: dict[str, str] = {}
        self._live_pods: dict[str, int] = {}
        """Workload key -> pods not yet finished."""
        self._progress = 0
        """Arrivals and finishes still to come; once none are left the replay winds down."""
        self.last_progress = 0.0
        self._arrivals_pending = 0
        self._preferred: dict[tuple[str, str], Preferred] = {}
        self._later: dict[str, tuple[WorkloadTree, GangPolicy, set[Unit]]] = {}
        """Workload key -> the copies of roles its operator creates later, not yet created."""
        self._unit_counts: dict[str, dict[tuple[str, str, int], int]] = {}
        """Workload key -> ("bound" | "finished", role, replica) -> pods, while it has
        copies still to create."""
        """(workload, role) -> its template's preferred node affinity."""

    # driving ---------------------------------------------------------------------------------
    def run(self, *, horizon: float | None = None,
            progress: Callable[[int, int], None] | None = None) -> Result:
        for i, spec in enumerate(self.scenario.workloads):
            self._schedule(spec.arrival, Arrive(i), Priority.ARRIVE)
        for i, pod in enumerate(self.scenario.loose_pods):
            arrival = self.scenario.loose_arrivals.get(pod.uid, 0.0)
            if arrival > 0:
                self._schedule(arrival, ArrivePod(i), Priority.ARRIVE)
            else:
                self._add_loose(pod, 0.0)
        settle = 2 * (self.settings.core.plan_ttl + self.settings.core.bind_timeout
                      + self.settings.max_backoff)
        total = len(self.scenario.workloads)
        while self.events:
            when = self.events.peek_time()
            assert when is not None
            if horizon is not None and when > horizon:
                break
            if self._progress == 0 and when > self.last_progress + settle:
                break  # only retries are left and they have had their chance
            for item in list(self.events.pop_due()):
                self._handle(item.event, item.time)
            now = self.events.now
            self.scheduler.look(now)
            self.scheduler.run(now)
            self.metrics.end_round(now, used_gpu_milli=self.cluster.used_gpu_milli)
            if progress is not None:
                progress(total - self._arrivals_pending, total)
        if self.events.now == 0.0:
            self.scheduler.look(0.0)
            self.scheduler.run(0.0)
            self.metrics.end_round(0.0, used_gpu_milli=self.cluster.used_gpu_milli)
        end = self.last_progress if horizon is None else min(horizon, self.events.now)
        report = self.metrics.report(self.settings.mode.value, end=end,
                                     domains=self.scenario.domain_label is not None)
        return Result(report=report, utilization=self.metrics.utilization,
                      waits=self.metrics.waits(),
                      stats=self.scheduler.stats())

    def _schedule(self, time: float, event: object, priority: Priority) -> None:
        self._progress += 1
        if isinstance(event, Arrive):
            self._arrivals_pending += 1
        self.events.schedule(time, event, priority=priority)

    def _handle(self, event: object, now: float) -> None:
        if isinstance(event, BackoffEnd | Flush | PollHeld | Tick | Look):
            self.scheduler.handle(event, now)
            return
        self._progress -= 1
        self.last_progress = now
        if isinstance(event, Arrive):
            self._arrivals_pending -= 1
            self._arrive(self.scenario.workloads[event.workload], now)
        elif isinstance(event, ArrivePod):
            self._add_loose(self.scenario.loose_pods[event.index], now)
        elif isinstance(event, FinishGang):
            self._finish_gang(event.gang, now)
        elif isinstance(event, FinishPod):
            self._finish_pods([event.uid], now)

    # workloads -------------------------------------------------------------------------------
    def _add_loose(self, pod: PodInfo, now: float) -> None:
        self.cluster.add_pod(pod, None, preferred=self.scenario.preferred.get(pod.uid, ()))
        self.metrics.pods_created += 1
        if pod.node_name is None:
            self.scheduler.enqueue(pod.uid, now)

    def _preferred_of(self, tree: WorkloadTree, role: str) -> Preferred:
        key = (tree.ref.key, role)
        found = self._preferred.get(key)
        if found is None:
            template = next((r.template for r in tree.roles if r.name == role), {})
            spec = template.get("spec")
            found = preferred_affinity(spec if isinstance(spec, Mapping) else None)
            self._preferred[key] = found
        return found

    def _arrive(self, spec: WorkloadSpec, now: float) -> None:
        tree = spec.tree
        if any(g.created == 0.0 for g in tree.gangs):
            # No creationTimestamp (a synthetic day, a hand-written snapshot): the workload is
            # created when it arrives, and its gangs are as old as that. Muster orders gangs
            # of one priority by age (ungating looks, the deadlock graph); without this they
            # would all tie at 0 and go by name.
            tree = replace(tree, gangs=tuple(g if g.created else replace(g, created=now)
                                             for g in tree.gangs))
        key = tree.ref.key
        self.cluster.add_workload(tree)
        self._runtime[key] = spec.runtime
        for gang in tree.gangs:
            self.metrics.gang_arrived(gang.key, minimum=gang.min_member, now=now)
            self._gang_pods.setdefault(gang.key, set())
        existing: dict[str, int] = {}
        for _pod, member in spec.pods:
            if member is not None:
                existing[member.role] = existing.get(member.role, 0) + 1
        # Staged creation: a role that waits for others (createdAfter) is created once they
        # are Ready (here: bound) or Complete, as its operator creates it; one a recorded
        # cluster already holds pods of was created already.
        units = first_units(tree) | {(r.name, i) for r in tree.roles if existing.get(r.name)
                                     for i in range(r.replicas)}
        later = {(r.name, i) for r in tree.roles for i in range(r.replicas)} - units
        if later:
            self._later[key] = (tree, spec.policy, later)
        made = create_pods(tree, policy=spec.policy, now=now, existing=existing, units=units)
        self._add_pods(tree, [*spec.pods, *made], now, recorded={pod.uid for pod, _ in spec.pods})
        if not self._live_pods.get(key) and key not in self._later:
            self._complete(key)

    def _add_pods(self, tree: WorkloadTree, pods: Sequence[tuple[PodInfo, Membership | None]],
                  now: float, *, recorded: set[str] | frozenset[str] = frozenset()) -> None:
        key = tree.ref.key
        for pod, member in pods:
            if pod.uid in recorded:
                preferred = self.scenario.preferred.get(pod.uid, ())
            else:
                preferred = () if member is None else self._preferred_of(tree, member.role)
            self.cluster.add_pod(pod, member, preferred=preferred)
            self.metrics.pods_created += 1
            self._workload_of_pod[pod.uid] = key
            self._live_pods[key] = self._live_pods.get(key, 0) + 1
            if member is not None and member.gang is not None:
                self._gang_pods.setdefault(member.gang, set()).add(pod.uid)
            if pod.node_name is not None and pod.holds_resources:
                self._bound(pod, now)
            elif pod.node_name is None:
                if pod.uid not in recorded:  # created now: admission may gate it
                    self.scheduler.gate_new(pod.uid)
                self.scheduler.enqueue(pod.uid, now)

    def _create_later(self, key: str, now: float) -> None:
        """Create the copies of later stages whose dependencies are now Ready or Complete."""
        entry = self._later.get(key)
        if entry is None:
            return
        tree, policy, waiting = entry
        counts = self._unit_counts.get(key, {})
        ready: set[Unit] = set()
        for name, replica in sorted(waiting):
            role = next(r for r in tree.roles if r.name == name)
            same = per_replica(tree, role, policy)
            if all(self._reached(tree, counts, before, status, replica if same else None)
                   for before, status in role.created_after):
                ready.add((name, replica))
        if not ready:
            return
        waiting -= ready
        if not waiting:
            del self._later[key]
        made = self._follow_leaders(tree, create_pods(tree, policy=policy, now=now, units=ready))
        self._add_pods(tree, made, now)

    def _follow_leaders(self, tree: WorkloadTree, made: list[tuple[PodInfo, Membership]],
                        ) -> list[tuple[PodInfo, Membership]]:
        """Followers pinned to their leader's domain by a nodeSelector, as JobSet's pod
        webhook pins them under ``exclusive-topology`` (the follower of a leader on a node
        without the label is created without one)."""
        out = []
        for pod, member in made:
            role = next((r for r in tree.roles if r.name == member.role), None)
            gang = next((g for g in tree.gangs if g.key == member.gang), None)
            if role is None or not role.follows or gang is None or gang.subgroups is None:
                out.append((pod, member))
                continue
            key = gang.subgroups.key
            domain = None
            for uid in sorted(self._gang_pods.get(gang.key, ())):
                lead = self.cluster.memberships.get(uid)
                bound = self.cluster.pods.get(uid)
                if (lead is not None and bound is not None and bound.node_name is not None
                        and lead.role == role.follows and lead.replica == member.replica):
                    info = self._nodes.get(bound.node_name)
                    domain = None if info is None else info.label(key)
                    break
            if domain is None:
                out.append((pod, member))
                continue
            selector = tuple(sorted({*pod.shape.node_selector, (key, domain)}))
            out.append((replace(pod, shape=replace(pod.shape, node_selector=selector)), member))
        return out

    @staticmethod
    def _reached(tree: WorkloadTree, counts: Mapping[tuple[str, str, int], int], role: str,
                 status: str, replica: int | None) -> bool:
        """Whether ``role`` (one copy, or all of them) is Ready (bound, in the replay) or
        Complete (finished)."""
        found = next((r for r in tree.roles if r.name == role), None)
        if found is None:
            return True
        kind = "finished" if status == "Complete" else "bound"
        if replica is not None:
            return counts.get((kind, role, replica), 0) >= found.pods_per_replica
        return sum(counts.get((kind, role, i), 0) for i in range(found.replicas)) >= found.pods

    def _count(self, uid: str, kind: str) -> str | None:
        """Count a pod of a workload with later stages as bound or finished; its key."""
        member = self.cluster.memberships.get(uid)
        key = self._workload_of_pod.get(uid)
        if member is None or key is None or key not in self._later:
            return None
        counts = self._unit_counts.setdefault(key, {})
        unit = (kind, member.role, member.replica or 0)
        counts[unit] = counts.get(unit, 0) + 1
        return key

    def _bound(self, pod: PodInfo, now: float) -> None:
        later = self._count(pod.uid, "bound")
        if later is not None:
            self._create_later(later, now)
        member = self.cluster.memberships.get(pod.uid)
        gang = None if member is None else member.gang
        node = pod.node_name
        label = self.scenario.domain_label
        info = None if node is None or label is None else self._nodes.get(node)
        self.metrics.pod_bound(gang, self.cluster.demand(pod.shape).gpu_milli, now=now,
                               domain=None if info is None or label is None else
                               info.label(label))
        if node is not None and self.cluster.oversubscribed(node):
            self.metrics.oversubscribed.add(node)
        self.last_progress = max(self.last_progress, now)
        runtime = self._runtime.get(self._workload_of_pod.get(pod.uid, ""))
        if gang is None:
            if runtime is not None:
                self._schedule(now + runtime, FinishPod(pod.uid), Priority.FREE)
            return
        if gang in self._started:
            return
        state = self.metrics.gangs[gang]
        if state.bound >= state.minimum:
            self._started.add(gang)
            if runtime is not None:
                self._schedule(now + runtime, FinishGang(gang), Priority.FREE)

    def _finish_gang(self, gang: GangKey, now: float) -> None:
        uids = sorted(self._gang_pods.pop(gang, set()))
        self._finish_pods(uids, now)

    def _finish_pods(self, uids: Sequence[str], now: float) -> None:
        members = {uid: self.cluster.memberships.get(uid) for uid in uids}
        staged = {k for k in (self._count(uid, "finished") for uid in uids) if k is not None}
        for key in sorted(staged):
            self._create_later(key, now)
        for uid in uids:
            self.scheduler.forget_pod(uid)
        for uid, pod in self.cluster.remove_pods(uids).items():
            member = members[uid]
            if pod.node_name is not None:
                self.metrics.pod_freed(None if member is None else member.gang,
                                       self.cluster.demand(pod.shape).gpu_milli)
            key = self._workload_of_pod.pop(uid, "")
            if key in self._live_pods:
                self._live_pods[key] -= 1
                if self._live_pods[key] == 0 and key not in self._later:
                    self._complete(key)
        self.scheduler.cluster_changed(now)

    def _complete(self, key: str) -> None:
        self._live_pods.pop(key, None)
        self.cluster.remove_workload(key)


def simulate(scenario: Scenario, mode: Mode | str, *,
             settings: SchedulerSettings | None = None, horizon: float | None = None,
             progress: Callable[[int, int], None] | None = None) -> Result:
    """Replay ``scenario`` under one scheduler (``default`` or ``muster``)."""
    chosen = replace(settings or SchedulerSettings(), mode=Mode(mode))
    return Simulation(scenario, chosen).run(horizon=horizon, progress=progress)
