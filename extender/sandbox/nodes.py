"""Fake GPU nodes for a control plane without kubelets."""

from __future__ import annotations

from typing import Any

RACK_LABEL = "muster.dev/rack"
NVLINK_LABEL = "muster.dev/nvlink-domain"
#: The nodes KWOK manages (``--manage-nodes-with-annotation-selector``).
FAKE_NODE_ANNOTATION = "muster.dev/fake-node"


def fake_node(index: int, *, gpus: int, cpu: int = 224, memory_gi: int = 2048,
              storage_gi: int = 30 * 1024, nodes_per_rack: int = 4,
              prefix: str = "gpu-node", ready: bool = True) -> dict[str, Any]:
    """A Node whose status says it has ``gpus`` GPUs; racks group ``nodes_per_rack`` nodes.

    ``storage_gi`` is its ephemeral storage (local NVMe): without it, any pod that asks for
    ephemeral storage fails kube-scheduler's own resource fit. With ``ready=False`` the node
    has no conditions: KWOK, its stand-in kubelet, makes it Ready and keeps it so."""
    name = f"{prefix}-{index}"
    resources = {"cpu": str(cpu), "memory": f"{memory_gi}Gi", "nvidia.com/gpu": str(gpus),
                 "ephemeral-storage": f"{storage_gi}Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                RACK_LABEL: f"rack-{index // max(nodes_per_rack, 1)}",
                NVLINK_LABEL: f"nvl-{index // max(nodes_per_rack, 1)}",
                "nvidia.com/gpu.count": str(gpus),
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
