"""Builders for the gang replay's tests: nodes, pod shapes, pods and a scheduler model."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from extender.core.model.resources import Resources
from extender.core.model.values import (
    NodeInfo,
    NodeName,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodInfo,
    PodPhase,
    PodShape,
    Taint,
    Toleration,
    freeze_labels,
)
from simulator.cluster import ClusterModel
from simulator.engine import EventQueue
from simulator.scheduler import SchedulerModel
from simulator.scheduler_values import Mode, SchedulerSettings


def make_node(name: str, *, gpus: int = 8, cpu: int = 64, memory_gi: int = 512,
              labels: dict[str, str] | None = None, taints: Sequence[Taint] = (),
              cordoned: bool = False) -> NodeInfo:
    alloc = {"cpu": cpu * 1000, "memory": memory_gi * 2**30 * 1000, "pods": 110_000}
    if gpus:
        alloc["nvidia.com/gpu"] = gpus * 1000
    return NodeInfo(name=NodeName(name), allocatable=Resources(alloc),
                    labels=freeze_labels({"kubernetes.io/hostname": name, **(labels or {})}),
                    taints=tuple(taints), unschedulable=cordoned)


def make_shape(*, gpus: int = 0, cpu: int = 1, memory_gi: int = 4, share: int = 0,
               selector: dict[str, str] | None = None, tolerations: Sequence[Toleration] = (),
               affinity: Sequence[NodeSelectorTerm] = (), priority: int = 0) -> PodShape:
    req = {"cpu": cpu * 1000, "memory": memory_gi * 2**30 * 1000}
    if gpus or share:
        req["nvidia.com/gpu"] = max(gpus, 1) * 1000
    return PodShape(requests=Resources(req), gpu_share=share,
                    node_selector=freeze_labels(selector), affinity=tuple(affinity),
                    tolerations=tuple(tolerations), priority=priority)


def label_in(key: str, *values: str) -> NodeSelectorTerm:
    return NodeSelectorTerm(match_expressions=(
        NodeSelectorRequirement(key=key, operator="In", values=values),))


def make_pod(name: str, shape: PodShape, *, node: str | None = None,
             devices: tuple[int, ...] = ()) -> PodInfo:
    return PodInfo(uid=f"uid-{name}", namespace="t", name=name, shape=shape,
                   node_name=NodeName(node) if node else None,
                   phase=PodPhase.RUNNING if node else PodPhase.PENDING, gpu_devices=devices)


class Recorder:
    """A scheduler model on ``nodes`` whose binds are recorded in order."""

    def __init__(self, nodes: Iterable[NodeInfo], *, mode: Mode = Mode.DEFAULT,
                 seed: int = 0) -> None:
        self.cluster = ClusterModel(nodes)
        self.events: EventQueue[object] = EventQueue()
        self.bound: list[tuple[str, str]] = []
        self.scheduler = SchedulerModel(
            self.cluster, SchedulerSettings(mode=mode, seed=seed), events=self.events,
            on_bound=lambda pod, _now: self.bound.append((pod.name, str(pod.node_name))))

    def add(self, pod: PodInfo, *, now: float = 0.0) -> None:
        self.cluster.add_pod(pod, None)
        if pod.node_name is None:
            self.scheduler.enqueue(pod.uid, now)

    def feasible(self, shape: PodShape) -> list[str]:
        demand = self.cluster.demand(shape)
        return sorted(n for _, names in self.cluster.feasible(shape, demand) for n in names)
