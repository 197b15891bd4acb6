"""A workload beyond the per-workload limits is refused whole: its pods wait and say why, and
one Warning event on the workload itself (``kubectl describe jobset``) says it once."""

from __future__ import annotations

import time

from extender.core.workloads.workload import WorkloadLimits
from extender.files.catalog import packaged_catalog
from extender.server.service import GangService
from extender.server.settings import Settings
from extender.server.wire import parse_extender_args
from extender.state.build import CatalogSnapshots
from extender.state.memory import MemoryBinder
from extender.state.ports import MemoryEvents
from extender.state.store import DESCRIPTORS, NODES, PODS, StateStore
from tests.unit.server.builders import filter_body, gpu_node, job_of, jobset, jobset_pod


def _service(limit: int) -> tuple[GangService, MemoryEvents]:
    store = StateStore(CatalogSnapshots(packaged_catalog(), WorkloadLimits(pods=limit)),
                       expected=[NODES, PODS, DESCRIPTORS])
    store.load([gpu_node("n0"), gpu_node("n1"), jobset("train", workers=3, gpus=1),
                job_of("train"), *(jobset_pod("train", i, gpus=1) for i in range(3))])
    events = MemoryEvents()
    settings = Settings(max_workload_pods=limit)
    return GangService(store, settings=settings, clock=time.time, binder=MemoryBinder(store),
                       events=events), events


def test_a_workload_over_the_pod_limit_waits_whole_and_says_why() -> None:
    svc, events = _service(limit=2)
    for i in range(3):
        answer = svc.filter(parse_extender_args(filter_body(jobset_pod("train", i, gpus=1),
                                                            ["n0", "n1"])))
        assert answer["NodeNames"] == []  # never placed as lone pods
        assert answer["FailedNodes"]["n0"].startswith(
            f"pod ml/train-worker-0-{i} waits: its JobSet ml/train cannot be scheduled: 3 "
            "pods is more than the limit of 2 pods per workload")
    [event] = events.workload_events()  # once, not once per filter
    assert (event.kind, event.name, event.reason) == ("JobSet", "train", "WorkloadRefused")
    assert "more than the limit of 2 pods per workload" in event.message


def test_the_same_workload_under_the_limit_is_gang_scheduled_and_no_refusal_is_told() -> None:
    svc, events = _service(limit=3)
    answer = svc.filter(parse_extender_args(filter_body(jobset_pod("train", 0, gpus=1),
                                                        ["n0", "n1"])))
    assert answer["NodeNames"]
    # The workload hears its gang was planned, and nothing about a refusal.
    assert [e.reason for e in events.workload_events()] == ["GangPlanned"]
