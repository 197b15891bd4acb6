"""DotProd (Tetris): prefer the node whose free resources align least with the request.

Vectors are (CPU, total GPU) normalised by the largest node spec; the score is
``100 * (1 - free . request / 2)``, truncated. Shared GPUs go to the best-fitting device.
"""

from __future__ import annotations

import numpy as np

from simulator.policies.base import MAX_SCORE, MAX_SPEC_CPU, MAX_SPEC_GPU, devices_for
from simulator.trace.cluster import GpuCluster
from simulator.trace.openb import IntArray
from simulator.trace.workload import PodShapeKey


class DotProduct:
    name = "dotprod"
    randomized = False

    def score(
        self, cluster: GpuCluster, nodes: IntArray, shape: PodShapeKey
    ) -> tuple[IntArray, IntArray]:
        free_cpu = cluster.cpu_left[nodes] / MAX_SPEC_CPU
        free_gpu = cluster.gpu_left[nodes].sum(axis=1) / MAX_SPEC_GPU
        want_cpu = shape.cpu / MAX_SPEC_CPU
        want_gpu = shape.gpus * shape.gpu_milli / MAX_SPEC_GPU
        product = (free_cpu * want_cpu + free_gpu * want_gpu) / 2
        scores = np.trunc(MAX_SCORE * (1 - product)).astype(np.int64)
        return scores, devices_for(cluster, nodes, shape)
