"""JobSet exclusive placement with the real JobSet controller (v0.10.1) on racks of KWOK nodes.

``alpha.jobset.sigs.k8s.io/exclusive-topology: muster.dev/rack`` on a JobSet applied with
``kubectl apply`` alone: JobSet's pod webhook gives each Job's leader (completion index 0)
affinity to its Job and anti-affinity to other Jobs in the rack, refuses the followers until
the leader has a node, then pins them to its rack. Muster plans the whole JobSet at once, each
Job in a rack of its own, releases the leaders together and then the followers: every Job
lands whole in its own rack. A JobSet needing more racks than are free waits whole.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from extender.sandbox.nodes import RACK_LABEL
from extender.sandbox.sandbox import Sandbox
from tests.e2e.conftest import (
    bound,
    describe,
    pods_in,
    scheduled_message,
    scratch_namespace,
    start_sandbox,
    wait_until,
)
from tests.e2e.test_real_pod_lifecycle import kubectl, muster_gangs

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def racks_box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """3 racks of 2 nodes x 8 GPUs, with the real JobSet controller."""
    box = start_sandbox(tmp_path_factory.mktemp("racks"), nodes=6, nodes_per_rack=2,
                        jobset=True)
    try:
        yield box
    finally:
        box.down()


@pytest.fixture()
def ns(racks_box: Sandbox) -> Iterator[str]:
    with scratch_namespace(racks_box.connection(), "excl") as name:
        yield name


def exclusive(namespace: str, name: str, *, jobs: int, pods: int, gpus: int) -> dict[str, Any]:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": {"alpha.jobset.sigs.k8s.io/exclusive-topology":
                                         RACK_LABEL}},
            "spec": {"replicatedJobs": [{"name": "w", "replicas": jobs, "template": {"spec": {
                "parallelism": pods, "completions": pods, "backoffLimit": 10,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{
                    "name": "main", "image": "trainer",
                    "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}}}]}}


def apply(box: Sandbox, obj: dict[str, Any]) -> None:
    kubectl(box, "apply", "-f", "-", stdin=yaml.safe_dump(obj))


def rack_of(box: Sandbox) -> dict[str, str]:
    nodes = box.connection().request("GET", "/api/v1/nodes").get("items", [])
    return {n["metadata"]["name"]: n["metadata"]["labels"][RACK_LABEL] for n in nodes}


def racks_by_job(pods: list[dict[str, Any]], racks: dict[str, str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for p in bound(pods):
        job = p["metadata"]["labels"]["batch.kubernetes.io/job-name"]
        out.setdefault(job, set()).add(racks[p["spec"]["nodeName"]])
    return out


def test_every_job_lands_whole_in_its_own_rack_and_a_jobset_needing_more_racks_waits_whole(
        racks_box: Sandbox, ns: str) -> None:
    conn = racks_box.connection()
    racks = rack_of(racks_box)
    # 2 Jobs of 2 pods x 8 GPUs: each Job fills one rack.
    apply(racks_box, exclusive(ns, "excl", jobs=2, pods=2, gpus=8))
    assert wait_until(lambda: len(bound(pods_in(conn, ns))) == 4, timeout=150), \
        describe(conn, ns)
    pods = pods_in(conn, ns)
    per_job = racks_by_job(pods, racks)
    assert len(per_job) == 2 and all(len(r) == 1 for r in per_job.values()), per_job
    assert len({next(iter(r)) for r in per_job.values()}) == 2, per_job  # a rack per Job
    # The followers came only once their leader was scheduled (JobSet's webhook waited).
    leaders = {p["metadata"]["labels"]["batch.kubernetes.io/job-name"]: p for p in pods
               if p["metadata"]["annotations"].get("batch.kubernetes.io/job-completion-index")
               == "0"}
    for p in pods:
        job = p["metadata"]["labels"]["batch.kubernetes.io/job-name"]
        if p is not leaders[job]:
            scheduled = min(c["lastTransitionTime"] for c in leaders[job]["status"]["conditions"]
                            if c["type"] == "PodScheduled")
            assert p["metadata"]["creationTimestamp"] >= scheduled
            assert p["spec"]["nodeSelector"][RACK_LABEL] == next(iter(per_job[job]))
    gangs = muster_gangs(racks_box)
    assert gangs[f"{ns}/excl"]["bound"] == 4, gangs
    # One rack is left: a JobSet of 2 tiny Jobs (room for both on any node) waits whole.
    apply(racks_box, exclusive(ns, "late", jobs=2, pods=2, gpus=1))

    def late() -> list[dict[str, Any]]:
        return [p for p in pods_in(conn, ns) if p["metadata"]["name"].startswith("late-")]

    assert wait_until(lambda: any("domain of their own" in scheduled_message(p)
                                  for p in late()), timeout=60), \
        [(p["metadata"]["name"], scheduled_message(p)) for p in late()]
    assert not wait_until(lambda: bool(bound(late())), timeout=8), describe(conn, ns)
    message = next(scheduled_message(p) for p in late() if scheduled_message(p))
    assert "only 1 can get one" in message and "taken:" in message, message
    assert all(p["metadata"]["annotations"].get("batch.kubernetes.io/job-completion-index")
               == "0" for p in late())  # no follower exists: no leader was scheduled


def test_a_job_depending_on_an_exclusive_job_is_bound_after_all_its_pods_each_in_a_rack(
        racks_box: Sandbox, ns: str) -> None:
    """dependsOn Ready with exclusive-topology: the lead Job's leader, its follower, then the
    workers' leaders and followers; three Jobs in three racks."""
    conn = racks_box.connection()
    racks = rack_of(racks_box)
    js = exclusive(ns, "chain", jobs=2, pods=2, gpus=8)
    lead = {**copy.deepcopy(js["spec"]["replicatedJobs"][0]), "name": "lead", "replicas": 1}
    js["spec"]["replicatedJobs"][0]["dependsOn"] = [{"name": "lead", "status": "Ready"}]
    js["spec"]["replicatedJobs"].insert(0, lead)
    apply(racks_box, js)
    assert wait_until(lambda: len(bound(pods_in(conn, ns))) == 6, timeout=180), \
        describe(conn, ns)
    pods = pods_in(conn, ns)
    per_job = racks_by_job(pods, racks)
    assert len(per_job) == 3 and all(len(r) == 1 for r in per_job.values()), per_job
    assert len({next(iter(r)) for r in per_job.values()}) == 3, per_job
    lead_ready = max(c["lastTransitionTime"] for p in pods
                     if p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "lead"
                     for c in p["status"]["conditions"] if c["type"] == "Ready")
    assert all(p["metadata"]["creationTimestamp"] >= lead_ready for p in pods
               if p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "w")


