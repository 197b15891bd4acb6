"""With leader election only the leader decides. A standby answers every verb with a
well-formed refusal and reports not ready; a new leader is ready only once it has rebuilt
its ledger from the cluster (a gang half bound before the takeover is completed, not planned
anew); a leader that loses the lease fails the binds it holds and posts no Binding after."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import pytest

from extender.server.app import create_app
from extender.server.leading import STANDBY_REASON, LeaderGate, Role
from extender.server.metrics import Metrics
from extender.server.service import GangService
from extender.server.settings import Settings
from extender.server.wire import parse_binding_args, parse_extender_args, parse_preemption_args
from extender.state.memory import MemoryBinder
from extender.state.ports import MemoryEvents
from extender.state.store import StateStore
from tests.unit.server.builders import (
    Clock,
    bind_body,
    filter_body,
    gpu_node,
    job_of,
    jobset,
    jobset_pod,
    store_of,
)

NODES = ["n0", "n1", "n2"]


class FakeLeadership:
    """Leadership a test hands out and takes back; ``leading()`` can also just run out."""

    identity = "me"

    def __init__(self) -> None:
        self.lease_valid = False
        self.current = "other"
        self._subs: list[Callable[[bool], None]] = []

    def leading(self) -> bool:
        return self.lease_valid

    def holder(self) -> str:
        return self.current

    def subscribe(self, on_change: Callable[[bool], None]) -> None:
        self._subs.append(on_change)

    def change(self, leading: bool) -> None:
        self.lease_valid = leading
        self.current = self.identity if leading else "other"
        for notify in self._subs:
            notify(leading)


class Rig:
    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.clock = Clock()
        self.store: StateStore = store_of([*(gpu_node(n, gpus=8) for n in NODES),
                                           jobset("train", workers=2, gpus=8),
                                           job_of("train"), *pods])
        self.binder = MemoryBinder(self.store)
        self.leadership = FakeLeadership()
        self.metrics = Metrics()
        gate: list[LeaderGate] = []

        def deciding() -> bool:  # looked up at each call: a test may replace it
            return gate[0].deciding()

        self.svc = GangService(self.store, settings=Settings(bind_timeout=30.0, plan_ttl=120.0,
                                                             threads=16),
                               clock=self.clock, binder=self.binder, events=MemoryEvents(),
                               may_act=deciding)
        self.gate = LeaderGate(self.svc, self.leadership, metrics=self.metrics)
        gate.append(self.gate)
        self.pool = ThreadPoolExecutor(max_workers=4)

    def lead(self) -> None:
        self.leadership.change(True)
        deadline = time.monotonic() + 5
        while self.gate.role is not Role.LEADING:
            assert time.monotonic() < deadline, "never took over"
            time.sleep(0.01)

    def filter(self, pod: dict[str, Any], nodes: list[str] = NODES) -> Any:
        return self.gate.filter(parse_extender_args(filter_body(pod, nodes)))

    def bind(self, pod: dict[str, Any], node: str) -> Any:
        return self.gate.bind(parse_binding_args(bind_body(pod, node)))

    def node_of(self, pod: dict[str, Any]) -> str | None:
        stored = self.store.pod(pod["metadata"]["namespace"], pod["metadata"]["name"]) or {}
        node: str | None = (stored.get("spec") or {}).get("nodeName")
        return node


@pytest.fixture
def rig() -> Iterator[Rig]:
    r = Rig([jobset_pod("train", 0, gpus=8), jobset_pod("train", 1, gpus=8)])
    yield r
    r.clock.now += 10_000
    r.svc.housekeep()
    r.gate.close()
    r.pool.shutdown(wait=True, cancel_futures=True)


def test_a_standby_refuses_every_verb_well_formed_and_is_not_ready(rig: Rig) -> None:
    pod = jobset_pod("train", 0, gpus=8)
    answer = rig.filter(pod)
    assert answer["NodeNames"] == [] and answer["Error"] == ""
    assert answer["FailedNodes"] == {}
    assert set(answer["FailedAndUnresolvableNodes"]) == set(NODES)
    assert all(r.startswith(STANDBY_REASON) for r in
               answer["FailedAndUnresolvableNodes"].values())
    assert STANDBY_REASON in rig.bind(pod, "n0")["Error"]
    assert rig.node_of(pod) is None
    preempt = orjson.dumps({"Pod": pod, "NodeNameToMetaVictims": {
        "n0": {"Pods": [{"UID": "victim"}], "NumPDBViolations": 0}}})
    assert rig.gate.preempt(parse_preemption_args(preempt)) == {"NodeNameToMetaVictims": {}}
    assert rig.gate.prioritize(parse_extender_args(filter_body(pod, NODES))) == []
    ready, reason = rig.gate.readiness()
    assert not ready and "standby" in reason and "other" in reason
    # Nothing was decided: the standby's session never saw the pod.
    assert rig.svc.session.ledger.reservations() == []


def test_a_new_leader_is_ready_after_rebuilding_and_then_decides(rig: Rig) -> None:
    rig.lead()
    assert rig.gate.readiness() == (True, rig.svc.readiness()[1])
    answer = rig.filter(jobset_pod("train", 0, gpus=8))
    assert answer["NodeNames"] and answer["Error"] == ""
    assert "muster_leader 1.0" in rig.metrics.render().decode()


def test_pods_refused_as_standby_are_requeued_on_takeover() -> None:
    r = Rig([jobset_pod("train", 0, gpus=8), jobset_pod("train", 1, gpus=8)])
    requeued: list[str] = []
    r.svc._requeuer.requeue = (  # type: ignore[method-assign]
        lambda pods, reason: requeued.extend(p.key for p in pods))
    r.filter(jobset_pod("train", 0, gpus=8))
    r.lead()
    assert requeued == ["ml/train-worker-0-0"]
    r.gate.close()


def test_a_gang_half_bound_before_the_takeover_is_completed_by_the_new_leader() -> None:
    # The old leader bound member 0 to n1 and died before binding member 1.
    bound0 = jobset_pod("train", 0, gpus=8, node="n1")
    r = Rig([bound0, jobset_pod("train", 1, gpus=8)])
    r.lead()
    member1 = jobset_pod("train", 1, gpus=8)
    passed = r.filter(member1)["NodeNames"]
    assert passed and "n1" not in passed
    # The rebuilt ledger admits the gang: the late member binds at once, not held.
    assert r.bind(member1, passed[0])["Error"] == ""
    assert r.node_of(member1) == passed[0]
    r.gate.close()


def test_losing_the_lease_fails_held_binds_and_posts_no_binding(rig: Rig) -> None:
    rig.lead()
    w0 = jobset_pod("train", 0, gpus=8)
    [first] = rig.filter(w0)["NodeNames"]
    held = rig.pool.submit(rig.bind, w0, first)
    deadline = time.monotonic() + 5
    while not rig.svc.binds_waiting():
        assert time.monotonic() < deadline and not held.done(), "the bind was never held"
        time.sleep(0.005)
    rig.leadership.change(False)
    answer = held.result(timeout=5)  # promptly, not after the 30s bind timeout
    assert "leadership changed" in answer["Error"]
    assert rig.node_of(w0) is None
    assert not rig.gate.readiness()[0]
    assert rig.metrics.leader_transitions.labels(to="standby")._value.get() == 1


def test_a_leader_whose_lease_runs_out_stops_deciding_before_it_is_told(rig: Rig) -> None:
    rig.lead()
    rig.leadership.lease_valid = False  # renew deadline passed; the elector has not said so
    w0 = jobset_pod("train", 0, gpus=8)
    assert set(rig.filter(w0)["FailedAndUnresolvableNodes"]) == set(NODES)
    assert rig.bind(w0, "n0")["Error"]
    assert rig.node_of(w0) is None
    assert not rig.gate.readiness()[0]


def test_a_bind_past_the_barrier_is_not_posted_once_leadership_is_gone(rig: Rig) -> None:
    rig.lead()
    w0, w1 = jobset_pod("train", 0, gpus=8), jobset_pod("train", 1, gpus=8)
    [a] = rig.filter(w0)["NodeNames"]
    [b] = rig.filter(w1)["NodeNames"]  # the plan's other node: w0 claimed its own
    posted: list[str] = []
    original = rig.binder.bind

    def lose_then_bind(pod: Any, node: str) -> None:
        posted.append(pod.key)
        original(pod, node)

    rig.binder.bind = lose_then_bind  # type: ignore[method-assign]
    held = rig.pool.submit(rig.bind, w0, a)
    deadline = time.monotonic() + 5
    while not rig.svc.binds_waiting():
        assert time.monotonic() < deadline
        time.sleep(0.005)
    # Leadership runs out between the barrier's release and the Binding: w1 completes the
    # gang, but neither member may be posted by a replica that no longer leads.
    gate_deciding = rig.gate.deciding
    calls = threading.Event()

    def deciding_once() -> bool:
        if calls.is_set():
            return False
        calls.set()
        return gate_deciding()

    rig.gate.deciding = deciding_once  # type: ignore[method-assign]
    answer = rig.bind(w1, b)
    assert "no longer the leader" in answer["Error"]
    assert "no longer the leader" in held.result(timeout=5)["Error"]
    assert posted == []


def test_the_app_reports_a_standby_not_ready_on_readyz() -> None:
    store = store_of([gpu_node("n0")])
    leadership = FakeLeadership()
    app = create_app(Settings(), store, Clock(), leadership=leadership)
    client = app.test_client()
    response = client.get("/readyz")
    assert response.status_code == 503 and "standby" in response.get_json()["reason"]
    standby = client.get("/metrics").data
    assert b"muster_leader 0.0" in standby
    # Its view of the cluster is trusted all the same: no MusterNotReady for a standby.
    assert b"muster_ready 1.0" in standby
    leadership.change(True)
    deadline = time.monotonic() + 5
    while client.get("/readyz").status_code != 200:
        assert time.monotonic() < deadline, client.get("/readyz").get_json()
        time.sleep(0.01)
    metrics = client.get("/metrics").data
    assert b"muster_leader 1.0" in metrics
    assert b'muster_leader_transitions_total{to="leader"} 1.0' in metrics


def test_a_replica_that_no_longer_leads_evicts_no_preemption_victim() -> None:
    from extender.core.decide.effects import Evict  # noqa: PLC0415
    from extender.core.model.values import GangKey  # noqa: PLC0415
    from extender.state.ports import MemoryEvictor, PodRef  # noqa: PLC0415

    leading = [True]
    evictor = MemoryEvictor()
    svc = GangService(store_of([gpu_node("n0")]), settings=Settings(), clock=Clock(),
                      binder=MemoryBinder(store_of([])), events=MemoryEvents(),
                      evictor=evictor, may_act=lambda: leading[0])
    victims = Evict(GangKey("ml/train"), (PodRef("ml", "low-0", "uid-low-0"),), "preempted")
    with svc._cond:
        svc._apply([victims])
    assert [p.name for p, _ in evictor.evicted()] == ["low-0"]
    leading[0] = False
    with svc._cond:
        svc._apply([victims])
    assert len(evictor.evicted()) == 1
