"""When will each waiting gang start: the snapshot replay run forward from ``now``.

A forecast replays a snapshot (what ``muster record`` reads) through the same ``GangSession``
the extender runs, from a virtual 0 that stands for ``now``: every running workload ends at its
expected end (:mod:`simulator.forecast_runtimes`), every waiting workload arrives at 0 in
kube-scheduler's order (priority, then age) and then runs its own expected runtime.

Unknown runtimes are never guessed. The replay first runs with every workload whose runtime is
unknown running forever: a gang that starts there starts by then whatever they do, so that
start is the answer (an upper bound when ending those workloads at once starts it sooner). A
gang that does not start there waits on some of them; a second replay ends them all at once,
and the unknown workloads whose end freed the capacity the gang starts on there are named.
A gang that starts in neither waits on something no runtime frees (pods outside workloads, a
cluster too small).

What a gang *waits for* is the workloads whose end freed capacity on the nodes it starts on,
capacity nothing else took between their end and its start.

Pure: time is the ``now`` parameter; nothing is read or written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from extender.core.model.values import GangKey, PodInfo
from extender.core.workloads.catalog import Catalog
from extender.core.workloads.expressions import WorkloadError
from extender.core.workloads.workload import workload_ref
from simulator.forecast_runtimes import (
    DurationParser,
    Runtime,
    RuntimeSource,
    pods_started_at,
    remaining_runtime,
    started_at,
)
from simulator.scheduler_values import Mode, SchedulerSettings
from simulator.simulation import Scenario, Simulation, WorkloadSpec
from simulator.snapshot_replay import scenario_from_objects


class Outlook(StrEnum):
    STARTS = "starts"
    """It starts in the replay: :attr:`GangForecast.start` seconds from now."""
    UNKNOWN = "unknown"
    """Its start rests on workloads whose runtime is unknown (:attr:`GangForecast.unknown`)."""
    NEVER = "never"
    """No workload's end lets it start: it waits on pods outside workloads, or does not fit."""


@dataclass(frozen=True, slots=True)
class GangForecast:
    gang: GangKey
    workload: str
    """``KIND/NAMESPACE/NAME``."""
    outlook: Outlook
    start: float | None = None
    """Seconds from now (``STARTS`` only)."""
    upper_bound: bool = False
    """Ending the workloads of unknown runtime at once would start it sooner: the start is
    the latest it may be."""
    waits_for: tuple[str, ...] = ()
    """Workloads whose end frees the capacity it starts on."""
    unknown: tuple[str, ...] = ()
    """``UNKNOWN``: the workloads of unknown runtime it waits on."""


@dataclass(frozen=True, slots=True)
class Forecast:
    gangs: tuple[GangForecast, ...]
    """Every gang waiting at ``now``, in kube-scheduler's order (priority, then age)."""
    runtimes: Mapping[str, Runtime] = field(default_factory=dict)
    """Workload key -> its remaining runtime as the replay used it."""


@dataclass(frozen=True, slots=True)
class _Bind:
    time: float
    node: str
    gang: GangKey | None
    workload: str


class _Watched(Simulation):
    """A replay that notes where and when pods bind and finish."""

    def __init__(self, scenario: Scenario, settings: SchedulerSettings) -> None:
        super().__init__(scenario, settings)
        self.binds: list[_Bind] = []
        self.finishes: list[tuple[float, str, str]] = []
        """(time, workload key, node) of each pod that ended on a node."""

    def _bound(self, pod: PodInfo, now: float) -> None:
        member = self.cluster.memberships.get(pod.uid)
        if pod.node_name is not None:
            self.binds.append(_Bind(now, pod.node_name, None if member is None else member.gang,
                                    self._workload_of_pod.get(pod.uid, "")))
        super()._bound(pod, now)

    def _finish_pods(self, uids: Sequence[str], now: float) -> None:
        for uid in uids:
            pod = self.cluster.pods.get(uid)
            if pod is not None and pod.node_name is not None:
                self.finishes.append((now, self._workload_of_pod.get(uid, ""), pod.node_name))
        super()._finish_pods(uids, now)

    def started(self, gang: GangKey) -> float | None:
        state = self.metrics.gangs.get(gang)
        return None if state is None else state.admitted_at

    def freed_for(self, gang: GangKey, workload: str, start: float) -> tuple[str, ...]:
        """Workloads whose end freed capacity on the nodes ``gang`` started on at ``start``,
        capacity no other pod bound to before then."""
        nodes = {b.node for b in self.binds if b.gang == gang and b.time <= start}
        ended = [(t, w, n) for t, w, n in self.finishes
                 if t <= start and n in nodes and w != workload]
        kept = {w for t, w, n in ended
                if not any(b.node == n and t <= b.time <= start and b.gang != gang
                           for b in self.binds)}
        if not kept and ended:
            last = max(t for t, _, _ in ended)
            kept = {w for t, w, _ in ended if t == last}
        return tuple(sorted(kept))

    def holding(self, at: float) -> set[str]:
        """Workloads with pods bound by ``at`` that had not ended by then."""
        ended = {w for t, w, _ in self.finishes if t <= at}
        return {b.workload for b in self.binds if b.time <= at} - ended


