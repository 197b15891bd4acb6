"""Forecasts beside the running extender: when each waiting gang is expected to start, and what
it waits for, shown on its Gang object, told on its workload when it moves, counted in gauges.

The forecast is :func:`simulator.forecast.forecast` (the simulator's gang replay run forward
from now through the same ``GangSession``, docs/forecast.md) over the state store's raw
objects; this module only keeps it current and says it. A :class:`Forecaster` thread
recomputes it after the cluster changed (the store's events nudge it), at most once per
``every`` seconds, and further apart when a recompute took long, so recomputes take at most
:data:`SHARE` of one core. It never runs on a request path nor under the service's lock: it
reads the store (its lock, briefly) and writes through ports that queue (Gang objects,
Events). Only the leader writes.

What it writes is worked out by pure functions (:func:`expectations`, :func:`forecast_status`,
:func:`moved`), tested apart from the thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from extender.core.model.durations import parse_seconds
from extender.core.model.notices import EventType, WorkloadEvent
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import GangKey
from extender.core.workloads.catalog import Catalog
from extender.server.gangobjects import object_name
from extender.server.housekeeping import Housekeeper
from extender.state.ports import Clock, EventSink
from extender.state.store import StateStore
from simulator.forecast import Forecast, GangForecast, Outlook, forecast
from simulator.snapshot_replay import ReplayInputError

log = logging.getLogger("muster.forecast")

MARGIN = 300.0
"""Seconds an expected start must move by before the workload is told (``GangForecastMoved``):
a forecast in minutes moves by seconds at each recompute, and an Event per recompute would
bury the workload's other events."""
SHARE = 0.1
"""The most of one core's time recomputes may take: after one that took ``t`` seconds the next
waits at least ``t / SHARE``."""
STALE = 600.0
"""Seconds after which a forecast is recomputed though nothing changed: a workload running past
its expected runtime turns its waiting gangs' starts unknown with no event to say so."""
MOVED = "GangForecastMoved"
Key = tuple[str, str]

_WORDS = {Outlook.STARTS: "Starts", Outlook.UNKNOWN: "Unknown", Outlook.NEVER: "Never"}
ABSENT: Mapping[str, Any] = {"start": "", "upperBound": False, "waitsFor": [],
                             "unknownRuntimes": []}
"""The forecast of a Gang object whose gang is not waiting, or not forecast: every field is
written, so a merge patch clears what an earlier forecast said."""


@runtime_checkable
class ForecastSink(Protocol):
    def show_forecasts(self, forecasts: Mapping[Key, Mapping[str, Any]], *,
                       absent: Mapping[str, Any]) -> None:
        """Put ``forecasts`` (Gang object key -> its ``status.forecast``) on the Gang objects,
        and ``absent`` on every other; must not block the caller on the network."""


@dataclass(frozen=True, slots=True)
class Expected:
    """A waiting gang's forecast in wall-clock time."""

    forecast: GangForecast
    at: float | None = None
    """Epoch seconds it is expected to start at (``STARTS`` only)."""

    @property
    def now(self) -> bool:
        """It fits now."""
        return self.forecast.start is not None and self.forecast.start <= 0


def expectations(found: Forecast, now: float) -> dict[GangKey, Expected]:
    """Gang key -> its forecast, the replay's seconds from ``now`` turned into epoch seconds
    (whole seconds: a running workload's end, and so what waits for it, stays put from one
    recompute to the next)."""
    return {g.gang: Expected(g, None if g.start is None else
                             float(round(now + max(0.0, g.start))))
            for g in found.gangs}


def stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def forecast_status(expected: Expected) -> dict[str, Any]:
    """The Gang object's ``status.forecast``: ``start`` is when (RFC 3339), ``Now``,
    ``Unknown`` or ``Never``."""
    g = expected.forecast
    start = _WORDS[g.outlook]
    if g.outlook is Outlook.STARTS and expected.at is not None:
        start = "Now" if expected.now else stamp(expected.at)
    return {"start": start, "upperBound": g.upper_bound, "waitsFor": list(g.waits_for),
            "unknownRuntimes": list(g.unknown)}


def short_names(workloads: Sequence[str]) -> str:
    """``ml/a``, ``ml/a and ml/b``, ``ml/a, ml/b and ml/c`` (workload keys without the kind)."""
    names = [w.split("/", 1)[-1] for w in workloads]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def waits_clause(expected_outlook: Outlook, waits_for: Sequence[str],
                 unknown: Sequence[str]) -> str:
    """What a gang waits for, as a clause after its start: ``when ml/train-3 finishes``."""
    if expected_outlook is Outlook.NEVER:
        return "no workload's end makes room for it"
    if expected_outlook is Outlook.UNKNOWN:
        if not unknown:
            return "it waits for workloads whose runtime is unknown"
        verb = "has" if len(unknown) == 1 else "have"
        return (f"it waits for {short_names(unknown)}, which {verb} no expected runtime "
                f"(muster.dev/expected-runtime)")
    if not waits_for:
        return ""
    return f"when {short_names(waits_for)} {'finishes' if len(waits_for) == 1 else 'finish'}"


def _when(e: Expected) -> str:
    if e.forecast.outlook is Outlook.STARTS and e.at is not None:
        return "now" if e.now else f"{'by' if e.forecast.upper_bound else 'at'} {stamp(e.at)}"
    return e.forecast.outlook.value


