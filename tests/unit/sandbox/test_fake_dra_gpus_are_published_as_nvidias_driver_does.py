"""The sandbox's DRA GPU nodes, without starting it: what stands in for NVIDIA's GPU DRA
driver (extender/sandbox/dra.py), the node counts per GPU model, and the flags."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from extender.cli.errors import CliError
from extender.cli.main import build_parser
from extender.cli.sandbox import _spec
from extender.sandbox.components import CONTROLLERS
from extender.sandbox.config import SchedulerMode, scheduler_config
from extender.sandbox.dra import (
    CLIQUE_ATTRIBUTE,
    CLIQUE_LABEL,
    GpuModel,
    device_classes,
    dra_node,
    node_slices,
)
from extender.sandbox.nodes import fake_node
from extender.sandbox.spec import SandboxSpec


def _up(*flags: str) -> SandboxSpec:
    return _spec(build_parser().parse_args(["sandbox", "up", "--dir", "/x", *flags]))


def _gpus(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for s in slices if s["spec"]["driver"] == "gpu.nvidia.com"
            for d in s["spec"].get("devices", [])]


def test_the_gpu_class_serves_nvidia_com_gpu_only_in_the_extended_models() -> None:
    for model in GpuModel:
        classes = {c["metadata"]["name"]: c["spec"] for c in device_classes(model)}
        assert sorted(classes) == ["compute-domain-default-channel.nvidia.com",
                                   "gpu.nvidia.com", "mig.nvidia.com"]
        assert classes["gpu.nvidia.com"].get("extendedResourceName") == (
            "nvidia.com/gpu" if model in (GpuModel.DRA_EXTENDED, GpuModel.MIXED) else None)
    gpu = device_classes(GpuModel.DRA)[0]
    assert gpu["apiVersion"] == "resource.k8s.io/v1"
    assert gpu["spec"]["selectors"] == [{"cel": {"expression":
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]


def test_a_dra_node_has_no_nvidia_gpu_in_its_status_and_a_device_plugin_node_does() -> None:
    node = dra_node(1, slot=5, nodes_per_rack=4)
    assert node["metadata"]["name"] == "dra-node-1"
    assert "nvidia.com/gpu" not in node["status"]["capacity"]
    assert "nvidia.com/gpu" not in node["status"]["allocatable"]
    assert "nvidia.com/gpu.count" not in node["metadata"]["labels"]
    assert node["metadata"]["labels"]["muster.dev/rack"] == "rack-1"  # slot 5, 4 per rack
    assert node["metadata"]["labels"][CLIQUE_LABEL].endswith(".1")
    assert fake_node(0, gpus=8)["status"]["allocatable"]["nvidia.com/gpu"] == "8"


def test_a_node_publishes_eight_whole_gpus_and_one_channel_in_one_pool_named_after_it() -> None:
    node = dra_node(0, slot=0, nodes_per_rack=4)
    slices = node_slices(node, gpus=8, partitions=False)
    assert [(s["spec"]["driver"], s["spec"]["nodeName"], s["spec"]["pool"]) for s in slices] == [
        (driver, "dra-node-0", {"name": "dra-node-0", "generation": 1, "resourceSliceCount": 1})
        for driver in ("gpu.nvidia.com", "compute-domain.nvidia.com")]
    gpus = _gpus(slices)
    assert [g["name"] for g in gpus] == [f"gpu-{i}" for i in range(8)]
    for gpu in gpus:
        attributes = gpu["attributes"]
        assert attributes["type"] == {"string": "gpu"}
        assert attributes["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
        assert attributes["architecture"] == {"string": "Hopper"}
        assert set(attributes["cudaComputeCapability"]) == {"version"}
        assert attributes[CLIQUE_ATTRIBUTE] == {
            "string": node["metadata"]["labels"][CLIQUE_LABEL]}
        assert gpu["capacity"] == {"memory": {"value": "80Gi"}}
    assert len({g["attributes"]["uuid"]["string"] for g in gpus}) == 8
    assert len({g["attributes"]["resource.kubernetes.io/pciBusID"]["string"]
                for g in gpus}) == 8
    [channel] = slices[1]["spec"]["devices"]
    assert channel == {"name": "channel-0",
                       "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}}


def test_partitionable_gpus_share_counter_sets_within_the_api_servers_limits() -> None:
    node = dra_node(0, slot=0, nodes_per_rack=4)
    slices = node_slices(node, gpus=8, partitions=True)
    gpu_slices = [s for s in slices if s["spec"]["driver"] == "gpu.nvidia.com"]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in gpu_slices} == {len(gpu_slices)}
    for s in gpu_slices:  # resource.k8s.io/v1: one kind of content; 64 devices, 8 sets
        assert ("devices" in s["spec"]) != ("sharedCounters" in s["spec"])
        assert len(s["spec"].get("devices", [])) <= 64
        assert len(s["spec"].get("sharedCounters", [])) <= 8
    sets = {c["name"]: c["counters"] for s in gpu_slices
            for c in s["spec"].get("sharedCounters", [])}
    assert sorted(sets) == sorted(f"gpu-{i}-counter-set" for i in range(8))
    devices = _gpus(slices)
    assert not [n for n, k in Counter(d["name"] for d in devices).items() if k > 1]
    for device in devices:
        [use] = device["consumesCounters"]
        assert set(use["counters"]) <= set(sets[use["counterSet"]])
        if device["attributes"]["type"]["string"] == "gpu":
            assert use["counters"] == sets[use["counterSet"]]  # the whole GPU takes all
    profiles = Counter(d["attributes"]["profile"]["string"] for d in devices
                       if d["attributes"]["type"]["string"] == "mig")
    assert profiles == {"1g.10gb": 56, "3g.40gb": 16, "7g.80gb": 8}
    assert "gpu-0-mig-1g10gb-19-6" in {d["name"] for d in devices}  # NVIDIA's naming


def test_each_gpu_model_has_its_kinds_of_node() -> None:
    assert SandboxSpec().node_counts() == (4, 0)
    assert SandboxSpec(gpu_model=GpuModel.DRA).node_counts() == (0, 3)
    assert SandboxSpec(gpu_model=GpuModel.DRA_EXTENDED, dra_nodes=2).node_counts() == (0, 2)
    assert SandboxSpec(gpu_model=GpuModel.MIXED, nodes=2).node_counts() == (2, 3)


def test_the_gpu_model_flags() -> None:
    assert _up().gpu_model is GpuModel.DEVICE_PLUGIN
    dra = _up("--gpu-model", "dra", "--dra-nodes", "5", "--dra-partitions")
    assert (dra.gpu_model, dra.node_counts(), dra.dra_partitions) == (GpuModel.DRA, (0, 5), True)
    assert _up("--gpu-model", "mixed", "--nodes", "1").node_counts() == (1, 3)
    for flags in (("--gpu-model", "dra", "--nodes", "2"), ("--dra-nodes", "2"),
                  ("--dra-partitions",), ("--gpu-model", "dra", "--dra-nodes", "0")):
        with pytest.raises(CliError):
            _up(*flags)


def test_claim_only_pods_reach_muster_and_kube_controller_manager_makes_their_claims() -> None:
    config = scheduler_config(kubeconfig=Path("/k"), mode=SchedulerMode.MUSTER, muster_port=1,
                              bind_timeout=20.0)
    extenders = config["extenders"]
    assert isinstance(extenders, list) and len(extenders) == 1
    assert "managedResources" not in extenders[0]
    assert "resourceclaim-controller" in CONTROLLERS
