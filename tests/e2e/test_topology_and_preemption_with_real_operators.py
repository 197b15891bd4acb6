"""Topology domains and gang-level preemption, with the real JobSet and LWS controllers.

Eight KWOK nodes of 8 GPUs in two racks of four (label ``muster.dev/rack``). No test creates
a pod: ``kubectl apply`` of the workloads is all; the operators make the pods, Muster and
kube-scheduler place them, KWOK runs them and completes their deletions.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import yaml

from extender.kube.client import NotFound
from extender.sandbox.nodes import RACK_LABEL
from extender.sandbox.sandbox import Sandbox
from tests.e2e.conftest import bound, describe, pods_in, scheduled_message, wait_until
from tests.e2e.test_real_pod_lifecycle import kubectl

pytestmark = pytest.mark.e2e
REAL_OPERATORS = ("jobset", "lws")
NODES = 8  # two racks of 4 x 8 GPUs

EXCLUSIVE = "leaderworkerset.sigs.k8s.io/exclusive-topology"
GROUP = "leaderworkerset.sigs.k8s.io/group-index"
JOBSET = "jobset.sigs.k8s.io/jobset-name"


def apply(box: Sandbox, obj: dict[str, Any]) -> None:
    kubectl(box, "apply", "-f", "-", stdin=yaml.safe_dump(obj))


def gpu_container(gpus: int = 8) -> dict[str, Any]:
    return {"name": "main", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": gpus}}}


def exclusive_lws(namespace: str, name: str, *, replicas: int, size: int) -> dict[str, Any]:
    """An LWS whose every group must run alone in one rack (LWS exclusive-topology)."""
    pod = {"spec": {"containers": [gpu_container()]}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": {EXCLUSIVE: RACK_LABEL}},
            "spec": {"replicas": replicas,
                     "leaderWorkerTemplate": {"size": size, "leaderTemplate": pod,
                                              "workerTemplate": pod}}}


def node_racks(box: Sandbox) -> dict[str, str]:
    nodes = box.connection().request("GET", "/api/v1/nodes")["items"]
    return {n["metadata"]["name"]: n["metadata"]["labels"][RACK_LABEL] for n in nodes}


def live(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Bound pods not being deleted."""
    return [p for p in bound(pods) if not p["metadata"].get("deletionTimestamp")]


def events(box: Sandbox, namespace: str, reason: str) -> list[str]:
    items = box.connection().request("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    return [e.get("message", "") for e in items if e.get("reason") == reason]


def test_an_exclusive_topology_lws_group_no_rack_holds_waits_whole_and_names_the_racks(
        real_box: Sandbox, real_ns: str) -> None:
    """One group of 5 x 8 GPUs: 40 GPUs fit the cluster (64 free) but no rack (32 each). The
    LWS controller creates an exclusive group's workers only once its leader is scheduled,
    so the leader alone is there: it waits, bound nowhere, and says why."""
    conn = real_box.connection()
    apply(real_box, exclusive_lws(real_ns, "wide", replicas=1, size=5))
    assert wait_until(lambda: bool(pods_in(conn, real_ns)) and all(
        "rack" in scheduled_message(p) for p in pods_in(conn, real_ns)), timeout=60), \
        [(p["metadata"]["name"], scheduled_message(p)) for p in pods_in(conn, real_ns)]
    assert not wait_until(lambda: bool(bound(pods_in(conn, real_ns))), timeout=8), \
        describe(conn, real_ns)
    why = scheduled_message(pods_in(conn, real_ns)[0])
    assert "gang" in why and "no single muster.dev/rack domain holds it" in why, why


def priority_class(box: Sandbox, name: str, value: int) -> None:
    with contextlib.suppress(NotFound):
        box.connection().request("DELETE",
                                 f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")
    apply(box, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": name}, "value": value})


def jobset(namespace: str, name: str, *, pods: int, priority: str) -> dict[str, Any]:
    """One replicated Job of ``pods`` pods of 8 GPUs: one gang."""
    template = {"spec": {"priorityClassName": priority, "restartPolicy": "Never",
                         "containers": [gpu_container()]}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {
                "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 10,
                         "template": template}}}]}}


def by_jobset(pods: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        out.setdefault(pod["metadata"]["labels"].get(JOBSET, ""), []).append(pod)
    return out


def test_a_high_priority_jobset_evicts_exactly_enough_whole_low_priority_jobsets_or_none(
        real_box: Sandbox, real_ns: str) -> None:
    conn = real_box.connection()
    priority_class(real_box, "muster-e2e-low", 10)
    priority_class(real_box, "muster-e2e-high", 1000)
    lows = [f"low-{i}" for i in range(4)]
    for name in lows:  # 4 gangs of 2 x 8 GPUs fill the 8 nodes
        apply(real_box, jobset(real_ns, name, pods=2, priority="muster-e2e-low"))
    assert wait_until(lambda: len(live(pods_in(conn, real_ns))) == 8, timeout=120), \
        describe(conn, real_ns)
    first = {js: {p["metadata"]["uid"] for p in ps}
             for js, ps in by_jobset(pods_in(conn, real_ns)).items()}

    # Larger than the cluster: no plan lets it fit whole, so nothing is evicted.
    apply(real_box, jobset(real_ns, "huge", pods=9, priority="muster-e2e-high"))
    assert wait_until(lambda: bool(events(real_box, real_ns, "GangNotPreempting")),
                      timeout=60), describe(conn, real_ns)
    assert not wait_until(lambda: len(live(pods_in(conn, real_ns))) < 8, timeout=6)
    assert {js: {p["metadata"]["uid"] for p in ps} for js, ps in
            by_jobset(live(pods_in(conn, real_ns))).items()} == first
    kubectl(real_box, "delete", "jobset", "huge", "-n", real_ns, "--wait=true")
    assert wait_until(lambda: "huge" not in by_jobset(pods_in(conn, real_ns)), timeout=60)

    # Three nodes' worth: two whole low gangs (four nodes) go, the other two are untouched.
    apply(real_box, jobset(real_ns, "high", pods=3, priority="muster-e2e-high"))
    assert wait_until(lambda: len(live(by_jobset(pods_in(conn, real_ns)).get("high", []))) == 3,
                      timeout=120), describe(conn, real_ns)
    plan = events(real_box, real_ns, "GangPreempting")[0]
    assert "2 whole victims" in plan, plan
    settled = by_jobset(pods_in(conn, real_ns))
    kept = [js for js in lows if {p["metadata"]["uid"] for p in live(settled.get(js, []))}
            == first[js]]
    evicted = [js for js in lows if not {p["metadata"]["uid"] for p in settled.get(js, [])}
               & first[js]]
    assert len(kept) == 2 and len(evicted) == 2, (kept, evicted, describe(conn, real_ns))
    # The victims' Jobs made new pods; with one node free they wait whole, none bound.
    assert not wait_until(lambda: any(live(by_jobset(pods_in(conn, real_ns)).get(js, []))
                                      for js in evicted), timeout=6), describe(conn, real_ns)
