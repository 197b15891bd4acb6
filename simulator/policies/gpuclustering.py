"""GpuClustering: keep pods of one GPU kind (shared, 1, 2, 4, 8 GPUs) together on nodes.

Four bands of 25 points: a node holding only this kind (75..100), this kind among others
(50..75), an idle node (25..50), other kinds only (0..25); within a band the fuller node
wins (``25 * (8000 - milli left) // 8000``). CPU-only pods score 0 everywhere.
"""

from __future__ import annotations

import numpy as np

from simulator.policies.base import MAX_SCORE, MAX_SPEC_GPU, devices_for
from simulator.trace.cluster import GpuCluster, affinity_bit
from simulator.trace.openb import IntArray
from simulator.trace.workload import PodShapeKey

BAND = MAX_SCORE // 4


def _popcount(values: IntArray) -> IntArray:
    counts = np.zeros(len(values), dtype=np.int64)
    rest = values.copy()
    while rest.any():
        counts += rest & 1
        rest >>= 1
    return counts


class GpuClustering:
    name = "gpuclustering"
    randomized = False

    def score(
        self, cluster: GpuCluster, nodes: IntArray, shape: PodShapeKey
    ) -> tuple[IntArray, IntArray]:
        bit = affinity_bit(shape)
        if bit == 0:
            return np.zeros(len(nodes), dtype=np.int64), devices_for(cluster, nodes, shape)
        tags = cluster.tags[nodes]
        kinds = _popcount(tags)
        fullness = BAND * (MAX_SPEC_GPU - cluster.gpu_left[nodes].sum(axis=1)) // MAX_SPEC_GPU
        has = (tags & bit) != 0
        band = np.where(
            has, np.where(kinds == 1, 3, 2), np.where(kinds == 0, 1, 0)
        ).astype(np.int64)
        return fullness + band * BAND, devices_for(cluster, nodes, shape)
