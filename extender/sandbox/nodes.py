"""Fake GPU nodes for a control plane without kubelets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RACK_LABEL = "muster.dev/rack"
NVLINK_LABEL = "muster.dev/nvlink-domain"
#: The nodes KWOK manages (``--manage-nodes-with-annotation-selector``).
FAKE_NODE_ANNOTATION = "muster.dev/fake-node"


def rack_of(slot: int, nodes_per_rack: int) -> int:
    """The rack (and NVLink domain) of the fake node in place ``slot``."""
    return slot // max(nodes_per_rack, 1)


def fake_node(index: int, *, gpus: int, cpu: int = 224, memory_gi: int = 2048,
              storage_gi: int = 30 * 1024, nodes_per_rack: int = 4,
              prefix: str = "gpu-node", ready: bool = True, slot: int | None = None,
              device_plugin: bool = True, labels: Mapping[str, str] | None = None,
              ) -> dict[str, Any]:
    """A Node whose status says it has ``gpus`` GPUs; racks group ``nodes_per_rack`` nodes,
    counted by ``slot`` (its place among all fake nodes; ``index`` when not given).

    ``storage_gi`` is its ephemeral storage (local NVMe): without it, any pod that asks for
    ephemeral storage fails kube-scheduler's own resource fit. With ``ready=False`` the node
    has no conditions: KWOK, its stand-in kubelet, makes it Ready and keeps it so. With
    ``device_plugin=False`` its status has no ``nvidia.com/gpu`` at all (its GPUs, if any,
    exist only in ResourceSlices: extender/sandbox/dra.py)."""
    name = f"{prefix}-{index}"
    rack = rack_of(index if slot is None else slot, nodes_per_rack)
    gpu = {"nvidia.com/gpu": str(gpus)} if device_plugin else {}
    resources = {"cpu": str(cpu), "memory": f"{memory_gi}Gi", **gpu,
                 "ephemeral-storage": f"{storage_gi}Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                RACK_LABEL: f"rack-{rack}",
                NVLINK_LABEL: f"nvl-{rack}",
                **({"nvidia.com/gpu.count": str(gpus)} if device_plugin else {}),
                **(labels or {}),
            },
            "annotations": {FAKE_NODE_ANNOTATION: "true"},
        },
        "status": {
            "capacity": resources,
            "allocatable": resources,
            **({"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "fake node of a Muster sandbox"}]} if ready else {}),
            "nodeInfo": {"kubeletVersion": "fake", "architecture": "amd64",
                         "operatingSystem": "linux"},
        },
    }
