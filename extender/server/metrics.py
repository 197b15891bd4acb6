"""Prometheus metrics of one app, in its own registry (several apps may live in one process).

Counters and histograms are updated by the routes; gauges about gangs and watches are computed
when ``/metrics`` is scraped, from callbacks the service and the store provide, so they are
never stale; so are the age of the oldest waiting gang and the GPUs waiting gangs ask for
(:func:`waiting_gangs`), which fire the "gangs wait long" alert for a gang that never starts.
The gang wait time is observed from the events the service emits (:class:`GangWaitObserver`),
so the service needs no metrics code of its own. The forecast gauges are set by the
forecaster after each recompute (:meth:`Metrics.forecasted`).
"""

from __future__ import annotations

import contextlib
import math
import platform
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

import extender
from extender.core.gang.lifecycle import STATE_AFTER_EVENT, VIEW_STATES, GangState
from extender.core.model.snapshot import ClusterSnapshot
from extender.server.decider import Busy
from extender.state.ports import AnyEvent, Clock, EventSink, WorkloadEvent
from extender.state.store import SOURCE_STATES

VERBS = ("filter", "prioritize", "bind", "preempt")
GANG_STATES = (*VIEW_STATES, "expired")
"""``muster_gangs{state}``: each state a gang view shows, and the plans expired so far."""
LOOK_ANSWERS = ("planner", "bound")
OUTLOOKS = ("starts", "unknown", "never")
"""``muster_forecast_gangs{outlook}``: the forecast's outlooks (docs/forecast.md)."""

# Filter adds straight to every scheduling cycle, so the buckets resolve sub-millisecond times;
# bind holds at the barrier for up to --bind-timeout, hence the long tail.
_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
# A gang waits from a second (it fits at once) to hours (a big gang behind others).
_WAIT_BUCKETS = (1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.decisions = Counter(
            "muster_decisions", "Extender decisions by verb and outcome",
            ["verb", "outcome"], registry=self.registry)
        self.latency = Histogram(
            "muster_request_seconds", "Time to answer kube-scheduler, by verb",
            ["verb"], buckets=_BUCKETS, registry=self.registry)
        self.bad_requests = Counter(
            "muster_bad_requests", "Requests answered with an Error because the body was bad",
            ["verb"], registry=self.registry)
        self.gangs = Gauge(
            "muster_gangs", "Gangs known to Muster, by state", ["state"], registry=self.registry)
        self.reserved_gpus = Gauge(
            "muster_reserved_gpus", "GPUs held by gang plans not yet bound",
            registry=self.registry)
        self.binds_waiting = Gauge(
            "muster_binds_waiting", "Bind requests held at the gang barrier right now",
            registry=self.registry)
        self.ready = Gauge(
            "muster_ready", "1 when the cluster state is synced and trusted",
            registry=self.registry)
        self.leader = Gauge(
            "muster_leader", "1 while this replica leads and decides (always 1 without "
            "--leader-elect)", registry=self.registry)
        self.leader.set(1)
        self.leader_transitions = Counter(
            "muster_leader_transitions", "Times this replica became leader or standby",
            ["to"], registry=self.registry)
        self.gang_wait = Histogram(
            "muster_gang_wait_seconds",
            "Time from the first Muster event on any pod of a gang to its admission",
            buckets=_WAIT_BUCKETS, registry=self.registry)
        self.forecast_gangs = Gauge(
            "muster_forecast_gangs", "Waiting gangs by their forecast: expected to start "
            "(starts), waiting on workloads of unknown runtime (unknown), or on nothing that "
            "ends (never)", ["outlook"], registry=self.registry)
        self.forecast_seconds = Gauge(
            "muster_forecast_seconds", "Wall seconds the last forecast recompute took",
            registry=self.registry)
        Gauge("muster_build_info", "Muster's version and Python's; always 1",
              ["version", "python"], registry=self.registry).labels(
            version=extender.__version__, python=platform.python_version()).set(1)

    def count(self, verb: str, outcome: str) -> None:
        """One answered request: ``muster_decisions_total{verb,outcome}``."""
        self.decisions.labels(verb=verb, outcome=outcome).inc()

    def forecasted(self, outlooks: Mapping[str, int], took: float) -> None:
        """The last forecast: waiting gangs by outlook, and the seconds it took."""
        for outlook in OUTLOOKS:
            self.forecast_gangs.labels(outlook=outlook).set(outlooks.get(outlook, 0))
        self.forecast_seconds.set(took)

    def watch(self, *, gangs: Callable[[], Mapping[str, int]], reserved_gpus: Callable[[], float],
              binds_waiting: Callable[[], int], ready: Callable[[], bool]) -> None:
        """Compute gauges at scrape time from the service's own state (NaN while the service
        is too busy to say, so a scrape of a wedged Muster still answers)."""
        for state in GANG_STATES:
            self.gangs.labels(state=state).set_function(
                _or_nan(lambda state=state: float(gangs().get(state, 0))))  # type: ignore[misc]
        self.reserved_gpus.set_function(_or_nan(reserved_gpus))
        self.binds_waiting.set_function(_or_nan(lambda: float(binds_waiting())))
        self.ready.set_function(lambda: 1.0 if ready() else 0.0)

    def watch_sources(self, states: Callable[[], Mapping[str, str]]) -> None:
        """``muster_watch_state{source,state}`` at scrape time: 1 for each watched source's
        state (``listing``, ``synced``, ``broken``, ``forbidden``), 0 for the others."""
        self.registry.register(_SourceStates(states))

    def watch_looks(self, looks: Callable[[], Mapping[str, int]]) -> None:
        """``muster_gang_looks_total{answered_by}`` at scrape time: gangs waiting at their
        gates that ungating looks ran the planner for (``planner``) or answered with the fit
        bound (``bound``)."""
        self.registry.register(_Looks(looks))

    def watch_waiting(self, waiting: Callable[[], Sequence[tuple[float, float]]], *,
                      clock: Clock) -> None:
        """``muster_oldest_waiting_gang_seconds`` and ``muster_waiting_gang_gpus`` at scrape
        time, from ``(waiting since, GPUs)`` of each waiting gang (:func:`waiting_gangs`)."""
        self.registry.register(_Waiting(waiting, clock))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _SourceStates(Collector):
    def __init__(self, states: Callable[[], Mapping[str, str]]) -> None:
        self._states = states

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "muster_watch_state", "Each watched source's state: 1 for the current one "
            "(listing, synced, broken, forbidden)", labels=["source", "state"])
        for source, current in sorted(self._states().items()):
            for state in SOURCE_STATES:
                family.add_metric([source, state], 1.0 if state == current else 0.0)
        yield family


