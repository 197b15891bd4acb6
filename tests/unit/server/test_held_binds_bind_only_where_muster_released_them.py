"""A member held at the bind barrier binds to the node Muster released it to, or not at all.

Races a chaos run found: two bind requests for one member held at once (kube-scheduler gave up
on the first and retried elsewhere) each bound to the node *it* named, so an 8-GPU node ended
with 16 GPUs; a member held while its node was deleted was bound to the deleted node; a deleted
pod's held request failed only at its timeout, when a newer pod of the same name existed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest

from extender.core.decide.decisions import withdraw
from extender.core.decide.effects import Effect, Step
from extender.core.model.values import NodeName
from extender.server.service import GangService
from extender.server.settings import Settings
from extender.server.wire import ExtenderBindingResultJSON, parse_binding_args, parse_extender_args
from extender.state.memory import MemoryBinder
from extender.state.ports import MemoryEvents, PodRef
from extender.state.store import StateStore
from tests.unit.server.builders import (
    Clock,
    bind_body,
    filter_body,
    gpu_node,
    job_of,
    jobset,
    jobset_pod,
    plan_nodes,
    store_of,
)

NODES = ["n0", "n1", "n2"]
W0, W1 = jobset_pod("train", 0, gpus=8), jobset_pod("train", 1, gpus=8)


class Rig:
    def __init__(self) -> None:
        self.clock = Clock()
        self.store: StateStore = store_of([*(gpu_node(n, gpus=8) for n in NODES),
                                           jobset("train", workers=2, gpus=8), job_of("train"),
                                           W0, W1])
        self.counted: list[tuple[str, str]] = []
        self.events = MemoryEvents()
        self.svc = GangService(self.store, settings=Settings(bind_timeout=30.0, plan_ttl=120.0,
                                                             threads=16),
                               clock=self.clock, binder=MemoryBinder(self.store),
                               events=self.events,
                               count=lambda verb, outcome: self.counted.append((verb, outcome)))
        self.pool = ThreadPoolExecutor(max_workers=4)

    def filter(self, pod: dict[str, Any], nodes: list[str]) -> list[str]:
        answer = self.svc.filter(parse_extender_args(filter_body(pod, nodes)))
        return list(answer["NodeNames"] or [])

    def planned(self) -> tuple[str, str]:
        """Filter the first worker, which plans the gang on two nodes: (the node it is sent
        to, the plan's other node)."""
        [first] = self.filter(W0, NODES)
        [other] = set(plan_nodes(self.svc.inspect_gangs(), "ml/train")) - {first}
        return first, other

    def bind(self, pod: dict[str, Any], node: str) -> ExtenderBindingResultJSON:
        return self.svc.bind(parse_binding_args(bind_body(pod, node)))

    def hold(self, pod: dict[str, Any], node: str) -> Future[ExtenderBindingResultJSON]:
        """Send a bind that the barrier holds; return once it is held (for that node)."""
        future = self.pool.submit(self.bind, pod, node)
        deadline = time.monotonic() + 5
        uid = pod["metadata"]["uid"]
        while (self.held_node(uid) != node and not future.done()):
            assert time.monotonic() < deadline, "the bind was never held"
            time.sleep(0.005)
        return future

    def held_node(self, uid: str) -> str | None:
        """The node of the bind request the session holds open for ``uid``, if any."""
        with self.svc._cond:
            hold = self.svc.session.held.by_pod.get(uid)
            return None if hold is None else str(hold.node)

    def held_ticket(self, uid: str) -> int:
        with self.svc._cond:
            hold = self.svc.session.held.by_pod.get(uid)
            return 0 if hold is None else hold.ticket

    def node_of(self, pod: dict[str, Any]) -> str | None:
        stored = self.store.pod(pod["metadata"]["namespace"], pod["metadata"]["name"])
        assert stored is not None
        node: str | None = (stored.get("spec") or {}).get("nodeName")
        return node

    def gpus_bound(self) -> dict[str, int]:
        snapshot = self.store.snapshot()
        used: dict[str, int] = {}
        for pod in snapshot.pods.values():
            if pod.node_name is not None:
                gpus = pod.shape.requests.get("nvidia.com/gpu", 0) // 1000
                used[pod.node_name] = used.get(pod.node_name, 0) + gpus
        return used


@pytest.fixture
def rig() -> Iterator[Rig]:
    r = Rig()
    yield r
    # Time out whatever is still held, so no request thread outlives the test.
    r.clock.now += 10_000
    r.svc.housekeep()
    r.pool.shutdown(wait=True, cancel_futures=True)


def test_a_retried_bind_to_another_node_supersedes_the_held_one_and_binds_where_charged(
        rig: Rig) -> None:
    first, second = rig.planned()
    spare = next(n for n in NODES if n not in (first, second))
    earlier = rig.hold(W0, first)
    retry = rig.hold(W0, spare)  # kube-scheduler gave up on the first request, tried elsewhere
    assert earlier.result(timeout=5)["Error"] == (
        "a newer bind request for pod ml/train-worker-0-0 replaced this one")
    assert rig.bind(W1, second)["Error"] == ""
    assert retry.result(timeout=5)["Error"] == ""
    assert (rig.node_of(W0), rig.node_of(W1)) == (spare, second)
    assert max(rig.gpus_bound().values()) <= 8
    assert ("bind", "superseded") in rig.counted


def test_a_member_held_while_its_node_is_deleted_is_never_bound_there(rig: Rig) -> None:
    first, _ = rig.planned()
    held = rig.hold(W0, first)
    rig.store.apply("v1/Node", "DELETED", gpu_node(first, gpus=8))
    rig.clock.now += 1
    rig.svc.housekeep()
    failed = held.result(timeout=5)["Error"]
    assert failed.startswith(f"gang ml/train: node {first} was deleted while member "
                             "ml/train-worker-0-0 was held at the bind barrier")
    assert rig.node_of(W0) is None and rig.node_of(W1) is None
    assert any(e.reason == "GangNodeLost" for e in rig.events.events())


def test_a_deleted_pods_held_bind_fails_at_once_not_at_its_timeout(rig: Rig) -> None:
    first, _ = rig.planned()
    held = rig.hold(W0, first)
    rig.store.apply("v1/Pod", "DELETED", W0)
    rig.clock.now += 1
    rig.svc.housekeep()
    assert held.result(timeout=5)["Error"] == (
        "pod uid uid-train-0 was deleted while its bind was held; not binding it")
    assert rig.svc.binds_waiting() == 0


def _ref(pod: dict[str, Any]) -> PodRef:
    meta = pod["metadata"]
    return PodRef(meta["namespace"], meta["name"], meta["uid"])


def test_a_retry_arriving_between_release_and_wake_up_neither_steals_nor_strands_it(
        rig: Rig) -> None:
    first, second = rig.planned()
    spare = next(n for n in NODES if n not in (first, second))
    held = rig.hold(W0, first)
    # Holding the lock keeps the held request asleep: W1 completes the gang and releases W0
    # to ``first``, then kube-scheduler's retry of W0 (elsewhere) comes in before it wakes.
    with rig.svc._cond:
        completing, _ = rig.svc._pass_barrier(_ref(W1), NodeName(second))
        assert (completing.step, completing.outcome) == (Step.BIND, "bound")
        retry, _ = rig.svc._pass_barrier(_ref(W0), NodeName(spare))
    assert (retry.outcome, retry.reason) == (
        "rejected", f"pod ml/train-worker-0-0 is being bound to {first} by an earlier request; "
                    "not binding it again")
    assert held.result(timeout=5)["Error"] == ""  # the released request binds where charged
    assert rig.node_of(W0) == first
    assert rig.svc.session.held.released == {} and rig.svc.session.held.by_pod == {}


def test_a_retry_does_not_inherit_the_failure_meant_for_the_request_it_replaces(
        rig: Rig) -> None:
    first, _ = rig.planned()
    spare = next(n for n in NODES if n != first)
    uid = W0["metadata"]["uid"]
    held = rig.hold(W0, first)
    with rig.svc._cond:
        # The gang is withdrawn (its held member fails) while the held request sleeps...
        hold = rig.svc.session.held.by_pod[uid]
        gang, earlier = hold.gang, hold.ticket
        assert gang is not None
        out: list[Effect] = []
        gone = replace(withdraw(gang, ledger=rig.svc.session.ledger), reason="withdrawn")
        rig.svc.session.binds.fail_held(gone, rig.store.snapshot(), out)
        rig.svc._apply(out)
        # ...and kube-scheduler's retry of W0 comes in, perhaps before it wakes.
        retry = rig.pool.submit(rig.bind, W0, spare)
        time.sleep(0.05)  # let the retry reach the lock first, most of the time
    # The held request fails either way: with its gang, or replaced by the retry.
    assert held.result(timeout=5)["Error"] in (
        "withdrawn", "a newer bind request for pod ml/train-worker-0-0 replaced this one")
    deadline = time.monotonic() + 5
    while rig.held_ticket(uid) in (earlier, 0):
        assert time.monotonic() < deadline, "the retry was never held"
        assert not retry.done(), retry.result()  # not failed with the old request's reason
        time.sleep(0.005)
    assert not retry.done()
    assert rig.svc.session.held.failed == {}
    rig.clock.now += 31
    rig.svc.housekeep()
    assert "did not reach bind in time" in retry.result(timeout=5)["Error"]
