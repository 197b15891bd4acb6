"""``muster record`` against a real kube-apiserver (the session sandbox), then ``muster
simulate`` of the recording: the JobSet's gang is seen, with its bound members."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.cli.main import main
from extender.core.workloads.catalog import Catalog
from extender.files.catalog import packaged_catalog
from extender.files.snapshot import load_snapshot
from extender.sandbox.sandbox import Sandbox
from simulator.snapshot_replay import scenario_from_objects
from tests.e2e.conftest import bound, pods_in, scheduled_message, submit, wait_until

pytestmark = pytest.mark.e2e


def _jobset(namespace: str) -> dict[str, Any]:
    pod = {"spec": {"containers": [{
        "name": "train", "image": "trainer:1",
        "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": 4},
                      "limits": {"nvidia.com/gpu": 4}}}]}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "recorded", "namespace": namespace},
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {
                "spec": {"parallelism": 3, "completions": 3, "template": pod}}}]}}


def test_record_then_simulate_sees_the_bound_gang(
        sandbox: Sandbox, namespace: str, catalog: Catalog, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    conn = sandbox.connection()
    submit(conn, _jobset(namespace), catalog, namespace=namespace)
    assert wait_until(lambda: len(bound(pods_in(conn, namespace))) == 3, timeout=120), [
        (p["metadata"]["name"], scheduled_message(p)) for p in pods_in(conn, namespace)]
    info = sandbox.info()
    assert info is not None
    out = tmp_path / "snapshot.yaml"
    assert main(["record", "--kubeconfig", info.kubeconfig, "-o", str(out)]) == 0
    assert "recorded" in capsys.readouterr().err

    recorded = yaml.safe_load(out.read_text())
    assert recorded["kind"] == "List"
    assert "muster.dev/recorded-at" in recorded["metadata"]["annotations"]
    kinds = {i["kind"] for i in recorded["items"]}
    assert {"Node", "Pod", "JobSet", "Job", "WorkloadDescriptor"} <= kinds

    scenario = scenario_from_objects(load_snapshot(out), catalog=packaged_catalog())
    (spec,) = [w for w in scenario.workloads
               if w.tree.ref.key == f"JobSet/{namespace}/recorded"]
    assert [(g.key, g.min_member) for g in spec.tree.gangs] == [(f"{namespace}/recorded", 3)]
    members = [p for p, m in spec.pods if m is not None and m.gang == f"{namespace}/recorded"]
    assert len(members) == 3 and all(p.node_name for p in members)

    assert main(["simulate", str(out), "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["gangs"]["total"] >= 1
    assert report["gangs"]["admitted"] >= 1
    assert report["gangs"]["partial"] == 0
    assert report["oversubscribed_nodes"] == 0
