"""What a policy is: integer node scores (0..100, higher wins) and a device for shared GPUs.

The replay asks a policy to score a batch of nodes for one pod shape. Scores are integers
because kube-scheduler's are: truncation makes ties, and ties are broken uniformly at random,
which is part of each policy's behaviour.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from simulator.trace.cluster import GpuCluster
from simulator.trace.openb import MILLI, IntArray
from simulator.trace.workload import PodShapeKey, TypicalPod

MAX_SCORE = 100
MAX_SPEC_CPU = 128_000
"""Milli-CPU of the largest node: BestFit and DotProd normalise by it."""
MAX_SPEC_GPU = 8 * MILLI


class Policy(Protocol):
    name: str
    randomized: bool
    """True when the node is drawn at random among feasible ones instead of scored."""

    def score(
        self, cluster: GpuCluster, nodes: IntArray, shape: PodShapeKey
    ) -> tuple[IntArray, IntArray]:
        """Scores of ``nodes`` for ``shape``, and per node the device a GPU-sharing pod would
        use (-1 for other pods). Depends only on those nodes' state, so it may be cached."""
        ...


PolicyFactory = Callable[[Sequence[TypicalPod]], Policy]


def no_device(nodes: IntArray) -> IntArray:
    return np.full(len(nodes), -1, dtype=np.int64)


def best_fit_device(gpu_left: IntArray, milli: int) -> IntArray:
    """Per row, the device with the least milli left that still holds ``milli`` (first on ties)."""
    candidates = np.where(gpu_left >= milli, gpu_left, np.iinfo(np.int64).max)
    chosen: IntArray = np.argmin(candidates, axis=1).astype(np.int64)
    return chosen


def devices_for(cluster: GpuCluster, nodes: IntArray, shape: PodShapeKey) -> IntArray:
    """The device choice every policy but FGD and Random makes: best fit for shared GPUs."""
    if not shape.shares_gpu:
        return no_device(nodes)
    return best_fit_device(cluster.gpu_left[nodes], shape.gpu_milli)
