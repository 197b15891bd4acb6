"""The extender through the Flask test client: verbs, gang decisions, barrier, probes."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from flask import Flask
from flask.testing import FlaskClient

from extender.server.app import create_app
from extender.server.settings import Settings
from extender.state.memory import MemoryBinder
from extender.state.ports import MemoryEvents
from extender.state.store import NODES, PODS
from tests.unit.server.builders import (
    bind_body,
    filter_body,
    gpu_node,
    job_of,
    jobset,
    jobset_pod,
    plain_pod,
    plan_nodes,
    store_of,
)

NODE_NAMES = ["n0", "n1", "n2", "n3"]


class World:
    def __init__(self, objects: list[dict[str, Any]], *, bind_timeout: float = 2.0,
                 max_bytes: int = 1 << 20) -> None:
        self.store = store_of(objects)
        self.events = MemoryEvents()
        self.binder = MemoryBinder(self.store)
        self.app: Flask = create_app(
            Settings(bind_timeout=bind_timeout, max_request_bytes=max_bytes), self.store,
            time.time, binder=self.binder, events=self.events)
        self.client: FlaskClient = self.app.test_client()

    def post(self, verb: str, body: bytes) -> Any:
        response = self.client.post(f"/{verb}", data=body,
                                    headers={"Content-Type": "application/json"})
        assert response.status_code == 200, response.data
        return orjson.loads(response.data)

    def gangs(self) -> list[dict[str, Any]]:
        response = self.client.get("/inspect/gangs")
        assert response.status_code == 200
        gangs: list[dict[str, Any]] = orjson.loads(response.data)["gangs"]
        return gangs

    def planned_node(self, index: int) -> str:
        """The node of the gang plan's ``index``-th slot (one pod per slot here)."""
        [gang] = self.gangs()
        return str(gang["plan"][index]["node"])


def four_gpu_nodes() -> list[dict[str, Any]]:
    return [gpu_node(n, gpus=8) for n in NODE_NAMES]


def train(workers: int = 4, gpus: int = 8) -> list[dict[str, Any]]:
    return [jobset("train", workers=workers, gpus=gpus), job_of("train"),
            *(jobset_pod("train", i, gpus=gpus) for i in range(workers))]


@pytest.fixture
def world() -> World:
    return World(four_gpu_nodes() + train())


def test_a_gang_is_planned_whole_and_its_capacity_kept_from_others() -> None:
    world = World(four_gpu_nodes() + train(workers=2))
    first = world.post("filter", filter_body(jobset_pod("train", 0, gpus=8), NODE_NAMES))
    assert first["Error"] == ""
    planned = plan_nodes(world.gangs(), "ml/train")
    assert len(planned) == 2  # two 8-GPU workers: two whole nodes
    # One planned node each, so kube-scheduler binds without scoring; nodes passed: the
    # scheduler places the pod there, so no per-node reasons are shipped.
    assert len(first["NodeNames"]) == 1 and first["NodeNames"][0] in planned
    assert first["FailedNodes"] == first["FailedAndUnresolvableNodes"] == {}
    second = world.post("filter", filter_body(jobset_pod("train", 1, gpus=8), NODE_NAMES))
    assert sorted(first["NodeNames"] + second["NodeNames"]) == planned
    other = world.post("filter", filter_body(plain_pod("solo", gpus=8), NODE_NAMES))
    assert sorted(other["NodeNames"]) == sorted(set(NODE_NAMES) - set(planned))
    kept_off = world.post("filter", filter_body(plain_pod("solo", gpus=8), planned))
    assert kept_off["NodeNames"] == []
    refused = {**kept_off["FailedNodes"], **kept_off["FailedAndUnresolvableNodes"]}
    assert sorted(refused) == sorted(planned)
    assert all("reserved for gang ml/train" in why for why in refused.values()), refused
    # A planned member says nothing on itself (kube-scheduler's Scheduled event will); its
    # workload hears once that the gang was planned, and where.
    assert [e for e in world.events.events() if e.pod.name.startswith("train-")] == []
    [event] = world.events.workload_events()
    assert (event.type, event.reason, event.gang) == ("Normal", "GangPlanned", "ml/train")
    assert all(n in event.message for n in planned), event.message


