"""Pods map to their workload, role, replica and gang; a snapshot gathers it all."""

from __future__ import annotations

from typing import Any

from extender.core.model.objects import node_from_api, pod_from_api
from extender.core.model.values import GangKey, WorkloadTree
from extender.core.workloads.cluster import build_snapshot, read_tree
from extender.core.workloads.membership import ObjectIndex, find_membership
from extender.core.workloads.workload import DEFAULT_LIMITS
from tests.unit.descriptors.examples import catalog


def owner(kind: str, name: str, api_version: str) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": f"uid-{name}",
            "controller": True}


def make_pod(name: str, *, owners: list[dict[str, Any]] | None = None, gpus: int = 1,
             labels: dict[str, str] | None = None, node: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "uid": f"uid-{name}",
                            "labels": labels or {}}
    if owners:
        meta["ownerReferences"] = owners
    spec: dict[str, Any] = {"containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


JOBSET = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
          "metadata": {"name": "train", "namespace": "ml"},
          "spec": {"replicatedJobs": [
              {"name": "driver", "template": {"spec": {"template": {"spec": {"containers": [
                  {"name": "c"}]}}}}},
              {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 2,
                  "template": {"spec": {"containers": [
                      {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}}]}}
JOB = {"apiVersion": "batch/v1", "kind": "Job",
       "metadata": {"name": "train-workers-1", "namespace": "ml", "ownerReferences": [
           owner("JobSet", "train", "jobset.x-k8s.io/v1alpha2")]},
       "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}}
LWS = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
       "metadata": {"name": "vllm", "namespace": "ml"},
       "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 4, "workerTemplate": {
           "spec": {"containers": [{"name": "c"}]}}}}}
STS = {"apiVersion": "apps/v1", "kind": "StatefulSet",
       "metadata": {"name": "vllm-1", "namespace": "ml", "ownerReferences": [
           owner("LeaderWorkerSet", "vllm", "leaderworkerset.x-k8s.io/v1")]}}
DEPLOY = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web",
                                                                       "namespace": "ml"},
          "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c"}]}}}}
RS = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {
    "name": "web-5d9", "namespace": "ml",
    "ownerReferences": [owner("Deployment", "web", "apps/v1")]}}
OBJECTS = [JOBSET, JOB, LWS, STS, DEPLOY, RS]


def membership(pod: dict[str, Any]):  # type: ignore[no-untyped-def]
    trees = [read_tree(o, catalog(), DEFAULT_LIMITS) for o in OBJECTS]
    workloads = {t.ref.key: t for t in trees if isinstance(t, WorkloadTree)}
    assert len(workloads) == 3  # the JobSet, the LWS and the Deployment; their parts are none
    return find_membership(pod_from_api(pod), objects=ObjectIndex.of(OBJECTS),
                           catalog=catalog(), workloads=workloads)


def test_a_pod_of_a_job_inside_a_jobset_belongs_to_the_jobset_gang() -> None:
    pod = make_pod("train-workers-1-0", owners=[owner("Job", "train-workers-1", "batch/v1")],
                   labels={"jobset.sigs.k8s.io/replicatedjob-name": "workers",
                           "jobset.sigs.k8s.io/job-index": "1"})
    m = membership(pod)
    assert (m.workload.key, m.role, m.replica, m.gang) == (
        "JobSet/ml/train", "workers", 1, GangKey("ml/train"))


def test_a_jobset_pod_whose_job_is_unknown_is_found_by_its_labels() -> None:
    pod = make_pod("train-driver-0-0", owners=[owner("Job", "train-driver-0", "batch/v1")],
                   labels={"jobset.sigs.k8s.io/jobset-name": "train",
                           "jobset.sigs.k8s.io/replicatedjob-name": "driver"})
    m = membership(pod)
    assert (m.workload.key, m.role, m.gang) == ("JobSet/ml/train", "driver", "ml/train")


