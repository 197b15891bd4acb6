"""GpuPacking: fill partly used GPUs first, then free GPUs of used nodes, then idle nodes.

Shared GPU already in use: ``100 - (percent left on it) // 10`` (at least 50). Free GPUs on
a used node: ``50 - GPUs taken`` (at least 33). Idle node: ``33 - free GPUs`` (at least the
number of free GPUs). CPU-only pods score 0 everywhere.
"""

from __future__ import annotations

import numpy as np

from simulator.policies.base import MAX_SCORE, best_fit_device, devices_for
from simulator.trace.cluster import GpuCluster
from simulator.trace.openb import MILLI, IntArray
from simulator.trace.workload import PodShapeKey


class GpuPacking:
    name = "gpupacking"
    randomized = False

    def score(
        self, cluster: GpuCluster, nodes: IntArray, shape: PodShapeKey
    ) -> tuple[IntArray, IntArray]:
        if shape.gpus == 0:
            return np.zeros(len(nodes), dtype=np.int64), devices_for(cluster, nodes, shape)
        free = cluster.full_free[nodes]
        idle = free == cluster.gpu_count[nodes]
        idle_score = np.maximum(MAX_SCORE // 3 - free, free)
        if shape.shares_gpu:
            left = cluster.gpu_left[nodes]
            device = best_fit_device(left, shape.gpu_milli)
            chosen = left[np.arange(len(nodes)), device]
            used_gpu = np.maximum(MAX_SCORE - (chosen * 100 // MILLI) // 10, MAX_SCORE // 2)
            free_gpu = max(MAX_SCORE // 2 - 1, MAX_SCORE // 3)
            busy_score = np.where(chosen == MILLI, free_gpu, used_gpu)
            return np.where(idle, idle_score, busy_score).astype(np.int64), device
        busy = max(MAX_SCORE // 2 - shape.gpus, MAX_SCORE // 3)
        return np.where(idle, idle_score, busy).astype(np.int64), devices_for(
            cluster, nodes, shape
        )