def _by_key(objects: Iterable[Mapping[str, Any]]) -> tuple[
        dict[str, Mapping[str, Any]], dict[str, Mapping[str, Any]]]:
    """Raw workload objects by workload key, raw pods by uid."""
    workloads: dict[str, Mapping[str, Any]] = {}
    pods: dict[str, Mapping[str, Any]] = {}
    for obj in objects:
        kind = obj.get("kind")
        meta = obj.get("metadata")
        if kind == "Pod" and isinstance(meta, Mapping):
            pods[str(meta.get("uid", ""))] = obj
        elif kind not in ("Node", None):
            try:
                workloads.setdefault(workload_ref(obj).key, obj)
            except WorkloadError:
                continue
    return workloads, pods


def _runtime(spec: WorkloadSpec, raw: Mapping[str, Any] | None,
             pods: Mapping[str, Mapping[str, Any]], *, now: float,
             parse_duration: DurationParser) -> Runtime:
    if raw is None:
        return Runtime(RuntimeSource.UNKNOWN, None, "no workload object")
    bound = [pods[p.uid] for p, _ in spec.pods if p.node_name is not None and p.uid in pods]
    began = pods_started_at(bound)
    if began is None and any(p.node_name is not None for p, _ in spec.pods):
        began = started_at(raw) or None
    return remaining_runtime(raw, pods_started=began, now=now, parse_duration=parse_duration)


def _waiting(spec: WorkloadSpec) -> list[GangKey]:
    bound: dict[GangKey, int] = {}
    for pod, member in spec.pods:
        if member is not None and member.gang is not None and pod.node_name is not None:
            bound[member.gang] = bound.get(member.gang, 0) + 1
    return [g.key for g in spec.tree.gangs if bound.get(g.key, 0) < g.min_member]


def _queue_order(spec: WorkloadSpec) -> tuple[int, float, str]:
    """kube-scheduler's order: highest priority first, then oldest."""
    gangs = spec.tree.gangs
    priority = max((g.priority for g in gangs), default=0)
    created = min((g.created for g in gangs), default=0.0)
    return (-priority, created, spec.tree.ref.key)


_SAME = 1e-6
"""Two replays' starts within this many seconds are one start."""


def _replay(scenario: Scenario, runtimes: Mapping[str, float | None],
            settings: SchedulerSettings) -> _Watched:
    workloads = tuple(replace(w, arrival=0.0, runtime=runtimes[w.tree.ref.key])
                      for w in scenario.workloads)
    sim = _Watched(replace(scenario, workloads=workloads, loose_arrivals={}), settings)
    sim.run()
    return sim


def forecast(objects: Iterable[Mapping[str, Any]], *, now: float, catalog: Catalog,
             parse_duration: DurationParser,
             settings: SchedulerSettings | None = None) -> Forecast:
    """The forecast of every gang waiting in the snapshot ``objects`` at ``now`` (epoch
    seconds), replayed under ``settings`` (default: Muster with its scheduling gates).
    Raises :class:`simulator.snapshot_replay.ReplayInputError` on a snapshot that cannot be
    replayed."""
    items = list(objects)
    scenario = scenario_from_objects(items, catalog=catalog, name="forecast")
    raw_workloads, raw_pods = _by_key(items)
    runtimes = {w.tree.ref.key: _runtime(w, raw_workloads.get(w.tree.ref.key), raw_pods,
                                         now=now, parse_duration=parse_duration)
                for w in scenario.workloads}
    ordered = tuple(sorted(scenario.workloads, key=_queue_order))
    scenario = replace(scenario, workloads=ordered)
    waiting = [(g, w.tree.ref.key) for w in ordered for g in _waiting(w)]
    chosen = settings or SchedulerSettings(mode=Mode.GATED)
    unknown = {k for k, r in runtimes.items() if not r.known}
    first = _replay(scenario, {k: r.remaining for k, r in runtimes.items()}, chosen)
    second: _Watched | None = None

    def ending_unknowns() -> _Watched:
        nonlocal second
        if second is None:
            second = _replay(scenario, {k: 0.0 if k in unknown else r.remaining
                                        for k, r in runtimes.items()}, chosen)
        return second

    out = []
    for gang, workload in waiting:
        start = first.started(gang)
        if start is not None:
            # An upper bound only if ending the unknown workloads at once starts it sooner
            # (one holding capacity it never needed, a CPU-only service, changes nothing).
            sooner = bool((first.holding(start) & unknown) - {workload}) and (
                (at := ending_unknowns().started(gang)) is None or at < start - _SAME)
            out.append(GangForecast(
                gang=gang, workload=workload, outlook=Outlook.STARTS, start=start,
                upper_bound=sooner, waits_for=first.freed_for(gang, workload, start)))
            continue
        if unknown:
            ending_unknowns()
        later = None if second is None else second.started(gang)
        if second is None or later is None:
            out.append(GangForecast(gang=gang, workload=workload, outlook=Outlook.NEVER))
            continue
        names = set(second.freed_for(gang, workload, later)) & unknown
        if not names:
            names = (first.holding(float("inf")) & unknown) - {workload}
        out.append(GangForecast(gang=gang, workload=workload, outlook=Outlook.UNKNOWN,
                                unknown=tuple(sorted(names)),
                                waits_for=second.freed_for(gang, workload, later)))
    return Forecast(gangs=tuple(out), runtimes=runtimes)