class _Looks(Collector):
    """A counter read from the service at scrape time; while the service is too busy to say,
    the last counts read (a counter never goes back, and never turns NaN)."""

    def __init__(self, looks: Callable[[], Mapping[str, int]]) -> None:
        self._looks = looks
        self._last: Mapping[str, int] = {}

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "muster_gang_looks", "Gated gangs an ungating look ran the planner for (planner) "
            "or ruled out from free capacity without planning (bound)",
            labels=["answered_by"])
        with contextlib.suppress(Busy):
            self._last = self._looks()
        for how in LOOK_ANSWERS:
            family.add_metric([how], float(self._last.get(how, 0)))
        yield family


class _Waiting(Collector):
    def __init__(self, waiting: Callable[[], Sequence[tuple[float, float]]],
                 clock: Clock) -> None:
        self._waiting = waiting
        self._clock = clock

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            gangs = self._waiting()
            now = self._clock()
            oldest = max((now - since for since, _ in gangs if since > 0), default=0.0)
            age, gpus = max(0.0, oldest), float(sum(g for _, g in gangs))
        except Busy:
            age = gpus = math.nan
        yield GaugeMetricFamily(
            "muster_oldest_waiting_gang_seconds", "How long the gang waiting longest has "
            "waited, from its workload's creation or its oldest pod's, whichever is later "
            "(0 when no gang waits)", value=age)
        yield GaugeMetricFamily(
            "muster_waiting_gang_gpus", "GPUs the waiting gangs ask for, all of them together",
            value=gpus)


def waiting_gangs(views: Sequence[Mapping[str, Any]], snapshot: ClusterSnapshot,
                  ) -> list[tuple[float, float]]:
    """``(waiting since, GPUs)`` of each gang whose view (``/inspect/gangs``) says
    ``waiting``: since the later of its workload's creation and its oldest pod's (a workload
    that restarts its pods waits again from then; 0 when neither is known), and the GPUs of
    all its members. A gang gone from ``snapshot`` since the views were made is left out."""
    out = []
    for view in views:
        if view.get("state") != GangState.WAITING:
            continue
        gang = snapshot.gangs.get(view["gang"])
        if gang is None:
            continue
        pods = [p.created for p in snapshot.pods_of_gang(gang.key) if p.created > 0]
        out.append((max(gang.created, min(pods, default=0.0)), float(gang.gpus)))
    return out


class GangWaitObserver:
    """An :class:`EventSink` that passes every event on and observes, on ``GangAdmitted``, how
    long the gang waited since the first event about it on its workload (``GangGathering``
    while its members are created behind their gates, ``GangWaiting``, ``GangPlanned``...).
    A gang admitted again later (new pods after failures) starts a new wait. At most
    ``limit`` gangs are timed at once; the oldest is forgotten beyond that (a gang that
    never starts, deleted while waiting, is never observed and must not hold memory)."""

    def __init__(self, inner: EventSink, *, clock: Clock, observe: Callable[[float], None],
                 limit: int = 10_000) -> None:
        self._inner = inner
        self._clock = clock
        self._observe = observe
        self._limit = limit
        self._lock = threading.Lock()
        self._first: dict[str, float] = {}

    def emit(self, event: AnyEvent) -> None:
        self._inner.emit(event)
        if not isinstance(event, WorkloadEvent) or not event.gang:
            return
        gang = event.gang
        now = self._clock()
        with self._lock:
            if STATE_AFTER_EVENT.get(event.reason) is GangState.ADMITTED:
                first = self._first.pop(gang, None)
                if first is not None:
                    self._observe(max(0.0, now - first))
                return
            if gang not in self._first:
                self._first[gang] = now
                if len(self._first) > self._limit:
                    del self._first[next(iter(self._first))]


def _or_nan(read: Callable[[], float]) -> Callable[[], float]:
    def gauge() -> float:
        try:
            return float(read())
        except Busy:
            return math.nan
    return gauge
