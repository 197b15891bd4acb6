"""``muster forecast`` against a real kube-apiserver (a sandbox of its own: the forecast reads the
whole cluster, and workloads other tests leave in a shared sandbox would rightly change it): a
JobSet annotated with its expected runtime fills the cluster, a gang waits behind it, and the
forecast names the JobSet and starts the gang when the JobSet is expected to end."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from extender.cli.main import main
from extender.core.workloads.catalog import Catalog
from extender.sandbox.sandbox import Sandbox
from tests.e2e.conftest import (
    bound,
    pods_in,
    scheduled_message,
    scratch_namespace,
    start_sandbox,
    submit,
    wait_until,
)

pytestmark = pytest.mark.e2e

RUNTIME = 600.0


@pytest.fixture(scope="module")
def own_box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """4 nodes x 8 GPUs, nothing else on them."""
    box = start_sandbox(Path(tmp_path_factory.mktemp("forecast")))
    try:
        yield box
    finally:
        box.down()


@pytest.fixture()
def own_ns(own_box: Sandbox) -> Iterator[str]:
    with scratch_namespace(own_box.connection(), "forecast") as name:
        yield name


def _jobset(namespace: str, name: str, *, pods: int,
            annotations: dict[str, str] | None = None) -> dict[str, Any]:
    pod = {"spec": {"containers": [{
        "name": "train", "image": "trainer:1",
        "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": 8},
                      "limits": {"nvidia.com/gpu": 8}}}]}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": annotations or {}},
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {
                "spec": {"parallelism": pods, "completions": pods, "template": pod}}}]}}


def test_the_waiting_gang_starts_when_the_annotated_jobset_is_expected_to_end(
        own_box: Sandbox, own_ns: str, catalog: Catalog,
        capsys: pytest.CaptureFixture[str]) -> None:
    sandbox, namespace = own_box, own_ns
    conn = sandbox.connection()
    info = sandbox.info()
    assert info is not None
    submitted = time.time()
    submit(conn, _jobset(namespace, "train", pods=4,
                         annotations={"muster.dev/expected-runtime": "10m"}),
           catalog, namespace=namespace)
    assert wait_until(lambda: len(bound(pods_in(conn, namespace))) == 4, timeout=120), [
        (p["metadata"]["name"], scheduled_message(p)) for p in pods_in(conn, namespace)]
    submit(conn, _jobset(namespace, "next", pods=2), catalog, namespace=namespace)
    assert wait_until(lambda: len(pods_in(conn, namespace)) == 6, timeout=60)

    assert main(["forecast", "--kubeconfig", info.kubeconfig, "-o", "json"]) == 0
    asked = time.time()
    gangs = {g["workload"]: g for g in json.loads(capsys.readouterr().out)["gangs"]}
    mine = gangs[f"JobSet/{namespace}/next"]
    assert mine["outlook"] == "starts", mine
    assert mine["waitsFor"] == [f"JobSet/{namespace}/train"]
    # The JobSet's pods started after it was submitted, and before the forecast was asked.
    assert RUNTIME - (asked - submitted) - 1 <= mine["startSeconds"] <= RUNTIME, mine

    assert main(["forecast", "--kubeconfig", info.kubeconfig]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.startswith(f"{namespace}/next"))
    assert "in about" in row and f"JobSet/{namespace}/train" in row
