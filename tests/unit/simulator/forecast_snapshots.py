"""Hand-made snapshots for the forecast's tests: 8-GPU nodes, JobSets of 8-GPU pods, and the
running pods of a JobSet as a live cluster lists them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

T0 = 1_800_000_000.0
NOW = T0 + 240  # the running workloads' pods started 4m ago


def stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8",
                                       "pods": "110"}}}


def jobset(name: str, *, pods: int = 2, runtime: str | None = None,
           created: float = T0 - 600, priority_class: str | None = None) -> dict[str, Any]:
    """A JobSet of ``pods`` pods of 8 GPUs each."""
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {
        "requests": {"cpu": "1", "nvidia.com/gpu": 8}, "limits": {"nvidia.com/gpu": 8}}}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "uid": f"uid-{name}",
                            "creationTimestamp": stamp(created)}
    if runtime is not None:
        meta["annotations"] = {"muster.dev/expected-runtime": runtime}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta,
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
                "parallelism": pods, "completions": pods, "template": {"spec": spec}}}}]}}


def running_pods(name: str, *nodes: str) -> list[dict[str, Any]]:
    """The pods of JobSet ``name``, one of 8 GPUs on each of ``nodes``, started at T0."""
    return [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"{name}-w-0-{i}", "namespace": "ml", "uid": f"uid-{name}-{i}",
                          "creationTimestamp": stamp(T0 - 10),
                          "labels": {"jobset.sigs.k8s.io/jobset-name": name,
                                     "jobset.sigs.k8s.io/replicatedjob-name": "w"},
                          "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                               "kind": "JobSet", "name": name,
                                               "uid": f"uid-{name}", "controller": True}]},
             "spec": {"nodeName": n, "containers": [{"name": "c", "resources": {
                 "requests": {"cpu": "1", "nvidia.com/gpu": 8},
                 "limits": {"nvidia.com/gpu": 8}}}]},
             "status": {"phase": "Running", "startTime": stamp(T0)}}
            for i, n in enumerate(nodes)]
