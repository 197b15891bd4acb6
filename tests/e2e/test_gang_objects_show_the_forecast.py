"""The running ``muster serve`` keeps each waiting gang's forecast on its Gang object, against a
real kube-apiserver (a sandbox of its own: a forecast reads the whole cluster, and workloads
other tests leave in a shared sandbox would rightly change it): a JobSet annotated with its
expected runtime fills the cluster, a gang waits behind it, and the waiting gang's Gang object
says when it is expected to start and that it waits for the JobSet; ``kubectl get gangs``
shows the start in its Expected Start column, ``muster describe`` says it, and ``muster fit``
says a third JobSet would wait for the same one."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.cli.main import main
from extender.core.model.objects import timestamp
from extender.core.workloads.catalog import Catalog
from extender.kube.client import Connection, NotFound
from extender.kube.gangobjects import PATH
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
FORECAST_WITHIN = 120.0
"""Seconds the forecast may take to show: the default --forecast-every (30s) spaced by the
recompute's own time, after the gang's pods are created."""


@pytest.fixture(scope="module")
def own_box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """4 nodes x 8 GPUs, nothing else on them."""
    box = start_sandbox(Path(tmp_path_factory.mktemp("forecast-objects")))
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


def _forecast(conn: Connection, namespace: str, name: str) -> dict[str, Any]:
    try:
        obj = conn.request("GET", f"{PATH.format(namespace=namespace)}/{name}")
    except NotFound:
        return {}
    found: dict[str, Any] = (obj.get("status") or {}).get("forecast") or {}
    return found


def test_a_waiting_gangs_object_says_when_it_starts_and_names_the_jobset_it_waits_for(
        own_box: Sandbox, own_ns: str, catalog: Catalog, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    sandbox, namespace = own_box, own_ns
    conn = sandbox.connection()
    submitted = time.time()
    submit(conn, _jobset(namespace, "train", pods=4,
                         annotations={"muster.dev/expected-runtime": "10m"}),
           catalog, namespace=namespace)
    assert wait_until(lambda: len(bound(pods_in(conn, namespace))) == 4, timeout=120), [
        (p["metadata"]["name"], scheduled_message(p)) for p in pods_in(conn, namespace)]
    submit(conn, _jobset(namespace, "next", pods=2), catalog, namespace=namespace)
    assert wait_until(lambda: len(pods_in(conn, namespace)) == 6, timeout=60)

    assert wait_until(lambda: bool(_forecast(conn, namespace, "jobset-next").get("waitsFor")),
                      timeout=FORECAST_WITHIN, interval=1.0), \
        _forecast(conn, namespace, "jobset-next")
    forecast = _forecast(conn, namespace, "jobset-next")
    assert forecast["waitsFor"] == [f"JobSet/{namespace}/train"], forecast
    assert forecast["unknownRuntimes"] == [] and forecast["upperBound"] is False, forecast
    # The JobSet's pods started after it was submitted: it ends 10 minutes after that.
    start = timestamp(forecast["start"])
    assert submitted + RUNTIME - 1 <= start <= time.time() + RUNTIME, forecast
    # The running gang waits for nothing: its object says so.
    assert _forecast(conn, namespace, "jobset-train").get("start") == ""

    info = sandbox.info()
    assert info is not None
    listed = subprocess.run(
        [info.kubectl, "get", "gangs", "-n", namespace, "--kubeconfig", info.kubeconfig],
        capture_output=True, text=True, timeout=60, check=True).stdout.splitlines()
    header = listed[0]
    row = next(line for line in listed if line.startswith("jobset-next "))
    at = header.index("EXPECTED START")
    assert row[at:].split()[0] == forecast["start"], listed

    # muster describe reads it from the Gang object.
    capsys.readouterr()
    assert main(["describe", "jobset/next", "-n", namespace,
                 "--kubeconfig", info.kubeconfig]) == 0
    said = capsys.readouterr().out
    assert "forecast: expected to start in about" in said, said
    assert f"when {namespace}/train finishes" in said, said

    # muster fit -f, before submitting: a third JobSet would wait for the same JobSet.
    later = tmp_path / "later.yaml"
    later.write_text(yaml.safe_dump(_jobset(namespace, "later", pods=2)))
    assert main(["fit", "-f", str(later), "--kubeconfig", info.kubeconfig, "-o", "json"]) == 1
    [cluster] = json.loads(capsys.readouterr().out)["clusters"]
    [gang] = cluster["forecast"]
    assert (gang["gang"], gang["outlook"]) == (f"{namespace}/later", "starts"), gang
    assert gang["waitsFor"] == [f"JobSet/{namespace}/train"], gang
