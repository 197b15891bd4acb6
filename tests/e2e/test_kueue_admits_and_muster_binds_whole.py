"""Kueue v0.17.0 as the quota and admission layer beside Muster, in a sandbox of their own
(the real JobSet controller v0.10.1, Muster's gate by the admission policy, as ``muster
sandbox up`` runs them).

Nothing here creates a pod or a Job: JobSets labelled ``kueue.x-k8s.io/queue-name`` are applied
with ``kubectl`` alone. Kueue's webhook suspends each; Kueue admits one when its ClusterQueue's
quota has room and unsuspends it; the JobSet controller and kube-controller-manager make its
pods; Muster binds them whole. The quota here (24 GPUs) is smaller than two JobSets' 32 while
the 4 nodes x 8 GPUs hold both, so what holds the second back is Kueue, not capacity.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from extender.sandbox.sandbox import Sandbox
from tests.e2e.conftest import bound, describe, pods_in, scratch_namespace, wait_until, whole
from tests.e2e.operator_sandbox import operator_sandbox
from tests.e2e.test_real_pod_lifecycle import kubectl, muster_gangs

pytestmark = pytest.mark.e2e

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE = "kueue.x-k8s.io/v1beta2"


@pytest.fixture(scope="module")
def kueue_box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """4 nodes x 8 GPUs with the JobSet controller, Kueue and its queues, and Muster's gate."""
    with operator_sandbox(tmp_path_factory.mktemp("kueue"), jobset=True, kueue=True,
                          gating=True) as box:
        yield box


@pytest.fixture()
def ns(kueue_box: Sandbox) -> Iterator[str]:
    with scratch_namespace(kueue_box.connection(), "kq") as name:
        yield name


def jobset(name: str, *, pods: int, gpus: int) -> dict[str, Any]:
    pod = {"spec": {"containers": [{
        "name": "train", "image": "trainer:1",
        "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": gpus},
                      "limits": {"nvidia.com/gpu": gpus}}}]}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "labels": {QUEUE_LABEL: "gpus"}},
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {
                "spec": {"parallelism": pods, "completions": pods, "template": pod}}}]}}


def apply(box: Sandbox, namespace: str, *objs: dict[str, Any]) -> None:
    kubectl(box, "apply", "-n", namespace, "-f", "-",
            stdin=yaml.safe_dump_all(list(objs)))


def of(pods: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [p for p in pods
            if p["metadata"].get("labels", {}).get("jobset.sigs.k8s.io/jobset-name") == name]


def suspended(box: Sandbox, namespace: str, name: str) -> bool:
    found = json.loads(kubectl(box, "get", "jobset", name, "-n", namespace, "-o", "json"))
    return bool(found["spec"].get("suspend"))


def workloads(box: Sandbox, namespace: str) -> dict[str, dict[str, Any]]:
    """Kueue's Workload of each JobSet, by the JobSet's name."""
    items = json.loads(kubectl(box, "get", "workloads.kueue.x-k8s.io", "-n", namespace,
                               "-o", "json"))["items"]
    return {ref["name"]: w for w in items for ref in w["metadata"].get("ownerReferences", [])
            if ref.get("kind") == "JobSet"}


def condition(workload: dict[str, Any], kind: str) -> str | None:
    for cond in workload.get("status", {}).get("conditions", []) or []:
        if cond.get("type") == kind:
            return str(cond.get("status"))
    return None


def test_kueue_holds_the_jobset_beyond_quota_suspended_and_muster_binds_each_admitted_one_whole(
        kueue_box: Sandbox, ns: str) -> None:
    box = kueue_box
    conn = box.connection()
    # The sandbox's ClusterQueue, given a GPU quota smaller than two JobSets' 32.
    kubectl(box, "patch", "clusterqueue", "gpus", "--type=json", "-p", json.dumps([
        {"op": "replace", "path": "/spec/resourceGroups/0/flavors/0/resources/2",
         "value": {"name": "nvidia.com/gpu", "nominalQuota": 24}}]))
    apply(box, ns, {"apiVersion": KUEUE, "kind": "LocalQueue",
                    "metadata": {"name": "gpus"}, "spec": {"clusterQueue": "gpus"}})

    apply(box, ns, jobset("first", pods=2, gpus=8))
    assert wait_until(lambda: whole(conn, ns, 2), timeout=120), describe(conn, ns)
    assert not suspended(box, ns, "first")
    assert condition(workloads(box, ns)["first"], "Admitted") == "True"

    apply(box, ns, jobset("second", pods=2, gpus=8))
    assert wait_until(lambda: "second" in workloads(box, ns)
                      and condition(workloads(box, ns)["second"], "QuotaReserved") == "False",
                      timeout=60), workloads(box, ns)
    time.sleep(5)  # long enough for Muster to bind a gang it was given (it binds in about 1 s)
    assert suspended(box, ns, "second")
    assert of(pods_in(conn, ns), "second") == []  # Kueue holds it: no Job has pods
    assert len(bound(pods_in(conn, ns))) == 2
    # Muster plans nothing for a gang Kueue holds and keeps no capacity for it.
    held = [g for key, g in muster_gangs(box).items() if key.startswith(f"{ns}/second")]
    assert all(g["plan"] is None and g["reservedGpus"] == 0 and g["bound"] == 0
               for g in held), held

    kubectl(box, "delete", "jobset", "first", "-n", ns, "--wait=false")
    assert wait_until(lambda: not suspended(box, ns, "second"), timeout=60), workloads(box, ns)
    assert wait_until(lambda: whole(conn, ns, 2) and len(of(pods_in(conn, ns), "second")) == 2,
                      timeout=120), describe(conn, ns)
    assert condition(workloads(box, ns)["second"], "Admitted") == "True"


def test_the_sandboxs_queues_are_installed_over_the_fake_gpu_nodes(kueue_box: Sandbox) -> None:
    queue = json.loads(kubectl(kueue_box, "get", "clusterqueue", "gpus", "-o", "json"))
    assert queue["spec"]["resourceGroups"][0]["flavors"][0]["name"] == "gpu-nodes"
    assert kubectl(kueue_box, "get", "localqueue", "gpus", "-n", "default", "-o", "name") \
        == "localqueue.kueue.x-k8s.io/gpus\n"
