"""Pods Muster turned away are requeued when their obstacle goes without a cluster event.

kube-scheduler retries an extender-rejected pod only on a node or pod change (or after five
minutes): a plan that expires, a workload the informers observe late, or cluster state
trusted again are invisible to it, so the service must ask for the retry itself.
"""

from __future__ import annotations

import orjson

from extender.server.service import GangService
from extender.server.settings import Settings
from extender.server.wire import parse_extender_args
from extender.state.memory import MemoryBinder
from extender.state.ports import MemoryEvents, MemoryRequeuer
from extender.state.store import NODES, StateStore
from tests.unit.server.builders import (
    Clock,
    filter_body,
    gpu_node,
    job_of,
    jobset,
    jobset_pod,
    plain_pod,
    store_of,
)


def service(store: StateStore, clock: Clock) -> tuple[GangService, MemoryRequeuer]:
    requeuer = MemoryRequeuer()
    svc = GangService(store, settings=Settings(bind_timeout=2.0, plan_ttl=30.0), clock=clock,
                      binder=MemoryBinder(store), events=MemoryEvents(), requeuer=requeuer)
    return svc, requeuer


def passed(svc: GangService, pod: dict[str, object], nodes: list[str]) -> list[str]:
    result = svc.filter(parse_extender_args(filter_body(pod, nodes)))
    return list(result["NodeNames"] or [])


def requeued(requeuer: MemoryRequeuer) -> list[tuple[str, str]]:
    return [(ref.key, reason) for ref, reason in requeuer.requeued()]


def test_a_pod_kept_off_a_plans_capacity_is_requeued_when_the_plan_expires() -> None:
    clock = Clock()
    store = store_of([gpu_node("n0", gpus=8), jobset("train", workers=2, gpus=4),
                      job_of("train"), jobset_pod("train", 0, gpus=4)])
    svc, requeuer = service(store, clock)
    # The first member plans the whole gang: all 8 GPUs of n0 are reserved for it.
    assert passed(svc, jobset_pod("train", 0, gpus=4), ["n0"]) == ["n0"]
    assert passed(svc, plain_pod("solo", gpus=1), ["n0"]) == []
    assert svc.housekeep() == 0  # nothing changed yet
    # The second member never comes; the plan's TTL passes with no request at all.
    clock.now += 31
    assert svc.housekeep() == 1
    assert requeued(requeuer) == [("default/solo",
                                   "a gang plan ended and released its capacity")]
    # Requeued once: a second round has nothing to do until the pod is turned away again.
    assert svc.housekeep() == 0
    assert passed(svc, plain_pod("solo", gpus=1), ["n0"]) == ["n0"]


def test_a_pod_whose_workload_was_not_observed_is_requeued_once_it_is() -> None:
    clock = Clock()
    store = store_of([gpu_node("n0", gpus=8), jobset_pod("train", 0, gpus=4)])
    svc, requeuer = service(store, clock)
    assert passed(svc, jobset_pod("train", 0, gpus=4), ["n0"]) == []
    assert svc.housekeep() == 0
    # The JobSet and its Job reach Muster's informers after the pod reached the scheduler.
    store.apply("jobset.x-k8s.io/v1alpha2/JobSet", "ADDED", jobset("train", workers=1, gpus=4))
    store.apply("batch/v1/Job", "ADDED", job_of("train"))
    assert svc.housekeep() == 1
    assert requeued(requeuer) == [("ml/train-worker-0-0", "its workload is observed now")]
    assert passed(svc, jobset_pod("train", 0, gpus=4), ["n0"]) == ["n0"]


def test_pods_turned_away_while_the_state_was_untrusted_are_requeued_when_it_is() -> None:
    clock = Clock()
    store = store_of([gpu_node("n0", gpus=8)])
    svc, requeuer = service(store, clock)
    store.set_health(NODES, healthy=False, problem="watch broken: connection refused")
    body = orjson.loads(filter_body(plain_pod("solo", gpus=1), ["n0"]))
    assert "not trusted" in svc.filter(parse_extender_args(orjson.dumps(body)))["Error"]
    assert svc.housekeep() == 0  # still untrusted: a retry now would fail the same way
    store.replace(NODES, [gpu_node("n0", gpus=8)])  # relisted
    assert svc.housekeep() == 1
    assert requeued(requeuer) == [("default/solo", "the cluster state is trusted again")]


def test_a_bound_or_deleted_pod_is_forgotten_not_requeued() -> None:
    clock = Clock()
    store = store_of([gpu_node("n0", gpus=8), jobset("train", workers=2, gpus=4),
                      job_of("train"), jobset_pod("train", 0, gpus=4)])
    svc, requeuer = service(store, clock)
    passed(svc, jobset_pod("train", 0, gpus=4), ["n0"])
    assert passed(svc, plain_pod("solo", gpus=1), ["n0"]) == []
    store.apply("v1/Pod", "DELETED", plain_pod("solo", gpus=1))
    clock.now += 31
    assert svc.housekeep() == 0
    assert requeued(requeuer) == []