def test_a_gang_that_does_not_fit_fails_every_node_with_a_reason() -> None:
    world = World(four_gpu_nodes()[:3] + train())
    result = world.post("filter", filter_body(jobset_pod("train", 0, gpus=8), NODE_NAMES[:3]))
    assert result["NodeNames"] == []
    reasons = {**result["FailedNodes"], **result["FailedAndUnresolvableNodes"]}
    assert set(reasons) == {"n0", "n1", "n2"}
    assert "ml/train" in reasons["n0"]
    [event] = world.events.events()
    assert (event.type, event.reason) == ("Warning", "GangWaiting")
    assert event.message.startswith("gang ml/train: ") and event.message.count("ml/train") == 1


def test_unknown_nodes_fail_and_a_pod_of_an_unknown_kind_is_not_a_gang(world: World) -> None:
    pod = plain_pod("stray", gpus=1)
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "example.com/v1", "kind": "Mystery",
                                           "name": "m", "uid": "m1", "controller": True}]
    result = world.post("filter", filter_body(pod, ["n0", "ghost"]))
    assert result["NodeNames"] == ["n0"]
    only_ghost = world.post("filter", filter_body(pod, ["ghost"]))
    assert only_ghost["NodeNames"] == []
    assert "not yet seen" in only_ghost["FailedNodes"]["ghost"]


def test_a_node_is_known_from_the_event_that_adds_it_and_unknown_once_deleted(
        world: World) -> None:
    """The known names are kept per version of the node map, across pod events: a node event
    must still reach the very next filter."""
    pod = plain_pod("solo", gpus=1)
    assert world.post("filter", filter_body(pod, ["n4"]))["NodeNames"] == []
    world.store.apply(NODES, "ADDED", gpu_node("n4", gpus=8))
    assert world.post("filter", filter_body(pod, ["n4"]))["NodeNames"] == ["n4"]
    world.store.apply(PODS, "ADDED", plain_pod("other", gpus=1))  # a pod event only
    assert world.post("filter", filter_body(pod, ["n4"]))["NodeNames"] == ["n4"]
    world.store.apply(NODES, "DELETED", gpu_node("n4", gpus=8))
    gone = world.post("filter", filter_body(pod, ["n4"]))
    assert gone["NodeNames"] == [] and "not yet seen" in gone["FailedNodes"]["n4"]


def test_full_node_objects_are_answered_with_node_objects(world: World) -> None:
    body = orjson.dumps({"Pod": plain_pod("solo", gpus=1), "NodeNames": None,
                         "Nodes": {"metadata": {}, "items": four_gpu_nodes()}})
    result = world.post("filter", body)
    assert result["NodeNames"] is None
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == NODE_NAMES


def test_filter_fails_closed_while_state_is_not_trusted() -> None:
    world = World(four_gpu_nodes() + train())
    world.store.set_health(NODES, healthy=False, problem="watch broken: connection refused")
    result = world.post("filter", filter_body(plain_pod("solo", gpus=1), NODE_NAMES))
    assert "not trusted" in result["Error"] and "connection refused" in result["Error"]
    ready = world.client.get("/readyz")
    assert ready.status_code == 503
    assert orjson.loads(ready.data)["ready"] is False
    world.store.replace(NODES, four_gpu_nodes())
    assert world.client.get("/readyz").status_code == 200


def bind_all(world: World, indexes: list[int]) -> dict[int, str]:
    """Filter each member (planning the gang), then bind them concurrently, as kube-scheduler's
    asynchronous binding goroutines do; returns each bind's Error."""
    for i in indexes:
        world.post("filter", filter_body(jobset_pod("train", i, gpus=8), NODE_NAMES))
    nodes = {i: world.planned_node(i) for i in indexes}
    results: dict[int, str] = {}

    def one(i: int) -> None:
        out = world.post("bind", bind_body(jobset_pod("train", i, gpus=8), nodes[i]))
        results[i] = out["Error"]

    threads = [threading.Thread(target=one, args=(i,)) for i in indexes]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return results


def test_the_barrier_binds_the_whole_gang_once_its_minimum_arrives(world: World) -> None:
    results = bind_all(world, [0, 1, 2, 3])
    assert results == {0: "", 1: "", 2: "", 3: ""}
    assert sorted(world.binder.bindings.values()) == NODE_NAMES
    [gang] = world.gangs()
    assert (gang["state"], gang["bound"]) == ("bound", 4)


