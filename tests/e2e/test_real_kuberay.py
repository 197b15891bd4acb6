"""The real KubeRay operator (github.com/ray-project/kuberay/ray-operator v1.5.0) in the sandbox.

No test here creates a pod: ``kubectl`` applies an upstream RayCluster (or RayJob) and
KubeRay makes the head and worker pods (and a RayJob's RayCluster and submitter Job), Muster
and kube-scheduler bind each cluster as one gang, KWOK runs them. KubeRay's optional webhook
is left off, as its default installation leaves it.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.core.workloads.catalog import Catalog
from extender.sandbox.sandbox import Sandbox
from extender.sandbox.submit import submit
from tests.e2e.conftest import (
    SHARED,
    describe,
    load_example,
    pods_in,
    wait_until,
    whole,
)
from tests.e2e.test_real_pod_lifecycle import kubectl, muster_gangs

pytestmark = pytest.mark.e2e
REAL_OPERATORS = ("kuberay",)

EXAMPLES = SHARED / "examples" / "kuberay"
SAMPLE = EXAMPLES / "kuberay__ray-operator__config__samples__ray-cluster.sample.yaml"
VERL = EXAMPLES / "kuberay__ray-operator__config__samples__ray-cluster.verl.yaml"
RESNET = "kuberay/kuberay__ray-operator__config__samples__pytorch-resnet-image-classifier__" \
    "ray-job.pytorch-image-classifier.yaml"
CLUSTER = "ray.io/cluster"


def by_cluster(pods: list[dict[str, Any]]) -> dict[str, list[str]]:
    """``cluster -> sorted ray.io/node-type`` of the pods."""
    found: dict[str, list[str]] = {}
    for pod in pods:
        labels = pod["metadata"]["labels"]
        found.setdefault(labels[CLUSTER], []).append(labels["ray.io/node-type"])
    return {name: sorted(types) for name, types in found.items()}


def gangs_of(box: Sandbox, namespace: str) -> dict[str, tuple[int, int]]:
    return {key.split("/", 1)[1]: (g["minMember"], g["bound"])
            for key, g in muster_gangs(box).items() if key.startswith(f"{namespace}/")}


def test_upstream_rayclusters_applied_with_kubectl_alone_run_every_pod_bound_and_running(
        real_box: Sandbox, real_ns: str) -> None:
    """KubeRay's own samples: a head and one worker (no GPU), and verl's head with 4 GPUs."""
    kubectl(real_box, "apply", "-n", real_ns, "-f", str(SAMPLE), "-f", str(VERL))
    conn = real_box.connection()
    assert wait_until(lambda: whole(conn, real_ns, 3), timeout=90), describe(conn, real_ns)
    pods = pods_in(conn, real_ns)
    assert by_cluster(pods) == {"raycluster-kuberay": ["head", "worker"],
                                "verl-cluster": ["head"]}
    assert {r["kind"] for p in pods for r in p["metadata"]["ownerReferences"]} == {"RayCluster"}
    # KubeRay, not a stand-in, made them: its labels and its head Services.
    assert {p["metadata"]["labels"].get("app.kubernetes.io/created-by") for p in pods} == \
        {"kuberay-operator"}
    services = {s["metadata"]["name"] for s in
                conn.request("GET", f"/api/v1/namespaces/{real_ns}/services")["items"]}
    assert {"raycluster-kuberay-head-svc", "verl-cluster-head-svc"} <= services
    verl = next(p for p in pods if p["metadata"]["labels"][CLUSTER] == "verl-cluster")
    gpus = verl["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    assert gpus == "4"
    assert gangs_of(real_box, real_ns) == {"raycluster-kuberay": (2, 2), "verl-cluster": (1, 1)}

    def ready() -> bool:
        clusters = conn.request("GET", f"/apis/ray.io/v1/namespaces/{real_ns}/rayclusters")["items"]
        return {c["metadata"]["name"]: c.get("status", {}).get("state")
                for c in clusters} == {"raycluster-kuberay": "ready", "verl-cluster": "ready"}

    assert wait_until(ready, timeout=30)  # KubeRay saw its pods Running and Ready (KWOK)


def test_a_rayjob_gets_its_raycluster_from_kuberay_and_its_gpu_gang_is_bound_whole(
        real_box: Sandbox, real_ns: str, catalog: Catalog) -> None:
    """KubeRay's PyTorch ResNet RayJob (``generateName``, so created, not applied; through
    ``submit``, which makes nothing beside a real operator): the RayJob controller makes the
    RayCluster (a head and 4 one-GPU workers), then the submitter Job; the 5 cluster pods are
    one gang of 5."""
    [job] = load_example(RESNET)
    made = submit(real_box.connection(), job, catalog, namespace=real_ns)
    assert made.pods == [] and made.intermediates == []
    conn = real_box.connection()
    assert wait_until(lambda: whole(conn, real_ns, 6), timeout=90), describe(conn, real_ns)
    pods = pods_in(conn, real_ns)
    [cluster] = conn.request("GET", f"/apis/ray.io/v1/namespaces/{real_ns}/rayclusters")["items"]
    assert [r["kind"] for r in cluster["metadata"]["ownerReferences"]] == ["RayJob"]
    assert by_cluster([p for p in pods if CLUSTER in p["metadata"]["labels"]]) == {
        cluster["metadata"]["name"]: ["head", "worker", "worker", "worker", "worker"]}
    submitter = [p for p in pods if CLUSTER not in p["metadata"]["labels"]]
    assert [r["kind"] for p in submitter for r in p["metadata"]["ownerReferences"]] == ["Job"]
    [gang] = [g for key, g in muster_gangs(real_box).items() if key.startswith(f"{real_ns}/")]
    assert (gang["minMember"], gang["state"]) == (5, "bound"), gang
    members = {m["uid"]: m for m in gang["members"]}
    cluster_pods = [p for p in pods if CLUSTER in p["metadata"]["labels"]]
    assert all(members[p["metadata"]["uid"]]["node"] == p["spec"]["nodeName"]
               for p in cluster_pods), gang
    assert sorted(members[p["metadata"]["uid"]]["role"] for p in cluster_pods) == \
        ["gpu-group"] * 4 + ["head"]