def test_lws_pods_map_to_the_gang_of_their_group() -> None:
    owners = [owner("StatefulSet", "vllm-1", "apps/v1")]
    leader = make_pod("vllm-1", owners=owners, labels={
        "leaderworkerset.sigs.k8s.io/group-index": "1",
        "leaderworkerset.sigs.k8s.io/worker-index": "0"})
    worker = make_pod("vllm-1-2", owners=owners, labels={
        "leaderworkerset.sigs.k8s.io/group-index": "1",
        "leaderworkerset.sigs.k8s.io/worker-index": "2"})
    assert (membership(leader).role, membership(leader).gang) == ("leader", "ml/vllm/group-1")
    assert (membership(worker).role, membership(worker).gang) == ("worker", "ml/vllm/group-1")


def test_a_deployment_pod_is_a_member_without_a_gang() -> None:
    m = membership(make_pod("web-5d9-x", owners=[owner("ReplicaSet", "web-5d9", "apps/v1")]))
    assert (m.workload.key, m.role, m.gang) == ("Deployment/ml/web", "replica", None)


def test_a_pod_owned_by_an_undescribed_kind_belongs_to_nothing() -> None:
    pod = make_pod("x", owners=[owner("Frobnicator", "f", "example.com/v1")])
    assert membership(pod) is None


def test_build_snapshot_resolves_workloads_bare_pods_and_memberships() -> None:
    node = {"metadata": {"name": "n1", "labels": {"zone": "a"}},
            "spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "64"}}}
    worker = make_pod("train-workers-1-0", owners=[owner("Job", "train-workers-1", "batch/v1")],
                      labels={"jobset.sigs.k8s.io/replicatedjob-name": "workers"}, node="n1")
    bare = make_pod("notebook", gpus=1)
    broken = {**LWS, "metadata": {"name": "bad", "namespace": "ml"},
              "spec": {"replicas": "many"}}
    snap = build_snapshot(nodes=[node], pods=[worker, bare], objects=[*OBJECTS, broken],
                          catalog=catalog(), revision=7)
    assert snap.revision == 7
    assert snap.nodes["n1"].gpu_devices == 8  # type: ignore[index]
    # The JobSet's Job and the LWS's StatefulSet are parts of their owners, not workloads.
    assert sorted(snap.workloads) == ["Deployment/ml/web", "JobSet/ml/train",
                                      "LeaderWorkerSet/ml/vllm", "Pod/ml/notebook"]
    assert snap.gangs[GangKey("ml/train")].pods == 5
    assert snap.gang_of("uid-train-workers-1-0") is snap.gangs[GangKey("ml/train")]
    assert snap.memberships["uid-notebook"].workload.key == "Pod/ml/notebook"
    assert snap.gang_of("uid-notebook") is None


def test_a_snapshot_names_each_object_it_cannot_resolve_and_keeps_the_rest() -> None:
    broken = {**LWS, "spec": {"replicas": "many"}}
    snap = build_snapshot(nodes=[], pods=[], objects=[broken, DEPLOY], catalog=catalog())
    assert list(snap.workloads) == ["Deployment/ml/web"]
    assert list(snap.refused) == ["LeaderWorkerSet/ml/vllm"]
    assert "LeaderWorkerSet/vllm" in snap.refused["LeaderWorkerSet/ml/vllm"][1]


def test_node_and_pod_values_read_the_fields_decisions_need() -> None:
    node = node_from_api({"metadata": {"name": "n"}, "spec": {"unschedulable": True},
                          "status": {"allocatable": {"cpu": "4"}}})
    assert node.unschedulable and node.allocatable["cpu"] == 4000
    pod = pod_from_api({**make_pod("p", gpus=2, node="n"), "status": {"phase": "Running"}})
    assert (pod.shape.gpus, pod.node_name, pod.phase.value, pod.holds_resources) == (
        2, "n", "Running", True)
