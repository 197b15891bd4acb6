"""Workloads whose operators create pods in stages start, with the real JobSet and LWS.

The JobSet controller (v0.10.1) creates a replicatedJob that ``dependsOn`` another only once
that one is Ready; the LWS controller (v0.7.0) with ``startupPolicy: LeaderReady`` creates a
group's workers once its leader is Ready. No test here creates a pod: ``kubectl apply`` of the
workload is all. Muster plans each gang whole on its first pod, holds the later stage's
capacity, releases the stages in turn, and KWOK runs the pods (the leaders annotated to take
a few seconds to start, as an image pull does).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from extender.sandbox.sandbox import Sandbox
from tests.e2e.conftest import (
    REPO,
    SHARED,
    bound,
    describe,
    pods_in,
    scheduled_message,
    wait_until,
    whole,
)
from tests.e2e.test_real_pod_lifecycle import kubectl, muster_gangs

pytestmark = pytest.mark.e2e
REAL_OPERATORS = ("jobset", "lws")

STORY = REPO / "tests" / "unit" / "cli" / "data" / "story-jobset.yaml"
STARTUP = "muster.dev/sandbox-startup"


def story(namespace: str, *, name: str = "story", worker_gpus: int = 4, workers: int = 2,
          startup: str = "6s") -> dict[str, Any]:
    """The story JobSet of our docs (workers dependsOn the leader being Ready), its leader
    annotated to start ``startup`` after binding."""
    js = copy.deepcopy(yaml.safe_load(STORY.read_text()))
    js["metadata"] = {"name": name, "namespace": namespace}
    leader, workers_job = js["spec"]["replicatedJobs"]
    leader["template"]["spec"]["template"].setdefault("metadata", {})["annotations"] = {
        STARTUP: startup}
    spec = workers_job["template"]["spec"]
    spec["parallelism"] = spec["completions"] = workers
    spec["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = \
        worker_gpus
    return js


def apply(box: Sandbox, obj: dict[str, Any]) -> None:
    kubectl(box, "apply", "-f", "-", stdin=yaml.safe_dump(obj))


def role_pods(pods: list[dict[str, Any]], role: str) -> list[dict[str, Any]]:
    return [p for p in pods if p["metadata"]["labels"].get(
        "jobset.sigs.k8s.io/replicatedjob-name") == role]


def test_the_story_jobset_applied_with_kubectl_alone_binds_the_leader_then_both_workers(
        real_box: Sandbox, real_ns: str) -> None:
    conn = real_box.connection()
    apply(real_box, story(real_ns))
    assert wait_until(lambda: len(bound(pods_in(conn, real_ns))) == 1, timeout=60), \
        describe(conn, real_ns)
    [leader] = pods_in(conn, real_ns)
    assert role_pods([leader], "leader")  # the leader alone, before any worker exists
    # While the leader starts, the workers' capacity is held: a rival JobSet that would fit
    # in what is free without the hold (24 of 28 GPUs) waits.
    rival = story(real_ns, name="rival", workers=3, worker_gpus=8, startup="0s")
    rival["spec"]["replicatedJobs"] = rival["spec"]["replicatedJobs"][1:]
    del rival["spec"]["replicatedJobs"][0]["dependsOn"]
    apply(real_box, rival)
    assert wait_until(lambda: len(bound(role_pods(
        [p for p in pods_in(conn, real_ns) if p["metadata"]["name"].startswith("story-")],
        "workers"))) == 2, timeout=60), describe(conn, real_ns)
    pods = pods_in(conn, real_ns)
    mine = [p for p in pods if p["metadata"]["name"].startswith("story-")]
    theirs = [p for p in pods if p["metadata"]["name"].startswith("rival-")]
    assert len(bound(mine)) == 3
    assert bound(theirs) == [], describe(conn, real_ns)  # never on the held capacity
    # The workers came only after the leader was bound (the JobSet controller waited).
    leader_bound = min(c["lastTransitionTime"] for c in leader["status"]["conditions"]
                       if c["type"] == "PodScheduled")
    assert all(w["metadata"]["creationTimestamp"] >= leader_bound
               for w in role_pods(mine, "workers"))
    gangs = muster_gangs(real_box)
    assert gangs[f"{real_ns}/story"]["bound"] == 3, gangs


def test_a_staged_jobset_whose_later_stage_cannot_fit_is_not_started_and_says_why(
        real_box: Sandbox, real_ns: str) -> None:
    conn = real_box.connection()
    # A 4-GPU leader, then 4 workers of 8 GPUs: 36 GPUs on 4 nodes of 8.
    apply(real_box, story(real_ns, name="big", workers=4, worker_gpus=8))
    assert wait_until(lambda: bool(pods_in(conn, real_ns)) and scheduled_message(
        pods_in(conn, real_ns)[0]) != "", timeout=60), describe(conn, real_ns)
    assert wait_until(lambda: "gang" in scheduled_message(pods_in(conn, real_ns)[0]),
                      timeout=30), describe(conn, real_ns)
    assert not wait_until(lambda: bool(bound(pods_in(conn, real_ns))), timeout=8)
    [leader] = pods_in(conn, real_ns)
    assert "big" in scheduled_message(leader), scheduled_message(leader)


def test_a_leader_ready_leaderworkerset_of_two_groups_binds_both_groups_whole(
        real_box: Sandbox, real_ns: str) -> None:
    conn = real_box.connection()
    container = {"name": "main", "image": "vllm",
                 "resources": {"limits": {"nvidia.com/gpu": 8}}}
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
           "metadata": {"name": "ready", "namespace": real_ns},
           "spec": {"replicas": 2, "startupPolicy": "LeaderReady",
                    "leaderWorkerTemplate": {
                        "size": 2,
                        "leaderTemplate": {"metadata": {"annotations": {STARTUP: "3s"}},
                                           "spec": {"containers": [container]}},
                        "workerTemplate": {"spec": {"containers": [container]}}}}}
    apply(real_box, lws)
    assert wait_until(lambda: whole(conn, real_ns, 4), timeout=90), describe(conn, real_ns)
    gangs = muster_gangs(real_box)
    assert sorted((k.rsplit("/", 1)[-1], g["minMember"], g["bound"])
                  for k, g in gangs.items() if k.startswith(f"{real_ns}/")) == [
        ("group-0", 2, 2), ("group-1", 2, 2)], gangs


def test_upstream_in_order_jobset_with_gpus_binds_its_driver_then_its_workers_whole(
        real_box: Sandbox, real_ns: str) -> None:
    """JobSet's own startup-policy example (startupPolicyOrder InOrder: the workers' Job is
    created once the driver is Ready), given GPUs so Muster schedules it: the driver binds
    first, then the four workers together."""
    [js] = [d for d in yaml.safe_load_all((SHARED / "examples" / "jobset" / (
        "jobset__site__static__examples__startup-policy__startup-driver-ready.yaml"))
        .read_text()) if d]
    js["metadata"]["namespace"] = real_ns
    for rjob in js["spec"]["replicatedJobs"]:
        pod = rjob["template"]["spec"]["template"]
        for c in pod["spec"]["containers"]:
            c["resources"] = {"limits": {"nvidia.com/gpu": 4}}
        if rjob["name"] == "driver":
            pod.setdefault("metadata", {})["annotations"] = {STARTUP: "3s"}
    apply(real_box, js)
    conn = real_box.connection()
    assert wait_until(lambda: len(bound(pods_in(conn, real_ns))) == 5, timeout=90), \
        describe(conn, real_ns)
    pods = pods_in(conn, real_ns)
    [driver] = role_pods(pods, "driver")
    driver_bound = min(c["lastTransitionTime"] for c in driver["status"]["conditions"]
                       if c["type"] == "PodScheduled")
    workers = role_pods(pods, "workers")
    assert len(workers) == 4
    assert all(w["metadata"]["creationTimestamp"] >= driver_bound for w in workers)
    gang = muster_gangs(real_box)[f"{real_ns}/startup-driver-ready"]
    assert gang["bound"] == 5 and [st["roles"] for st in gang["stages"]] == [
        ["driver"], ["workers"]], gang