def test_a_replicated_jobs_own_exclusive_topology_runs_its_jobs_each_in_a_rack_and_the_rest_outside(
        racks_box: Sandbox, ns: str) -> None:
    """The annotation on one replicatedJob's Job template, as JobSet's docs allow: JobSet
    copies it onto those Jobs and pods only, so only their followers wait for their leader.
    Before Muster read it there, the leaders were held at the barrier for followers the
    webhook would not create until a leader had a node. The other replicatedJob keeps to no
    rack; here the Jobs fill two racks, so it runs in the third."""
    conn = racks_box.connection()
    racks = rack_of(racks_box)
    obj = exclusive(ns, "mixed", jobs=2, pods=2, gpus=8)
    del obj["metadata"]["annotations"]
    workers = obj["spec"]["replicatedJobs"][0]
    workers["template"]["metadata"] = {"annotations": {
        "alpha.jobset.sigs.k8s.io/exclusive-topology": RACK_LABEL}}
    ps = yaml.safe_load(yaml.safe_dump(workers))
    ps.update(name="ps", replicas=1)
    del ps["template"]["metadata"]
    ps["template"]["spec"].update(parallelism=1, completions=1)
    obj["spec"]["replicatedJobs"].append(ps)
    apply(racks_box, obj)
    assert wait_until(lambda: len(bound(pods_in(conn, ns))) == 5, timeout=150), \
        describe(conn, ns)
    per_job = racks_by_job(pods_in(conn, ns), racks)
    exclusive_racks = {next(iter(r)) for job, r in per_job.items() if "-w-" in job}
    assert len(exclusive_racks) == 2 and all(len(r) == 1 for r in per_job.values()), per_job
    (ps_rack,) = {next(iter(r)) for job, r in per_job.items() if "-ps-" in job}
    assert ps_rack not in exclusive_racks, per_job
    assert muster_gangs(racks_box)[f"{ns}/mixed"]["bound"] == 5
