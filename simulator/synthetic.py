"""A seeded generator of gang workloads for what-if studies and scale tests.

Workloads are real manifests (JobSet, PyTorchJob, LeaderWorkerSet, RayCluster) resolved through
the real descriptors, so a synthetic day exercises the same roles, minimums and gangs a
cluster would. Everything is drawn from one ``random.Random(seed)``: the same spec and seed
give the same day.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.core.model.resources import Resources
from extender.core.model.values import NodeInfo, NodeName, freeze_labels
from extender.core.workloads.catalog import Catalog
from extender.core.workloads.workload import resolve_workload
from simulator.controllers import dns_name
from simulator.simulation import Scenario, WorkloadSpec

KINDS = ("JobSet", "PyTorchJob", "LeaderWorkerSet", "RayCluster")
TOPOLOGIES = ("none", "required", "preferred", "exclusive")
RACK = "rack"
GPU_PRODUCT = "nvidia.com/gpu.product"
_ANNOTATIONS = {
    "none": {},
    "required": {"muster.dev/topology-required": RACK},
    "preferred": {"muster.dev/topology-preferred": RACK},
    "exclusive": {"muster.dev/topology-required": RACK, "muster.dev/topology-exclusive": "true"},
}


@dataclass(frozen=True, slots=True)
class SyntheticSpec:
    nodes: int = 100
    gpus_per_node: int = 8
    cpu_per_node: int = 96
    memory_gib_per_node: int = 1024
    workloads: int = 200
    kinds: tuple[str, ...] = KINDS
    gang_sizes: tuple[int, ...] = (1, 2, 4, 8, 16)
    """Pods per gang, drawn uniformly."""
    gpus_per_pod: tuple[int, ...] = (1, 2, 4, 8)
    arrival_rate: float = 0.1
    """Workloads per second (exponential gaps)."""
    runtime: tuple[float, float] = (600.0, 7200.0)
    """Run time, uniform between the two, in seconds."""
    namespace: str = "sim"
    elastic: float = 0.0
    """Share of PyTorchJobs (with two or more workers) whose workers are elastic: their
    minimum is half the workers, so members beyond it are bound as surplus."""
    racks: int = 0
    """Racks the nodes are split into (label ``rack``, contiguous blocks); 0: no racks."""
    topology: str = "none"
    """What each workload asks of racks (``muster.dev/topology-*`` annotations): ``none``,
    ``required``, ``preferred`` or ``exclusive``."""
    gpu_types: int = 0
    """GPU models the nodes are split into (label ``nvidia.com/gpu.product``, contiguous
    blocks, as GPU Feature Discovery labels them); each workload's GPU pods select one model,
    drawn uniformly. 0: one model, no selector."""
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = [k for k in self.kinds if k not in KINDS]
        if unknown:
            raise ValueError(f"unknown synthetic kind {', '.join(unknown)}; "
                             f"choose from {', '.join(KINDS)}")
        if self.nodes <= 0 or self.workloads < 0 or self.arrival_rate <= 0:
            raise ValueError("synthetic: nodes and arrival rate must be positive")
        if not self.gang_sizes or min(self.gang_sizes) < 1:
            raise ValueError("synthetic: gang sizes must be at least 1")
        if not self.gpus_per_pod or min(self.gpus_per_pod) < 0:
            raise ValueError("synthetic: GPUs per pod must be at least 0")
        if not 0 < self.runtime[0] <= self.runtime[1]:
            raise ValueError("synthetic: runtime needs 0 < low <= high")
        if not 0 <= self.elastic <= 1:
            raise ValueError("synthetic: elastic is a share between 0 and 1")
        if not 0 <= self.racks <= self.nodes:
            raise ValueError("synthetic: racks must be between 0 and the number of nodes")
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"synthetic: topology {self.topology!r}; choose from "
                             f"{', '.join(TOPOLOGIES)}")
        if not 0 <= self.gpu_types <= self.nodes:
            raise ValueError("synthetic: gpu types must be between 0 and the number of nodes")
        if self.topology != "none" and not self.racks:
            raise ValueError("synthetic: topology needs racks (racks=2)")


def make_nodes(spec: SyntheticSpec) -> tuple[NodeInfo, ...]:
    alloc = Resources.parse({"cpu": spec.cpu_per_node, "memory": f"{spec.memory_gib_per_node}Gi",
                             "nvidia.com/gpu": spec.gpus_per_node, "pods": 110})
    width = len(str(spec.nodes - 1))

    def labels(i: int) -> dict[str, str]:
        out = {"kubernetes.io/hostname": f"node-{i:0{width}d}"}
        if spec.racks:  # contiguous blocks, as racks are cabled
            out[RACK] = f"rack-{i * spec.racks // spec.nodes}"
        if spec.gpu_types:
            out[GPU_PRODUCT] = gpu_model(i * spec.gpu_types // spec.nodes)
        return out

    return tuple(NodeInfo(name=NodeName(f"node-{i:0{width}d}"), allocatable=alloc,
                          labels=freeze_labels(labels(i)))
                 for i in range(spec.nodes))


def gpu_model(i: int) -> str:
    """The ``nvidia.com/gpu.product`` of the ``i``-th GPU model of a synthetic day."""
    return f"GPU-MODEL-{chr(ord('A') + i % 26)}{i // 26 or ''}"


def _pod_template(gpus: int, cpu: int, memory_gib: int,
                  model: str | None = None) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": gpus} if gpus else {}
    spec: dict[str, Any] = {"schedulerName": "muster", "containers": [{
        "name": "main", "image": "trainer:latest",
        "resources": {"requests": {"cpu": cpu, "memory": f"{memory_gib}Gi", **limits},
                      "limits": limits}}]}
    if model is not None and gpus:
        spec["nodeSelector"] = {GPU_PRODUCT: model}
    return {"spec": spec}


def manifest(kind: str, name: str, *, namespace: str, pods: int, gpus: int, cpu: int,
             memory_gib: int, elastic: bool = False, model: str | None = None) -> dict[str, Any]:
    """A workload of ``kind`` whose one gang has ``pods`` pods of ``gpus`` GPUs each
    (``elastic``: a PyTorchJob whose minimum is half its workers; ``model``: the GPU model
    its GPU pods select)."""
    template = _pod_template(gpus, cpu, memory_gib, model)
    meta = {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}"}
    if kind == "JobSet":
        return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta,
                "spec": {"replicatedJobs": [{"name": "trainer", "replicas": 1, "template": {
                    "spec": {"parallelism": pods, "completions": pods,
                             "template": template}}}]}}
    if kind == "PyTorchJob":
        specs: dict[str, Any] = {"Master": {"replicas": 1, "template": template}}
        spec: dict[str, Any] = {"pytorchReplicaSpecs": specs}
        if pods > 1:
            specs["Worker"] = {"replicas": pods - 1, "template": template}
            if elastic and pods > 2:
                spec["elasticPolicy"] = {"minReplicas": (pods - 1) // 2,
                                         "maxReplicas": pods - 1}
        return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta,
                "spec": spec}
    if kind == "LeaderWorkerSet":
        return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                "metadata": meta, "spec": {"replicas": 1, "leaderWorkerTemplate": {
                    "size": pods, "workerTemplate": template}}}
    if kind == "RayCluster":
        head = _pod_template(0, 2, 8)
        ray: dict[str, Any] = {"headGroupSpec": {"template": head}, "workerGroupSpecs": []}
        if pods > 1:
            ray["workerGroupSpecs"] = [{"groupName": "gpu", "replicas": pods - 1,
                                         "template": template}]
        return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": meta,
                "spec": ray}
    raise ValueError(f"unknown synthetic kind {kind!r}")


def generate(spec: SyntheticSpec, *, seed: int, catalog: Catalog) -> Scenario:
    """A cluster of identical GPU nodes and ``spec.workloads`` gang workloads."""
    rng = random.Random(seed)
    cpu_per_gpu = max(1, spec.cpu_per_node // max(spec.gpus_per_node, 1))
    mem_per_gpu = max(1, spec.memory_gib_per_node // max(spec.gpus_per_node, 1))
    clock = 0.0
    workloads = []
    fits = [g for g in spec.gpus_per_pod if g <= spec.gpus_per_node] or [spec.gpus_per_node]
    for i in range(spec.workloads):
        clock += rng.expovariate(spec.arrival_rate)
        kind = rng.choice(spec.kinds)
        pods = rng.choice(spec.gang_sizes)
        gpus = rng.choice(fits)
        runtime = round(rng.uniform(*spec.runtime), 1)
        # Drawn only when asked for, so days without elastic jobs keep their random stream.
        elastic = spec.elastic > 0 and kind == "PyTorchJob" and rng.random() < spec.elastic
        model = gpu_model(rng.randrange(spec.gpu_types)) if spec.gpu_types else None
        obj = manifest(kind, dns_name(kind, i), namespace=spec.namespace, pods=pods, gpus=gpus,
                       cpu=max(1, gpus) * cpu_per_gpu // 2,
                       memory_gib=max(1, gpus) * mem_per_gpu // 2, elastic=elastic,
                       model=model)
        if spec.topology != "none":
            obj["metadata"]["annotations"] = dict(_ANNOTATIONS[spec.topology])
        descriptor = catalog.for_object(obj)
        if descriptor is None:
            raise ValueError(f"the catalog has no descriptor for {kind}")
        tree = resolve_workload(obj, descriptor)
        workloads.append(WorkloadSpec(tree=tree, policy=descriptor.gangs.policy,
                                      arrival=round(clock, 3), runtime=runtime))
    return Scenario(nodes=make_nodes(spec), workloads=tuple(workloads),
                    name=f"synthetic seed {seed}", domain_label=RACK if spec.racks else None)
