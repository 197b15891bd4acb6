"""The GPU cluster of trace mode as numpy columns: CPU, memory and milli-GPU left per device.

One row per node, one column per GPU device (padded to 8 with 0, which no request can use).
Scoring reads these arrays for many nodes at once; binding changes one row and bumps that
node's ``version`` so cached scores for it are recomputed.
"""

from __future__ import annotations

import numpy as np

from simulator.trace.openb import MAX_GPUS_PER_NODE, MILLI, IntArray, NodeTable
from simulator.trace.workload import PodShapeKey

BoolArray = np.ndarray[tuple[int], np.dtype[np.bool_]]


def affinity_bit(shape: PodShapeKey) -> int:
    """The GPU-affinity tag GpuClustering groups pods by: shared, or k whole GPUs (0 = no GPU)."""
    if shape.gpus == 0:
        return 0
    if shape.shares_gpu:
        return 1
    return 1 << min(shape.gpus, 62)


class GpuCluster:
    """Mutable state of one replay (owned by one experiment, never shared)."""

    def __init__(self, nodes: NodeTable) -> None:
        n = len(nodes)
        self.nodes = nodes
        self.cpu_capacity = nodes.cpu.copy()
        self.cpu_left = nodes.cpu.copy()
        self.memory_left = nodes.memory.copy()
        self.gpu_count = nodes.gpus.copy()
        devices = np.arange(MAX_GPUS_PER_NODE)[None, :]
        self.gpu_left: IntArray = np.where(devices < self.gpu_count[:, None], MILLI, 0).astype(
            np.int64
        )
        self.full_free = self.gpu_count.copy()
        self.max_left = np.where(self.gpu_count > 0, MILLI, 0).astype(np.int64)
        self.tags = np.zeros(n, dtype=np.int64)
        self.version = np.zeros(n, dtype=np.int64)
        self.used_gpu_milli = 0
        self._model_masks: dict[str, BoolArray] = {}

    def __len__(self) -> int:
        return len(self.cpu_left)

    @property
    def total_gpu_milli(self) -> int:
        return int(self.gpu_count.sum()) * MILLI

    def model_mask(self, spec: str) -> BoolArray:
        """Nodes whose GPU model is one of ``spec`` (``A|B``); all nodes when ``spec`` is empty."""
        mask = self._model_masks.get(spec)
        if mask is None:
            allowed = {m for m in spec.split("|") if m}
            mask = np.array(
                [not allowed or model in allowed for model in self.nodes.models], dtype=np.bool_
            )
            self._model_masks[spec] = mask
        return mask

    def feasible(self, shape: PodShapeKey, *, cpu: int, memory: int) -> BoolArray:
        """Nodes passing kube-scheduler's resource fit and the GPU-sharing filter."""
        ok = (self.cpu_left >= cpu) & (self.memory_left >= memory)
        if shape.gpus == 0:
            return ok
        ok &= self.model_mask(shape.gpu_spec)
        if shape.shares_gpu:
            return ok & (self.max_left >= shape.gpu_milli)
        return ok & (self.full_free >= shape.gpus)

    def exclusive_devices(self, node: int, gpus: int) -> list[int]:
        """The first ``gpus`` fully free devices by index, as the GPU-share plugin assigns."""
        free = np.flatnonzero(self.gpu_left[node] == MILLI)
        return [int(d) for d in free[:gpus]]

    def bind(self, node: int, shape: PodShapeKey, *, cpu: int, memory: int, device: int) -> None:
        """Place a pod: ``device`` for a GPU-sharing pod, ignored otherwise."""
        self.cpu_left[node] -= cpu
        self.memory_left[node] -= memory
        if shape.gpus:
            row = self.gpu_left[node]
            if shape.shares_gpu:
                row[device] -= shape.gpu_milli
            else:
                row[self.exclusive_devices(node, shape.gpus)] = 0
            self.full_free[node] = int((row == MILLI).sum())
            self.max_left[node] = int(row.max())
            self.used_gpu_milli += shape.gpus * shape.gpu_milli
            self.tags[node] |= affinity_bit(shape)
        self.version[node] += 1
