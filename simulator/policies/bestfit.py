"""BestFit: prefer the node with the least CPU and GPU left after placing the pod.

``100 * (1 - sum_r 0.5 * (free_r - request_r) / maxspec_r)`` over r = CPU, total GPU,
truncated. (The paper then rescales scores to 0..100, which keeps their order and ties.)
"""

from __future__ import annotations

import numpy as np

from simulator.policies.base import MAX_SCORE, MAX_SPEC_CPU, MAX_SPEC_GPU, devices_for
from simulator.trace.cluster import GpuCluster
from simulator.trace.openb import IntArray
from simulator.trace.workload import PodShapeKey

WEIGHT = 0.5


class BestFit:
    name = "bestfit"
    randomized = False

    def score(
        self, cluster: GpuCluster, nodes: IntArray, shape: PodShapeKey
    ) -> tuple[IntArray, IntArray]:
        cpu_rest = (cluster.cpu_left[nodes] - shape.cpu) / MAX_SPEC_CPU * WEIGHT
        gpu_rest = (
            (cluster.gpu_left[nodes].sum(axis=1) - shape.gpus * shape.gpu_milli)
            / MAX_SPEC_GPU
            * WEIGHT
        )
        scores = np.trunc((1.0 - (cpu_rest + gpu_rest)) * MAX_SCORE).astype(np.int64)
        return scores, devices_for(cluster, nodes, shape)
