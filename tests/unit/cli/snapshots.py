"""Snapshot files as `kubectl get nodes,pods -A -o yaml` prints them, built for fit tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def node(name: str, *, gpus: int = 8, cpu: str = "64", memory: str = "512Gi",
         taint: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if taint:
        spec["taints"] = [{"key": taint, "value": "true", "effect": "NoSchedule"}]
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": spec,
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110",
                                       "nvidia.com/gpu": str(gpus)}}}


def pod(name: str, node_name: str, *, gpus: int = 0, cpu: str = "0",
        phase: str = "Running") -> dict[str, Any]:
    limits: dict[str, Any] = {"nvidia.com/gpu": gpus} if gpus else {}
    if cpu != "0":
        limits["cpu"] = cpu
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "others"},
            "spec": {"nodeName": node_name,
                     "containers": [{"name": "c", "resources": {"limits": limits}}]},
            "status": {"phase": phase}}


def write(path: Path, *objects: dict[str, Any]) -> Path:
    """A ``List`` document, as kubectl writes it."""
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": list(objects)}))
    return path
