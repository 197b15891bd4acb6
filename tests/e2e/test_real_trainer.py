"""Kubeflow Trainer (github.com/kubeflow/trainer/v2 v2.1.0) with the real JobSet controller
(v0.10.1, the release Trainer v2.1.0 installs) in the sandbox.

No test here creates a pod or a JobSet: ``kubectl apply`` of a TrainJob naming the release's
``torch-distributed`` ClusterTrainingRuntime (which ``up`` installs) is all. Trainer's
webhooks validate it, its controller makes the JobSet, the JobSet controller the Job,
kube-controller-manager the pods; Muster binds them as one gang, KWOK runs them.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from extender.core.workloads.catalog import Catalog
from extender.core.workloads.workload import resolve_workload
from extender.sandbox.sandbox import Sandbox
from tests.e2e.conftest import (
    SHARED,
    bound,
    describe,
    pods_in,
    scratch_namespace,
    wait_until,
    whole,
)
from tests.e2e.operator_sandbox import operator_sandbox
from tests.e2e.test_real_pod_lifecycle import kubectl, muster_gangs

pytestmark = pytest.mark.e2e

EXAMPLE = SHARED / "examples" / "kubeflow-trainer" / "trainer__examples__yaml__01-multi-node.yaml"
TRAINER = "trainer.kubeflow.org/v1alpha1"


@pytest.fixture(scope="module")
def trainer_box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """4 nodes x 8 GPUs with Kubeflow Trainer and the JobSet controller its TrainJobs need."""
    with operator_sandbox(tmp_path_factory.mktemp("trainer"), jobset=True, trainer=True) as box:
        yield box


@pytest.fixture()
def ns(trainer_box: Sandbox) -> Iterator[str]:
    with scratch_namespace(trainer_box.connection(), "tj") as name:
        yield name


def trainjob(name: str, *, nodes: int, gpus: int) -> dict[str, Any]:
    """Trainer's own multi-node example (torch-distributed), ``nodes`` nodes of ``gpus``."""
    [job] = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if isinstance(d, dict)]
    job["metadata"]["name"] = name
    job["spec"]["trainer"]["numNodes"] = nodes
    job["spec"]["trainer"]["resourcesPerNode"] = {"limits": {"nvidia.com/gpu": gpus}}
    return dict(job)


