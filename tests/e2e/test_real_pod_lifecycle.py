"""Real pod lifecycles: kube-controller-manager makes the pods, KWOK runs and finishes them.

No test here creates a pod of a workload itself: the Job controller does, from what
``kubectl apply`` (or the JobSet stand-in's Jobs) asked for, and KWOK, the fake nodes'
kubelet, reports them Running and, when they ask for a runtime, Succeeded.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from extender.core.workloads.catalog import Catalog
from extender.kube.client import Connection
from extender.sandbox.components import RUNTIME_ANNOTATION, SHUTDOWN_ANNOTATION
from extender.sandbox.config import Ports
from extender.sandbox.processes import alive
from extender.sandbox.sandbox import Sandbox, SandboxSpec
from extender.sandbox.submit import submit
from tests.e2e.conftest import REPO, SHARED, bound, pods_in, running, wait_until

pytestmark = pytest.mark.e2e


def kubectl(box: Sandbox, *args: str, stdin: str | None = None) -> str:
    info = box.info()
    assert info is not None
    done = subprocess.run([info.kubectl, *args], input=stdin, capture_output=True, text=True,
                          timeout=60, check=False,
                          env={**os.environ, "KUBECONFIG": info.kubeconfig})
    assert done.returncode == 0, done.stderr
    return done.stdout


def phase(pods: list[dict[str, Any]], wanted: str) -> list[dict[str, Any]]:
    return [p for p in pods if p.get("status", {}).get("phase") == wanted]


def gpu_job(name: str, namespace: str, *, pods: int, gpus: int) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"parallelism": pods, "completions": pods, "template": {"spec": {
                "restartPolicy": "Never", "containers": [{
                    "name": "train", "image": "registry.example/train:1",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}}}


def jobset(name: str, namespace: str, *, pods: int, gpus: int,
           runtime: str | None = None) -> dict[str, Any]:
    meta = {"annotations": {RUNTIME_ANNOTATION: runtime}} if runtime else {}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": {
                "parallelism": pods, "completions": pods, "template": {
                    "metadata": meta,
                    "spec": {"restartPolicy": "Never", "containers": [{
                        "name": "train", "image": "registry.example/train:1",
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}}}}]}}


def of(pods: list[dict[str, Any]], jobset_name: str) -> list[dict[str, Any]]:
    return [p for p in pods
            if p["metadata"].get("labels", {}).get("jobset.sigs.k8s.io/jobset-name")
            == jobset_name]


def test_a_job_gang_applied_with_kubectl_alone_is_bound_whole_and_running(
        tmp_path: Path) -> None:
    """A person's own descriptor makes a batch/v1 Job one gang; ``kubectl apply`` is all they
    do: kube-controller-manager makes the pods, Muster and kube-scheduler bind them, KWOK runs
    them."""
    box = Sandbox(SandboxSpec(directory=tmp_path, nodes=3), say=lambda _m: None)
    box.up()
    try:
        descriptor = yaml.safe_load((REPO / "descriptors" / "job.yaml").read_text())
        descriptor["spec"]["gangs"] = {"policy": "workload"}  # replaces the installed "job"
        kubectl(box, "apply", "-f", "-", stdin=yaml.safe_dump(descriptor))
        time.sleep(2)  # Muster's watch of WorkloadDescriptors sees the replacement
        kubectl(box, "create", "namespace", "train")
        kubectl(box, "apply", "-f", "-",
                stdin=yaml.safe_dump(gpu_job("gang", "train", pods=3, gpus=8)))
        conn = box.connection()
        assert wait_until(lambda: len(running(pods_in(conn, "train"))) == 3, timeout=60), [
            (p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase"))
            for p in pods_in(conn, "train")]
        pods = pods_in(conn, "train")
        assert len(pods) == 3 and len(bound(pods)) == 3
        assert len({p["spec"]["nodeName"] for p in pods}) == 3
        owners = {ref["kind"] for p in pods for ref in p["metadata"]["ownerReferences"]}
        assert owners == {"Job"}
        gangs = muster_gangs(box)
        assert [(g["minMember"], g["bound"]) for g in gangs.values()] == [(3, 3)], gangs
    finally:
        box.down()


def muster_gangs(box: Sandbox) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{box.ports.muster}/inspect/gangs",
                                timeout=10) as response:
        data: dict[str, Any] = orjson.loads(response.read())
    return {g["gang"]: g for g in data.get("gangs", [])}


def test_pods_with_a_runtime_succeed_free_their_gpus_and_a_waiting_gang_then_binds_whole(
        sandbox: Sandbox, namespace: str, catalog: Catalog) -> None:
    conn = sandbox.connection()
    # 4 nodes x 8 GPUs: the first gang takes them all for 12 s; the second waits whole.
    submit(conn, jobset("first", namespace, pods=4, gpus=8, runtime="12s"), catalog)
    assert wait_until(lambda: len(running(of(pods_in(conn, namespace), "first"))) == 4,
                      timeout=60)
    started = time.monotonic()
    submit(conn, jobset("second", namespace, pods=2, gpus=8), catalog)
    assert wait_until(lambda: len(of(pods_in(conn, namespace), "second")) == 2, timeout=30)
    while time.monotonic() - started < 8:  # the first still runs: none of the second binds
        assert not bound(of(pods_in(conn, namespace), "second"))
        time.sleep(0.5)
    assert wait_until(lambda: len(phase(of(pods_in(conn, namespace), "first"),
                                        "Succeeded")) == 4, timeout=40)
    assert wait_until(lambda: len(running(of(pods_in(conn, namespace), "second"))) == 2,
                      timeout=60)
    assert time.monotonic() - started >= 10  # not before the first gang's runtime ended
    second = of(pods_in(conn, namespace), "second")
    assert len(bound(second)) == 2 and len({p["spec"]["nodeName"] for p in second}) == 2
    gang = next(g for key, g in muster_gangs(sandbox).items() if key.endswith("/second"))
    assert (gang["minMember"], gang["bound"]) == (2, 2)


def test_a_deleted_bound_pod_finishes_terminating_and_its_job_makes_a_new_one(
        sandbox: Sandbox, namespace: str) -> None:
    """KWOK completes graceful deletion, as a kubelet does, after the pod's annotated shutdown
    time: a controller sees it terminating first. The Job controller replaces it."""
    conn: Connection = sandbox.connection()
    job = gpu_job("solo", namespace, pods=1, gpus=1)
    job["spec"]["template"]["metadata"] = {"annotations": {SHUTDOWN_ANNOTATION: "8s"}}
    kubectl(sandbox, "apply", "-f", "-", stdin=yaml.safe_dump(job))
    assert wait_until(lambda: len(running(pods_in(conn, namespace))) == 1, timeout=60)
    first = pods_in(conn, namespace)[0]["metadata"]["name"]
    asked = time.monotonic()
    kubectl(sandbox, "delete", "pod", "-n", namespace, first, "--wait=false")
    terminating = conn.request("GET", f"/api/v1/namespaces/{namespace}/pods/{first}")
    assert terminating["metadata"].get("deletionTimestamp"), terminating["metadata"]
    assert wait_until(lambda: first not in {p["metadata"]["name"]
                                           for p in pods_in(conn, namespace)}, timeout=30)
    # KWOK counts the 8s from when it saw the deletion, which is after it was asked for.
    assert time.monotonic() - asked >= 8
    assert wait_until(lambda: len(running(pods_in(conn, namespace))) == 1, timeout=60)


def test_two_sandboxes_run_side_by_side_and_a_file_in_the_directory_survives_up_and_down(
        sandbox: Sandbox, tmp_path: Path) -> None:
    note = tmp_path / "notes.txt"
    note.write_text("mine, not the sandbox's")
    second = Sandbox(SandboxSpec(directory=tmp_path, nodes=1, ports=Ports()),
                     say=lambda _m: None)
    info = second.up()
    try:
        assert second.ports.apiserver != sandbox.ports.apiserver
        assert sandbox.running().keys() == second.running().keys()
        # A pod written as docs/install.md says: schedulerName muster.
        kubectl(second, "apply", "-f", "-", stdin=yaml.safe_dump({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "by-name", "namespace": "default"},
            "spec": {"schedulerName": "muster", "containers": [{
                "name": "main", "image": "registry.example/serve:1",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}))
        conn = second.connection()
        assert wait_until(lambda: len(running(pods_in(conn, "default"))) == 1, timeout=60)
        assert pods_in(conn, "default")[0]["spec"]["nodeName"] == "gpu-node-0"
        assert note.read_text() == "mine, not the sandbox's"
    finally:
        second.down()
    assert not any(alive(pid) for pid in info.processes.values())
    assert note.read_text() == "mine, not the sandbox's"
    assert sandbox.running(), "the first sandbox kept running"


def test_an_upstream_jobset_applied_with_kubectl_alone_is_run_by_the_real_jobset_controller(
        tmp_path: Path) -> None:
    """The release's CRD, webhooks (on loopback, with the sandbox's certificates) and
    controller: the JobSet controller makes the Jobs, the Job controller the pods, Muster and
    kube-scheduler bind them as one gang, KWOK runs them."""
    box = Sandbox(SandboxSpec(directory=tmp_path, nodes=2, jobset=True), say=lambda _m: None)
    box.up()
    try:
        example = SHARED / "examples" / "jobset" / \
            "jobset__site__static__examples__simple__paralleljobs.yaml"
        kubectl(box, "apply", "-n", "default", "-f", str(example))
        conn = box.connection()
        assert wait_until(lambda: len(running(pods_in(conn, "default"))) == 5, timeout=90), [
            (p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase"))
            for p in pods_in(conn, "default")]
        jobs = conn.request("GET", "/apis/batch/v1/namespaces/default/jobs")["items"]
        assert sorted(j["metadata"]["name"] for j in jobs) == [
            "paralleljobs-driver-0", "paralleljobs-workers-0"]
        assert {r["kind"] for j in jobs for r in j["metadata"]["ownerReferences"]} == {"JobSet"}
        # The release's webhook defaulted what the manifest leaves out.
        assert {p["spec"]["restartPolicy"] for p in pods_in(conn, "default")} == {"OnFailure"}
        gangs = muster_gangs(box)
        assert [(g["minMember"], g["bound"]) for g in gangs.values()] == [(5, 5)], gangs
    finally:
        box.down()
