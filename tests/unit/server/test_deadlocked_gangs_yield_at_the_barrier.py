"""Gangs held at the bind barrier that wait for each other: housekeeping makes one yield.

Two JobSets of 2 x 8-GPU workers are planned on four 8-GPU nodes and each has its first member
held at the barrier. The two nodes planned for their second members go. Each second member now
needs the node the other gang's held member sits on: without a yield both barriers run to the
timeout and fail together. The younger gang yields at once; the older one completes.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from extender.server.service import GangService
from extender.server.settings import Settings
from extender.server.wire import parse_binding_args, parse_extender_args
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
    plan_nodes,
    store_of,
)

NODES = ["n0", "n1", "n2", "n3"]


def _workload(name: str, created: str) -> list[dict[str, Any]]:
    js = jobset(name, workers=2, gpus=8)
    js["metadata"]["creationTimestamp"] = created
    return [js, job_of(name), jobset_pod(name, 0, gpus=8), jobset_pod(name, 1, gpus=8)]


def _filter(svc: GangService, pod: dict[str, Any], nodes: list[str]) -> list[str]:
    return list(svc.filter(parse_extender_args(filter_body(pod, nodes)))["NodeNames"] or [])


def test_the_younger_of_two_deadlocked_gangs_yields_and_the_older_completes() -> None:
    clock = Clock()
    store: StateStore = store_of([*(gpu_node(n, gpus=8) for n in NODES),
                                  *_workload("alpha", "2026-12-01T10:00:00Z"),
                                  *_workload("zulu", "2026-12-01T11:00:00Z")])
    events = MemoryEvents()
    counted: list[tuple[str, str]] = []
    svc = GangService(store, settings=Settings(bind_timeout=60.0, plan_ttl=120.0, threads=16),
                      clock=clock, binder=MemoryBinder(store), events=events,
                      count=lambda verb, outcome: counted.append((verb, outcome)))
    held: dict[str, str] = {}
    planned: dict[str, str] = {}
    for name in ("alpha", "zulu"):
        # The first member plans its gang on two nodes and is sent to one of them.
        nodes = _filter(svc, jobset_pod(name, 0, gpus=8), NODES)
        plan = plan_nodes(svc.inspect_gangs(), f"ml/{name}")
        assert len(nodes) == 1 and len(plan) == 2 and nodes[0] in plan
        held[name] = nodes[0]
        [planned[name]] = set(plan) - {held[name]}
    pool = ThreadPoolExecutor(max_workers=3)
    try:
        waiting = {name: pool.submit(svc.bind, parse_binding_args(
            bind_body(jobset_pod(name, 0, gpus=8), held[name]))) for name in held}
        # The nodes planned for both second members go (lost, or taken by another scheduler).
        for name in planned.values():
            store.apply("v1/Node", "DELETED", gpu_node(name, gpus=8))
        clock.now += 1
        svc.housekeep()
        zulu = waiting["zulu"].result(timeout=10)
        assert "gang ml/zulu yields to end a deadlock at the bind barrier" in zulu["Error"]
        assert ("bind", "yielded") in counted
        assert any(e.reason == "GangYielded" and e.pod.name == "zulu-worker-0-1"
                   for e in events.events())
        # The older gang's second member now has the node the younger one let go.
        assert _filter(svc, jobset_pod("alpha", 1, gpus=8), list(held.values())) == [
            held["zulu"]]
        done = svc.bind(parse_binding_args(bind_body(jobset_pod("alpha", 1, gpus=8),
                                                     held["zulu"])))
        assert done["Error"] == ""
        assert waiting["alpha"].result(timeout=10)["Error"] == ""
    finally:
        clock.now += 3600  # whatever happened, time every held bind out so the threads end
        svc.housekeep()
        pool.shutdown()

    def node_of(name: str) -> str | None:
        pod = store.pod("ml", name)
        assert pod is not None
        return pod["spec"].get("nodeName")  # type: ignore[no-any-return]

    assert node_of("alpha-worker-0-0") == held["alpha"]
    assert node_of("alpha-worker-0-1") == held["zulu"]
    assert node_of("zulu-worker-0-0") is None and node_of("zulu-worker-0-1") is None
