"""Random: any feasible node, uniformly; a shared GPU uniformly among those with room.

Nothing is scored: the replay draws the node itself (``randomized``); the scores here are
flat so that a caller who does score still sees every node as equally good.
"""

from __future__ import annotations

import numpy as np

from simulator.policies.base import no_device
from simulator.trace.cluster import GpuCluster
from simulator.trace.openb import IntArray
from simulator.trace.workload import PodShapeKey


class RandomFit:
    name = "random"
    randomized = True

    def score(
        self, cluster: GpuCluster, nodes: IntArray, shape: PodShapeKey
    ) -> tuple[IntArray, IntArray]:
        return np.zeros(len(nodes), dtype=np.int64), no_device(nodes)


def random_device(gpu_left: IntArray, milli: int, rng: np.random.Generator) -> int:
    """A device of one node with at least ``milli`` left, uniformly."""
    candidates = np.flatnonzero(gpu_left >= milli)
    return int(candidates[int(rng.integers(len(candidates)))])
