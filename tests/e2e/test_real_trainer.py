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
    assert "a node needs 8 nvidia.com/gpu on one node" in gang["lastReason"], gang


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