def test_below_its_minimum_no_member_is_bound_and_all_fail_together() -> None:
    world = World(four_gpu_nodes() + train(), bind_timeout=0.3)
    results = bind_all(world, [0, 1, 2])
    assert set(results) == {0, 1, 2}
    assert all("ml/train" in err for err in results.values()), results
    assert world.binder.bindings == {}
    assert any(e.reason == "GangBindTimeout" for e in world.events.events())


def test_bind_is_idempotent_and_checks_the_uid(world: World) -> None:
    bind_all(world, [0, 1, 2, 3])
    pod = jobset_pod("train", 0, gpus=8)
    node = world.binder.bindings["ml/train-worker-0-0"]
    assert world.post("bind", bind_body(pod, node))["Error"] == ""
    pod["metadata"]["uid"] = "recreated"
    assert "recreated" in world.post("bind", bind_body(pod, node))["Error"]


def test_a_non_gang_pod_binds_at_once(world: World) -> None:
    world.store.upsert_pod(plain_pod("solo", gpus=1))
    assert world.post("bind", bind_body(plain_pod("solo", gpus=1), "n0"))["Error"] == ""
    assert world.binder.bindings == {"default/solo": "n0"}


def test_an_oversized_body_gets_an_error_result_not_a_413() -> None:
    world = World(four_gpu_nodes(), max_bytes=4096)
    body = filter_body(plain_pod("solo", gpus=1), [f"node-{i:05d}" for i in range(2000)])
    result = world.post("filter", body)
    assert "larger than the 4096-byte limit" in result["Error"]


def test_prioritize_scores_planned_nodes_highest(world: World) -> None:
    world.post("filter", filter_body(jobset_pod("train", 0, gpus=8), NODE_NAMES))
    scores = world.post("prioritize", filter_body(jobset_pod("train", 0, gpus=8), NODE_NAMES))
    assert sorted(s["Host"] for s in scores) == NODE_NAMES
    assert all(isinstance(s["Score"], int) and 0 <= s["Score"] <= 10 for s in scores)
    assert max(s["Score"] for s in scores) == 10


def test_metrics_count_requests_and_gangs(world: World) -> None:
    world.post("filter", filter_body(jobset_pod("train", 0, gpus=8), NODE_NAMES))
    text = world.client.get("/metrics").data.decode()
    assert 'muster_request_seconds_count{verb="filter"} 1.0' in text
    assert 'muster_gangs{state="planned"} 1.0' in text
    assert "muster_reserved_gpus 32.0" in text
    assert "muster_ready 1.0" in text


def _decisions(world: World) -> dict[tuple[str, str], float]:
    """``muster_decisions_total`` by (verb, outcome), read from ``/metrics``."""
    found: dict[tuple[str, str], float] = {}
    for line in world.client.get("/metrics").data.decode().splitlines():
        if line.startswith("muster_decisions_total{"):
            labels, value = line[len("muster_decisions_total{"):].split("} ")
            fields = dict(part.split("=") for part in labels.split(","))
            found[(fields["verb"].strip('"'), fields["outcome"].strip('"'))] = float(value)
    return found


def test_metrics_count_decisions_by_verb_and_outcome(world: World) -> None:
    bind_all(world, [0, 1, 2, 3])
    # A pod of the bound gang binds again (a retry), and a stranger asks to bind.
    node = world.binder.bindings["ml/train-worker-0-0"]
    world.post("bind", bind_body(jobset_pod("train", 0, gpus=8), node))
    world.post("bind", bind_body(plain_pod("ghost", gpus=1), "n0"))
    counts = _decisions(world)
    # The first member's filter planned the gang; the other three were pinned to the plan.
    assert counts[("filter", "planned")] == 1
    assert counts[("filter", "pinned")] == 3
    # Three binds waited at the barrier and were released by the one that completed it.
    assert counts[("bind", "released")] + counts[("bind", "bound")] == 4
    assert counts[("bind", "bound")] >= 1
    assert counts[("bind", "already_bound")] == 1
    assert counts[("bind", "unknown_pod")] == 1


