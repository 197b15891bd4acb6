"""GPUs that pods take through ResourceClaims, read from files: ``describe -f`` counts a
workload's claim GPUs from the ResourceClaimTemplate in the same file, and ``fit`` places its
gangs on the devices a snapshot's ResourceSlices publish, less what its claims hold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.unit.cli.helpers import muster
from tests.unit.cli.snapshots import write
from tests.unit.core.devices.dra_objects import (
    claim,
    device_class,
    gpu_node_slice,
    node,
    template,
)


def jobset(workers: int) -> dict[str, Any]:
    pod = {"restartPolicy": "Never",
           "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "eight"}],
           "containers": [{"name": "train", "image": "trainer",
                           "resources": {"claims": [{"name": "gpus"}]}}]}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "train", "namespace": "ml"},
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
                "parallelism": workers, "completions": workers,
                "template": {"spec": pod}}}}]}}


def workload_file(tmp_path: Path, workers: int = 3) -> Path:
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump_all([jobset(workers), template("eight", "ml", count=8)]))
    return path


def dra_cluster(tmp_path: Path, nodes: int, *extra: dict[str, Any]) -> Path:
    return write(tmp_path / "cluster.yaml", device_class(),
                 *(node(f"dra-{i}") for i in range(nodes)),
                 *(gpu_node_slice(f"dra-{i}") for i in range(nodes)), *extra)


def test_describe_counts_the_gpus_of_a_claim_template_in_the_same_file(capsys, tmp_path):
    ran = muster(capsys, "describe", "-f", workload_file(tmp_path), "-o", "json")
    assert ran.code == 0, ran.err
    data = ran.json()
    assert data["totals"]["gpus"] == 24, data["totals"]


def test_fit_places_a_claim_gang_on_the_nodes_whose_slices_hold_its_devices(capsys, tmp_path):
    ran = muster(capsys, "fit", "-f", workload_file(tmp_path), "--snapshot",
                 dra_cluster(tmp_path, 3), "-o", "json")
    assert ran.code == 0, ran.out + ran.err
    (gang,) = ran.json()["clusters"][0]["gangs"]
    assert gang["plan"] == {"dra-0": 1, "dra-1": 1, "dra-2": 1}


def test_fit_names_the_device_class_and_what_claims_left_free(capsys, tmp_path):
    held = claim("other-gpus", "ml", count=4, allocated=[("dra-2", f"gpu-{i}") for i in range(4)])
    ran = muster(capsys, "fit", "-f", workload_file(tmp_path), "--snapshot",
                 dra_cluster(tmp_path, 3, held), "-o", "json")
    assert ran.code == 1
    (gang,) = ran.json()["clusters"][0]["gangs"]
    assert gang["placed"] == 2 and gang["fits"] is False
    assert "needs 8 gpu.nvidia.com devices on one node, the most free is 4" in gang["reason"]


def test_fit_on_a_cluster_without_the_class_says_so(capsys, tmp_path):
    cluster = write(tmp_path / "plain.yaml", node("n0", gpus=8), node("n1", gpus=8),
                    node("n2", gpus=8))
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump_all([jobset(3), template("eight", "ml", count=8)]))
    ran = muster(capsys, "fit", "-f", path, "--snapshot", cluster, "-o", "json")
    assert ran.code == 1
    (gang,) = ran.json()["clusters"][0]["gangs"]
    assert "DeviceClass gpu.nvidia.com does not exist" in gang["reason"]
