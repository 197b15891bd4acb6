"""The running extender's forecasts: each waiting gang's Gang object says when it is expected to
start (or which unknown runtimes it lacks) and what it waits for; the workload is told when
the estimate moves by more than the margin; the gauges count the outlooks. Computed from the
state store's objects by the same replay ``muster forecast`` runs."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from extender.core.model.values import GangKey
from extender.files.catalog import packaged_catalog
from extender.kube.gangobjects import KubeGangObjects
from extender.server.app import create_app
from extender.server.forecaster import (
    ABSENT,
    MARGIN,
    MOVED,
    Expected,
    Forecaster,
    Shown,
    forecast_status,
    moved,
    object_key,
    stamp,
)
from extender.server.metrics import OUTLOOKS, Metrics
from extender.server.settings import Settings
from extender.state.build import CatalogSnapshots
from extender.state.ports import MemoryEvents, MemoryGangObjects, WorkloadEvent
from extender.state.store import StateStore
from simulator.forecast import GangForecast, Outlook
from tests.unit.simulator.forecast_snapshots import NOW, T0, jobset, node, running_pods


def _cluster(runtime: str = "10m") -> list[dict[str, Any]]:
    """Two 8-GPU nodes held by JobSet ml/train (started 4m ago), JobSet ml/next (2 x 8) waits."""
    return [node("n0"), node("n1"), jobset("train", runtime=runtime),
            *running_pods("train", "n0", "n1"), jobset("next", created=T0 + 60)]


class _Recorded:
    """The API server's side of the Gang objects' writes: each request, in order."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, Any]] = []

    def request(self, method: str, path: str, *, body: Any = None,
                content_type: str | None = None) -> Any:
        self.requests.append((method, path, copy.deepcopy(body)))
        return body


def _gang_object(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "muster.dev/v1alpha1", "kind": "Gang",
            "metadata": {"name": name, "namespace": namespace},
            "status": {"gang": f"{namespace}/{name}", "state": "Waiting"}}


class World:
    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.store = StateStore(CatalogSnapshots(packaged_catalog()))
        self.store.load(objects)
        self.now = NOW
        self.events = MemoryEvents()
        self.conn = _Recorded()
        self.gangs = KubeGangObjects(self.conn)  # type: ignore[arg-type]
        self.metrics = Metrics()
        self.forecaster = Forecaster(
            self.store, catalog=packaged_catalog, clock=lambda: self.now,
            shown=Shown(events=self.events, sink=self.gangs, report=self.metrics.forecasted))

    def written(self) -> dict[str, Any]:
        self.gangs.flush()
        return {path.rsplit("/", 1)[-1] if method == "PATCH" else body["metadata"]["name"]:
                body["status"] for method, path, body in self.conn.requests}

    def moves(self) -> list[WorkloadEvent]:
        return [e for e in self.events.workload_events() if e.reason == MOVED]


def test_a_waiting_gangs_object_says_when_it_starts_and_the_workload_it_waits_for() -> None:
    world = World(_cluster())
    world.gangs.publish({("ml", "jobset-next"): _gang_object("ml", "jobset-next"),
                         ("ml", "jobset-train"): _gang_object("ml", "jobset-train")})
    found = world.forecaster.recompute()
    assert found is not None
    written = world.written()
    assert written["jobset-next"]["forecast"] == {
        "start": stamp(NOW + 360), "upperBound": False, "waitsFor": ["JobSet/ml/train"],
        "unknownRuntimes": []}
    # The running gang is not waiting: its object says so, every field cleared.
    assert written["jobset-train"]["forecast"] == ABSENT
    assert world.moves() == []  # a first forecast is nobody's move


def test_a_gang_waiting_on_an_unknown_runtime_names_it_on_its_object() -> None:
    world = World([node("n0"), node("n1"), jobset("train"), *running_pods("train", "n0", "n1"),
                   jobset("next", created=T0 + 60)])
    world.gangs.publish({("ml", "jobset-next"): _gang_object("ml", "jobset-next")})
    world.forecaster.recompute()
    assert world.written()["jobset-next"]["forecast"] == {
        "start": "Unknown", "upperBound": False, "waitsFor": ["JobSet/ml/train"],
        "unknownRuntimes": ["JobSet/ml/train"]}


def test_a_workload_naming_a_priority_class_is_forecast_from_its_pods_priority() -> None:
    """The store holds no PriorityClass: the pods admission gave the class's value tell it."""
    waiting = jobset("next", created=T0 + 60, priority_class="high")
    pending = []
    for pod in running_pods("next", "n0", "n1"):
        del pod["spec"]["nodeName"]
        pod["spec"].update(priorityClassName="high", priority=1000)
        pod["status"] = {"phase": "Pending"}
        pending.append(pod)
    world = World([node("n0"), node("n1"), jobset("train", runtime="10m"),
                   *running_pods("train", "n0", "n1"), waiting, *pending])
    found = world.forecaster.recompute()
    assert found is not None
    assert forecast_status(found[GangKey("ml/next")])["start"] == stamp(NOW + 360)


