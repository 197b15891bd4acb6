"""The metrics an operator alerts on, read from ``/metrics`` after real requests: the build,
how long gangs waited for admission, each watched source's state, and how ungating looks
were answered."""

from __future__ import annotations

import platform
import threading
from typing import Any

import orjson
from flask.testing import FlaskClient

import extender
from extender.server.app import create_app
from extender.server.decider import Busy
from extender.server.metrics import GangWaitObserver, Metrics
from extender.server.settings import Settings
from extender.state.memory import MemoryBinder
from extender.state.ports import EventType, MemoryEvents, PodEvent, PodRef, WorkloadEvent
from extender.state.store import NODES, PODS
from tests.unit.server.builders import (
    Clock,
    bind_body,
    filter_body,
    gpu_node,
    job_of,
    jobset,
    jobset_pod,
    plain_pod,
    store_of,
)

NODES_ = ["n0", "n1"]


class World:
    def __init__(self) -> None:
        objects: list[dict[str, Any]] = [gpu_node(n) for n in NODES_]
        objects += [jobset("train", workers=2, gpus=8), job_of("train"),
                    *(jobset_pod("train", i, gpus=8) for i in range(2))]
        self.store = store_of(objects)
        self.clock = Clock()
        self.events = MemoryEvents()
        app = create_app(Settings(bind_timeout=5.0), self.store, self.clock,
                         binder=MemoryBinder(self.store), events=self.events)
        self.client: FlaskClient = app.test_client()

    def post(self, verb: str, body: bytes) -> Any:
        response = self.client.post(f"/{verb}", data=body,
                                    headers={"Content-Type": "application/json"})
        assert response.status_code == 200
        return orjson.loads(response.data)

    def metric(self, name: str) -> float | None:
        for line in self.client.get("/metrics").data.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split(" ")[1])
        return None

    def planned(self) -> dict[int, str]:
        [gang] = orjson.loads(self.client.get("/inspect/gangs").data)["gangs"]
        return {i: slot["node"] for i, slot in enumerate(gang["plan"])}

    def bind_both(self) -> dict[int, str]:
        nodes, errors = self.planned(), {}

        def one(i: int) -> None:
            errors[i] = self.post("bind", bind_body(jobset_pod("train", i, gpus=8),
                                                    nodes[i]))["Error"]

        threads = [threading.Thread(target=one, args=(i,)) for i in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        return errors


def test_build_info_names_the_version_and_python() -> None:
    world = World()
    assert world.metric(f'muster_build_info{{python="{platform.python_version()}",'
                        f'version="{extender.__version__}"}}') == 1.0


def test_a_gang_wait_is_observed_once_from_its_first_member_to_its_admission() -> None:
    world = World()
    world.post("filter", filter_body(jobset_pod("train", 0, gpus=8), NODES_))
    world.clock.now += 7
    world.post("filter", filter_body(jobset_pod("train", 1, gpus=8), NODES_))
    world.clock.now += 5
    assert world.metric("muster_gang_wait_seconds_count") == 0.0  # not admitted yet
    assert world.bind_both() == {0: "", 1: ""}
    assert [e.reason for e in world.events.workload_events()].count("GangAdmitted") == 1
    assert "GangAdmitted" not in [e.reason for e in world.events.events()]  # not per pod
    assert world.metric("muster_gang_wait_seconds_count") == 1.0
    assert world.metric("muster_gang_wait_seconds_sum") == 12.0
    assert world.metric('muster_gang_wait_seconds_bucket{le="10.0"}') == 0.0
    assert world.metric('muster_gang_wait_seconds_bucket{le="30.0"}') == 1.0


def test_a_pod_outside_any_gang_adds_no_gang_wait() -> None:
    world = World()
    world.post("filter", filter_body(plain_pod("solo", gpus=1), NODES_))
    assert world.post("bind", bind_body(plain_pod("solo", gpus=1), "n0"))["Error"] == ""
    assert world.metric("muster_gang_wait_seconds_count") == 0.0


def test_watch_state_says_which_source_is_broken_or_forbidden() -> None:
    world = World()
    assert world.metric(f'muster_watch_state{{source="{NODES}",state="synced"}}') == 1.0
    world.store.set_health(NODES, healthy=False, problem="watch broken: connection refused")
    world.store.set_unwatchable(PODS, "forbidden: RBAC does not grant list/watch")
    world.store.expect("acme.example.com/v1/TrainingRun")
    assert world.metric(f'muster_watch_state{{source="{NODES}",state="broken"}}') == 1.0
    assert world.metric(f'muster_watch_state{{source="{NODES}",state="synced"}}') == 0.0
    assert world.metric(f'muster_watch_state{{source="{PODS}",state="forbidden"}}') == 1.0
    assert world.metric('muster_watch_state{source="acme.example.com/v1/TrainingRun",'
                        'state="listing"}') == 1.0
    world.store.replace(NODES, [gpu_node(n) for n in NODES_])  # a relist heals it
    assert world.metric(f'muster_watch_state{{source="{NODES}",state="synced"}}') == 1.0


def _told(gang: str, reason: str) -> WorkloadEvent:
    return WorkloadEvent("jobset.x-k8s.io/v1alpha2", "JobSet", "ml", gang, "uid-" + gang,
                         EventType.NORMAL, reason, f"gang ml/{gang}: m", gang=f"ml/{gang}")


def test_the_observer_passes_every_event_on_and_forgets_the_oldest_gang_beyond_its_limit(
        ) -> None:
    inner, clock, seen = MemoryEvents(), Clock(), []
    observer = GangWaitObserver(inner, clock=clock, observe=seen.append, limit=2)
    for gang in ("a", "b", "c"):  # three gangs wait; only two are remembered
        observer.emit(_told(gang, "GangWaiting"))
        clock.now += 1
    observer.emit(PodEvent(PodRef("ml", "a-0", "uid-a-0"), EventType.WARNING, "GangWaiting",
                           "on a pod: not what the wait is timed from"))
    for gang in ("a", "b", "c", "c"):
        observer.emit(_told(gang, "GangAdmitted"))
    assert seen == [2.0, 1.0]  # gang b (from 1001 to 1003), gang c; gang a was forgotten
    assert len(inner.events()) == 1 and len(inner.workload_events()) == 7


def test_gang_looks_keep_their_last_counts_while_the_service_is_busy() -> None:
    metrics = Metrics()
    answers: list[dict[str, int] | None] = [{"planner": 3, "bound": 7}, None]

    def looks() -> dict[str, int]:
        answer = answers.pop(0)
        if answer is None:
            raise Busy("the service lock was not free within 0.5s")
        return answer

    metrics.watch_looks(looks)
    for _ in range(2):  # the second scrape finds the service busy
        text = metrics.render().decode()
        assert 'muster_gang_looks_total{answered_by="planner"} 3.0' in text
        assert 'muster_gang_looks_total{answered_by="bound"} 7.0' in text
    assert answers == []