def moved(before: Expected | None, after: Expected, *, margin: float = MARGIN) -> str | None:
    """The message telling the workload its gang's forecast moved, or ``None``: a first
    forecast, an outlook unchanged, or a start moved by ``margin`` seconds or less."""
    if before is None:
        return None
    now = after.forecast
    if before.forecast.outlook is now.outlook and (
            after.at is None or before.at is None or abs(after.at - before.at) <= margin):
        return None
    clause = waits_clause(now.outlook, now.waits_for, now.unknown)
    return (f"gang {now.gang} expected to start {_when(after)} (was {_when(before)})"
            + (f", {clause}" if clause else ""))


def object_key(expected: Expected) -> Key:
    kind, namespace, _ = expected.forecast.workload.split("/", 2)
    return namespace, object_name(kind, expected.forecast.gang)


def counts(found: Mapping[GangKey, Expected]) -> dict[str, int]:
    """Waiting gangs by outlook (``starts``, ``unknown``, ``never``), for the gauge."""
    out = {o.value: 0 for o in Outlook}
    for e in found.values():
        out[e.forecast.outlook.value] += 1
    return out


def priority_classes(pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The PriorityClasses the store does not watch, as its pods show them: admission wrote
    the value of the ``priorityClassName`` a pod names into its ``spec.priority``, and the
    replay needs it for the templates that name the same class."""
    seen: dict[str, int] = {}
    for pod in pods:
        spec = pod.get("spec")
        if not isinstance(spec, Mapping):
            continue
        name, value = spec.get("priorityClassName"), spec.get("priority")
        if isinstance(name, str) and isinstance(value, int) and not isinstance(value, bool):
            seen.setdefault(name, value)
    return [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
             "metadata": {"name": name}, "value": value} for name, value in sorted(seen.items())]


def _always() -> bool:
    return True


Report = Callable[[Mapping[str, int], float], None]
"""Gauges: waiting gangs by outlook, and the seconds the last recompute took."""


@dataclass(frozen=True, slots=True)
class Shown:
    """Where the forecasts go."""

    events: EventSink
    """The workloads' ``GangForecastMoved`` events."""
    sink: ForecastSink | None = None
    """The Gang objects."""
    report: Report | None = None
    """The gauges."""


class Forecaster:
    """Keeps the forecast of every waiting gang current: a :class:`Housekept` whose rounds a
    :class:`~extender.server.housekeeping.Housekeeper` of its own runs (:func:`start`)."""

    def __init__(self, state: StateStore, *, catalog: Callable[[], Catalog], clock: Clock,
                 shown: Shown, may_act: Callable[[], bool] | None = None) -> None:
        """``may_act``: whether this replica leads (only the leader writes)."""
        self._state = state
        self._catalog = catalog
        self._clock = clock
        self._events = shown.events
        self._sink = shown.sink
        self._report = shown.report
        self._may_act = may_act or _always
        self._told: dict[GangKey, Expected] = {}
        """Gang key -> the forecast its workload was last told (or first shown)."""
        self._seen = (-1, float("-inf"))
        """The store's revision and the monotonic time of the last recompute."""
        self.last: Forecast | None = None
        """The last forecast computed."""

    def housekeep(self) -> int:
        """One round: while this replica leads, recompute when the cluster changed since
        the last recompute, or :data:`STALE` seconds passed; returns the gangs forecast (0
        when not due)."""
        if not self._may_act():  # a standby spends no CPU on what it would not write
            self._told.clear()  # a new leader's first forecast is nobody's move
            self._seen = (-1, float("-inf"))
            return 0
        revision, begun = self._state.revision, time.monotonic()
        if revision == self._seen[0] and begun - self._seen[1] < STALE:
            return 0
        self._seen = (revision, begun)
        expected = self.recompute()
        took = time.monotonic() - begun
        if expected is None:
            return 0
        if self._report is not None:
            self._report(counts(expected), took)
        log.info("event=forecast gangs=%d took=%.2fs", len(expected), took)
        return len(expected)

    def recompute(self) -> dict[GangKey, Expected] | None:
        """One recompute, its results shown; ``None`` when the snapshot cannot be replayed
        (logged: the Gang objects keep their last forecast)."""
        raw = self._state.raw()
        snapshot = self._state.snapshot()
        now = self._clock()
        objects = [*priority_classes(raw.pods), *raw.nodes, *raw.pods, *raw.objects]
        try:
            found = forecast(objects, now=now, catalog=self._catalog(),
                             parse_duration=parse_seconds)
        except ReplayInputError as err:
            log.warning("event=forecast-failed reason=%r", str(err))
            return None
        self.last = found
        expected = expectations(found, now)
        self._show(expected, snapshot)
        return expected

    def _show(self, expected: Mapping[GangKey, Expected], snapshot: ClusterSnapshot) -> None:
        if self._sink is not None:
            self._sink.show_forecasts({object_key(e): forecast_status(e)
                                       for e in expected.values()}, absent=ABSENT)
        for key, e in expected.items():
            message = moved(self._told.get(key), e)
            if key not in self._told or message is not None:
                self._told[key] = e
            gang = snapshot.gangs.get(key)
            if message is None or gang is None:
                continue
            ref = gang.workload
            self._events.emit(WorkloadEvent(
                api_version=ref.api_version, kind=ref.kind, namespace=ref.namespace,
                name=ref.name, uid=ref.uid, type=EventType.NORMAL, reason=MOVED,
                message=message, gang=key))
        for key in set(self._told) - set(expected):
            del self._told[key]


def start(forecaster: Forecaster, *, every: float) -> Housekeeper:
    """Run ``forecaster``'s rounds in a thread of their own: a second after a nudge (a burst
    of changes is one round), at least ``every`` seconds apart and further when a recompute
    took long (:data:`SHARE`), and every ``every`` seconds to see whether it went stale."""
    return Housekeeper(forecaster, interval=every, gap=min(1.0, every), name="forecast",
                       pace=lambda took: max(every, took / SHARE)).start()