def apply(box: Sandbox, namespace: str, obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    info = box.info()
    assert info is not None
    return subprocess.run([info.kubectl, "apply", "-n", namespace, "-f", "-"],
                          input=yaml.safe_dump(obj), capture_output=True, text=True, timeout=60,
                          check=False, env={**os.environ, "KUBECONFIG": info.kubeconfig})


def gangs_in(box: Sandbox, namespace: str) -> dict[str, dict[str, Any]]:
    return {key.split("/", 1)[1]: g for key, g in muster_gangs(box).items()
            if key.startswith(f"{namespace}/")}


def test_a_trainjob_applied_alone_gets_its_jobset_from_trainer_and_is_bound_whole(
        trainer_box: Sandbox, ns: str, catalog: Catalog) -> None:
    done = apply(trainer_box, ns, trainjob("multi-node", nodes=3, gpus=8))
    assert done.returncode == 0, done.stderr
    conn = trainer_box.connection()
    assert wait_until(lambda: whole(conn, ns, 3), timeout=90), describe(conn, ns)
    pods = pods_in(conn, ns)
    assert len({p["spec"]["nodeName"] for p in pods}) == 3  # 8 GPUs each: a node each
    # Trainer made the JobSet (owned by the TrainJob), the JobSet controller its Job.
    [jobset] = conn.request(
        "GET", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets")["items"]
    assert [(r["kind"], r["name"]) for r in jobset["metadata"]["ownerReferences"]] == \
        [("TrainJob", "multi-node")]
    assert [r["name"] for r in jobset["spec"]["replicatedJobs"]] == ["node"]
    assert {p["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] for p in pods} == \
        {"multi-node"}
    assert {p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
            for p in pods} == {"8"}
    # What Muster's descriptor reads from the TrainJob the API server holds, and the gang
    # Muster bound: three nodes of 8 GPUs, one gang of 3.
    [obj] = conn.request("GET", f"/apis/{TRAINER}/namespaces/{ns}/trainjobs")["items"]
    tree = resolve_workload(obj, catalog.require(obj))
    [cut] = tree.gangs
    assert (tree.pods, tree.gpus, cut.min_member) == (3, 24, 3)
    [gang] = gangs_in(trainer_box, ns).values()
    assert (gang["minMember"], gang["state"]) == (3, "bound"), gang
    assert {m["uid"]: m["node"] for m in gang["members"]} == \
        {p["metadata"]["uid"]: p["spec"]["nodeName"] for p in pods}


def test_a_trainjob_too_big_for_the_cluster_gets_no_pod_bound(
        trainer_box: Sandbox, ns: str) -> None:
    done = apply(trainer_box, ns, trainjob("too-big", nodes=5, gpus=8))  # 40 GPUs of 32
    assert done.returncode == 0, done.stderr
    conn = trainer_box.connection()
    assert wait_until(lambda: len(pods_in(conn, ns)) == 5, timeout=60), describe(conn, ns)
    assert not wait_until(lambda: bound(pods_in(conn, ns)) != [], timeout=10)
    [gang] = gangs_in(trainer_box, ns).values()
    assert (gang["minMember"], gang["bound"], gang["state"]) == (5, 0, "waiting"), gang
    # "the node pod left needs ...": what the pods that do not fit lack
    assert "node pod" in gang["lastReason"], gang
    assert "needs 8 nvidia.com/gpu on one node" in gang["lastReason"], gang


def staged_runtime() -> dict[str, Any]:
    """A TrainingRuntime whose trainer nodes depend on a dataset and a model initializer
    completing (as Trainer's torchtune runtimes do; their PVCs left out), each initializer
    pod finishing 3 s after it runs (KWOK's runtime stage)."""
    def initializer(name: str) -> dict[str, Any]:
        pod = {"metadata": {"annotations": {"muster.dev/sandbox-runtime": "3s"}},
               "spec": {"containers": [{"name": name, "image": f"kubeflow/{name}"}]}}
        return {"name": name, "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": name}},
            "spec": {"template": pod}}}

    node = {"name": "node",
            "dependsOn": [{"name": "dataset-initializer", "status": "Complete"},
                          {"name": "model-initializer", "status": "Complete"}],
            "template": {
                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                "spec": {"template": {"spec": {"containers": [
                    {"name": "node", "image": "kubeflow/torchtune-trainer"}]}}}}}
    return {"apiVersion": TRAINER, "kind": "TrainingRuntime", "metadata": {"name": "staged"},
            "spec": {"mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}},
                     "template": {"spec": {"replicatedJobs": [
                         initializer("dataset-initializer"), initializer("model-initializer"),
                         node]}}}}


def staged_trainjob(name: str, *, nodes: int) -> dict[str, Any]:
    job = trainjob(name, nodes=nodes, gpus=8)
    job["spec"]["runtimeRef"] = {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime",
                                 "name": "staged"}
    return job


def by_step(pods: list[dict[str, Any]], job: str) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        labels = pod["metadata"]["labels"]
        if labels["jobset.sigs.k8s.io/jobset-name"] == job:
            found.setdefault(labels["jobset.sigs.k8s.io/replicatedjob-name"], []).append(pod)
    return found


def test_a_trainjobs_initializers_complete_outside_its_gang_then_its_nodes_are_bound_whole(
        trainer_box: Sandbox, ns: str) -> None:
    """The nodes' gang is the nodes alone: read as nodes, the completed initializers once made
    a gang whose nodes could not be placed look finished."""
    conn = trainer_box.connection()
    for obj in (staged_runtime(), staged_trainjob("staged", nodes=2)):
        done = apply(trainer_box, ns, obj)
        assert done.returncode == 0, done.stderr

    def ran(job: str, nodes: int) -> bool:
        """Both initializers succeeded and the ``nodes`` trainer pods exist."""
        steps = by_step(pods_in(conn, ns), job)
        done = [p for step in ("dataset-initializer", "model-initializer")
                for p in steps.get(step, []) if p["status"].get("phase") == "Succeeded"]
        return len(done) == 2 and len(steps.get("node", [])) == nodes

    assert wait_until(lambda: ran("staged", 2) and len(bound(
        by_step(pods_in(conn, ns), "staged")["node"])) == 2, timeout=90), describe(conn, ns)
    jobs = {j["metadata"]["name"]: j for j in
            conn.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]}
    finished = max(jobs[f"staged-{step}-0"]["status"]["completionTime"]
                   for step in ("dataset-initializer", "model-initializer"))
    assert jobs["staged-node-0"]["metadata"]["creationTimestamp"] >= finished  # dependsOn
    gang = gangs_in(trainer_box, ns)["staged"]
    assert (gang["minMember"], gang["state"]) == (2, "bound"), gang
    assert [m["role"] for m in gang["members"]] == ["node", "node"], gang
    # Two of four nodes are taken: the next TrainJob's 3 nodes cannot be placed whole once its
    # initializers are done; none is bound, and its gang waits rather than looks finished.
    done = apply(trainer_box, ns, staged_trainjob("staged-big", nodes=3))
    assert done.returncode == 0, done.stderr
    assert wait_until(lambda: ran("staged-big", 3), timeout=90), describe(conn, ns)
    assert not wait_until(
        lambda: bound(by_step(pods_in(conn, ns), "staged-big")["node"]) != [], timeout=10)
    big = gangs_in(trainer_box, ns)["staged-big"]
    assert (big["minMember"], big["bound"], big["state"]) == (3, 0, "waiting"), big


def test_the_release_runtime_is_installed_and_its_webhooks_refuse_a_trainjob_without_one(
        trainer_box: Sandbox, ns: str) -> None:
    conn = trainer_box.connection()
    runtime = conn.request("GET", f"/apis/{TRAINER}/clustertrainingruntimes/torch-distributed")
    assert runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["name"] == "node"
    job = trainjob("no-runtime", nodes=1, gpus=1)
    job["spec"]["runtimeRef"]["name"] = "no-such-runtime"
    done = apply(trainer_box, ns, job)
    assert done.returncode != 0 and "validator.trainjob.trainer.kubeflow.org" in done.stderr, \
        done.stderr
    assert kubectl(trainer_box, "get", "trainjobs", "-n", ns, "-o", "name") == ""
