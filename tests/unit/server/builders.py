"""Builders for API objects the extender tests feed through the wire: nodes, JobSets, pods."""

from __future__ import annotations

from typing import Any

import orjson

from extender.files.catalog import packaged_catalog
from extender.state.build import CatalogSnapshots
from extender.state.store import DESCRIPTORS, NODES, PODS, StateStore

GPU = "nvidia.com/gpu"


class Clock:
    """A clock the test moves by hand (``clock.now += 31``)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def gpu_node(name: str, *, gpus: int = 8, rack: str = "r1") -> dict[str, Any]:
    alloc = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: str(gpus)}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  "rack": rack}},
            "status": {"allocatable": alloc, "capacity": alloc}}


def container(gpus: int) -> dict[str, Any]:
    res = {"cpu": "1", "memory": "1Gi", GPU: str(gpus)} if gpus else {"cpu": "1"}
    return {"name": "main", "image": "trainer",
            "resources": {"requests": res, "limits": {GPU: str(gpus)} if gpus else {}}}


def jobset(name: str, *, workers: int, gpus: int, ns: str = "ml") -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "namespace": ns, "uid": f"js-{name}"},
        "spec": {"replicatedJobs": [{
            "name": "worker", "replicas": 1,
            "template": {"spec": {"parallelism": workers, "completions": workers,
                                  "template": {"spec": {"containers": [container(gpus)]}}}},
        }]},
    }


def job_of(js: str, *, ns: str = "ml") -> dict[str, Any]:
    """The Job a JobSet's worker pods are owned by (the owner chain the descriptor walks)."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{js}-worker-0", "namespace": ns, "uid": f"job-{js}",
                         "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                              "kind": "JobSet", "name": js, "uid": f"js-{js}",
                                              "controller": True}]},
            "spec": {"parallelism": 1, "template": {"spec": {"containers": []}}}}


def jobset_pod(js: str, index: int, *, gpus: int, ns: str = "ml",
               node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": "muster",  # as docs/install.md has users write
                            "containers": [container(gpus)]}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{js}-worker-0-{index}", "namespace": ns,
                     "uid": f"uid-{js}-{index}",
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                          "name": f"{js}-worker-0", "uid": f"job-{js}",
                                          "controller": True}],
                     "labels": {"jobset.sigs.k8s.io/jobset-name": js,
                                "jobset.sigs.k8s.io/replicatedjob-name": "worker",
                                "jobset.sigs.k8s.io/job-index": "0"}},
        "spec": spec, "status": {"phase": "Running" if node else "Pending"},
    }


def plain_pod(name: str, *, gpus: int, ns: str = "default") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}"},
            "spec": {"containers": [container(gpus)]}}


def store_of(objects: list[dict[str, Any]]) -> StateStore:
    store = StateStore(CatalogSnapshots(packaged_catalog()), expected=[NODES, PODS, DESCRIPTORS])
    store.load(objects)
    return store


def filter_body(pod: dict[str, Any], nodes: list[str]) -> bytes:
    return orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": nodes})


def bind_body(pod: dict[str, Any], node: str) -> bytes:
    meta = pod["metadata"]
    return orjson.dumps({"PodName": meta["name"], "PodNamespace": meta["namespace"],
                         "PodUID": meta["uid"], "Node": node})


def plan_nodes(gangs: list[dict[str, Any]], key: str) -> list[str]:
    """The nodes of gang ``key``'s plan, sorted, from ``/inspect/gangs``' list (none: [])."""
    [gang] = [g for g in gangs if g["gang"] == key]
    return sorted({slot["node"] for slot in gang["plan"] or ()})