def test_a_gang_gathering_longer_than_the_timeout_completes_and_held_members_are_parked(
) -> None:
    # Members reach bind 0.6 s apart with a 1 s timeout: 1.8 s from first to last. Each new
    # member restarts the barrier's clock, so the gang completes; the first member, held as
    # long as one request may wait, is parked and then bound by Muster itself.
    world = World(four_gpu_nodes() + train(), bind_timeout=1.0)
    for i in range(4):
        world.post("filter", filter_body(jobset_pod("train", i, gpus=8), NODE_NAMES))
    nodes = {i: world.planned_node(i) for i in range(4)}
    results: dict[int, str] = {}

    def one(i: int) -> None:
        results[i] = world.post("bind", bind_body(jobset_pod("train", i, gpus=8), nodes[i]))[
            "Error"]

    threads = []
    for i in range(4):
        threads.append(threading.Thread(target=one, args=(i,)))
        threads[-1].start()
        time.sleep(0.6)
    for t in threads:
        t.join(10)
    assert "held 1s while the gang gathers" in results[0]
    assert results[3] == ""
    deadline = time.time() + 10
    while len(world.binder.bindings) < 4 and time.time() < deadline:
        time.sleep(0.05)
    assert sorted(world.binder.bindings.values()) == sorted(nodes.values())
    decisions = _decisions(world)
    assert decisions[("bind", "parked")] >= 1 and decisions[("bind", "parked_bound")] >= 1
    assert ("bind", "timed_out") not in decisions


def test_metrics_count_a_barrier_timeout_for_every_held_member() -> None:
    world = World(four_gpu_nodes() + train(), bind_timeout=0.3)
    bind_all(world, [0, 1, 2])
    assert _decisions(world)[("bind", "timed_out")] == 3


def test_members_beyond_the_threads_that_may_hold_binds_are_parked_then_bound() -> None:
    # 4 threads keep 2 free for filters: at most 2 binds are held at the barrier. The 3rd
    # member's bind fails at once (kube-scheduler would retry it) but it stays counted; the
    # 4th completes the gang, and Muster binds the parked member itself. No thread waits for
    # a gang larger than the pool, and no member binds before the gang's minimum is there.
    world = World(four_gpu_nodes() + train())
    world.app = create_app(Settings(bind_timeout=5.0, threads=4), world.store, time.time,
                           binder=world.binder, events=world.events)
    world.client = world.app.test_client()
    for i in range(4):
        world.post("filter", filter_body(jobset_pod("train", i, gpus=8), NODE_NAMES))
    nodes = {i: world.planned_node(i) for i in range(4)}
    results: dict[int, str] = {}

    def bind(i: int) -> None:
        results[i] = world.post("bind", bind_body(jobset_pod("train", i, gpus=8),
                                                  nodes[i]))["Error"]

    held = [threading.Thread(target=bind, args=(i,)) for i in (0, 1)]
    for t in held:
        t.start()
    assert wait_for(lambda: world.app.extensions["muster.decider"].binds_waiting() == 2)
    bind(2)
    assert "Muster binds this pod when its gang completes" in results[2]
    assert world.binder.bindings == {}  # parked, and nothing bound below the minimum
    bind(3)
    for t in held:
        t.join(10)
    assert (results[0], results[1], results[3]) == ("", "", "")
    assert wait_for(lambda: len(world.binder.bindings) == 4)
    assert world.binder.bindings["ml/train-worker-0-2"] == nodes[2]
    counts = _decisions(world)
    assert counts[("bind", "parked")] == 1 and counts[("bind", "parked_bound")] == 1


def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


def test_a_refused_bind_says_why_to_kube_scheduler_and_in_the_log(
        caplog: pytest.LogCaptureFixture) -> None:
    solo = plain_pod("solo", gpus=8)
    world = World(four_gpu_nodes() + train(workers=2) + [solo])
    planned = world.post("filter", filter_body(jobset_pod("train", 0, gpus=8),
                                               NODE_NAMES))["NodeNames"]
    # The lone pod passed filter before the gang was planned; its bind comes after.
    with caplog.at_level(logging.INFO, logger="muster.service"):
        error = world.post("bind", bind_body(solo, planned[0]))["Error"]
    assert "reserved for gang ml/train" in error, error
    [line] = [r.getMessage() for r in caplog.records if "pod=default/solo" in r.getMessage()]
    assert line.startswith(f"verb=bind pod=default/solo node={planned[0]} outcome=rejected reason=")
    assert "reserved for gang ml/train" in line
