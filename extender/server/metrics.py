"""Prometheus metrics of one app, in its own registry (several apps may live in one process).

Counters and histograms are updated by the routes; gauges about gangs are computed when
``/metrics`` is scraped, from a callback the service provides, so they are never stale.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from extender.server.decider import Busy

VERBS = ("filter", "prioritize", "bind", "preempt")
GANG_STATES = ("waiting", "planned", "bound", "expired")

# Filter adds straight to every scheduling cycle, so the buckets resolve sub-millisecond times;
# bind holds at the barrier for up to --bind-timeout, hence the long tail.
_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


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

    def count(self, verb: str, outcome: str) -> None:
        """One answered request: ``muster_decisions_total{verb,outcome}``."""
        self.decisions.labels(verb=verb, outcome=outcome).inc()

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

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _or_nan(read: Callable[[], float]) -> Callable[[], float]:
    def gauge() -> float:
        try:
            return float(read())
        except Busy:
            return math.nan
    return gauge