def test_the_workload_is_told_only_when_its_start_moves_past_the_margin() -> None:
    world = World(_cluster("10m"))
    world.forecaster.recompute()
    world.now = NOW + 60  # a minute later nothing moved: the start stays put
    world.forecaster.recompute()
    assert world.moves() == []
    world.store.load(_cluster("40m"))  # train's owner now expects 30 more minutes
    world.forecaster.recompute()
    [event] = world.moves()
    assert (event.kind, event.namespace, event.name) == ("JobSet", "ml", "next")
    assert event.message == (f"gang ml/next expected to start at {stamp(NOW + 2160)} "
                             f"(was at {stamp(NOW + 360)}), when ml/train finishes")


def test_a_standby_computes_nothing_and_recomputes_when_it_leads_or_the_cluster_changes(
        ) -> None:
    world = World(_cluster())
    leading = [False]
    forecaster = Forecaster(world.store, catalog=packaged_catalog, clock=lambda: world.now,
                            shown=Shown(events=world.events), may_act=lambda: leading[0])
    assert forecaster.housekeep() == 0 and forecaster.last is None
    leading[0] = True
    assert forecaster.housekeep() == 1
    assert forecaster.housekeep() == 0  # nothing changed since
    world.store.load(_cluster("20m"))
    assert forecaster.housekeep() == 1


def test_the_gauges_count_waiting_gangs_by_outlook() -> None:
    world = World(_cluster())
    world.forecaster.recompute()
    world.metrics.forecasted({"starts": 1, "unknown": 0, "never": 0}, 0.5)
    text = world.metrics.render().decode()
    assert 'muster_forecast_gangs{outlook="starts"} 1.0' in text
    assert 'muster_forecast_gangs{outlook="unknown"} 0.0' in text
    assert "muster_forecast_seconds 0.5" in text
    assert set(OUTLOOKS) == {o.value for o in Outlook}


def _expected(outlook: Outlook = Outlook.STARTS, at: float | None = NOW + 600, *,
              now: bool = False, unknown: tuple[str, ...] = ()) -> Expected:
    start = None if at is None else 0.0 if now else at - NOW
    return Expected(GangForecast(gang=GangKey("ml/next"), workload="JobSet/ml/next",
                                 outlook=outlook, start=start, unknown=unknown), at)


@pytest.mark.parametrize(("before", "after", "told"), [
    pytest.param(None, _expected(), False, id="a-first-forecast-is-not-a-move"),
    pytest.param(_expected(), _expected(at=NOW + 600 + MARGIN), False,
                 id="moved-by-the-margin-is-not-told"),
    pytest.param(_expected(), _expected(at=NOW + 601 + MARGIN), True,
                 id="moved-past-the-margin-is-told"),
    pytest.param(_expected(), _expected(at=NOW - 1 - MARGIN), True,
                 id="sooner-past-the-margin-is-told"),
    pytest.param(_expected(), _expected(Outlook.UNKNOWN, None, unknown=("JobSet/ml/a",)), True,
                 id="a-start-turned-unknown-is-told"),
    pytest.param(_expected(Outlook.NEVER, None), _expected(Outlook.NEVER, None), False,
                 id="never-again-is-not-told"),
])
def test_a_move_is_told_past_the_margin_or_when_the_outlook_changes(
        before: Expected | None, after: Expected, told: bool) -> None:
    assert (moved(before, after) is not None) is told


def test_an_unknown_start_is_said_with_the_workloads_lacking_a_runtime() -> None:
    message = moved(_expected(), _expected(Outlook.UNKNOWN, None,
                                           unknown=("JobSet/ml/a", "JobSet/ml/b")))
    assert message == (f"gang ml/next expected to start unknown (was at {stamp(NOW + 600)}), "
                       "it waits for ml/a and ml/b, which have no expected runtime "
                       "(muster.dev/expected-runtime)")


def test_a_gang_that_fits_now_says_now_and_its_object_key_is_its_gang_objects() -> None:
    fits = _expected(now=True, at=NOW)
    assert forecast_status(fits)["start"] == "Now"
    assert forecast_status(_expected(Outlook.NEVER, None))["start"] == "Never"
    assert object_key(fits) == ("ml", "jobset-next")


def test_muster_serve_recomputes_the_forecast_in_a_thread_of_its_own() -> None:
    store = StateStore(CatalogSnapshots(packaged_catalog()))
    store.load(_cluster())
    app = create_app(Settings(forecast_every=0.2), store, lambda: NOW, housekeeping=0.2,
                     catalog=packaged_catalog, gang_objects=MemoryGangObjects())
    client = app.test_client()
    wanted = 'muster_forecast_gangs{outlook="starts"} 1.0'
    deadline = time.monotonic() + 60
    while wanted not in client.get("/metrics").data.decode():
        assert time.monotonic() < deadline, "no forecast within 60s"
        time.sleep(0.2)
