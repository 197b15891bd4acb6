"""FGD, fragmentation gradient descent: place the pod where GPU fragmentation grows least.

A node's fragmentation is measured against the typical pods (shape, frequency f_t): for each
typical pod the node cannot host (too little CPU, too few GPUs with enough milli left, or a
GPU model it does not accept) all its idle GPU milli counts as fragment; for one it can host,
only the milli on devices too small for that pod counts. Summed with weights f_t:

    frag = idle * sum_t f_t  -  sum_{t hostable} f_t * (milli on devices holding >= milli_t)

The score is ``100 * sigmoid((frag_before - frag_after) / 1000)``, truncated; a GPU-sharing pod
tries every device and keeps the best (first on ties). Fragmentation before placement is
cached per node and refreshed when the node changes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from simulator.policies.base import MAX_SCORE, no_device
from simulator.trace.cluster import GpuCluster
from simulator.trace.openb import MAX_GPUS_PER_NODE, MILLI, IntArray
from simulator.trace.workload import PodShapeKey, TypicalPod

FloatArray = npt.NDArray[np.float64]
SCALE = 1000.0


class FragmentationGradientDescent:
    name = "fgd"
    randomized = False

    def __init__(self, typical: Sequence[TypicalPod]) -> None:
        if not typical:
            raise ValueError("FGD needs at least one typical pod")
        self.typical = tuple(typical)
        self._weight_total = float(sum(t.frequency for t in typical))
        gpu_pods = [t for t in typical if t.shape.gpus > 0]
        self._thresholds = np.array(
            sorted({t.shape.gpu_milli for t in gpu_pods}), dtype=np.int64
        )
        self._threshold_of = np.array(
            [int(np.searchsorted(self._thresholds, t.shape.gpu_milli)) for t in gpu_pods],
            dtype=np.int64,
        )
        self._devices = np.array([t.shape.gpus for t in gpu_pods], dtype=np.int64)
        self._cpu = np.array([t.shape.cpu for t in gpu_pods], dtype=np.int64)
        self._freq = np.array([t.frequency for t in gpu_pods], dtype=np.float64)
        self._specs = tuple(t.shape.gpu_spec for t in gpu_pods)
        self._access: npt.NDArray[np.bool_] | None = None
        self._before: FloatArray = np.zeros(0)
        self._before_version: IntArray = np.zeros(0, dtype=np.int64)

    def _bind_cluster(self, cluster: GpuCluster) -> None:
        n = len(cluster)
        if self._access is not None and self._access.shape[0] == n:
            return
        self._access = np.stack(
            [cluster.model_mask(spec) for spec in self._specs], axis=1
        ) if self._specs else np.zeros((n, 0), dtype=np.bool_)
        self._before = np.zeros(n)
        self._before_version = np.full(n, -1, dtype=np.int64)

    def fragmentation(
        self, gpu_left: IntArray, cpu_left: IntArray, access: npt.NDArray[np.bool_]
    ) -> FloatArray:
        """Fragment milli of K node states: ``gpu_left`` (K, D), ``cpu_left`` (K,),
        ``access`` (K, typical GPU pods) telling which GPU models each state accepts."""
        idle = gpu_left.sum(axis=1)
        holds = gpu_left[:, :, None] >= self._thresholds[None, None, :]
        count = holds.sum(axis=1)
        big = (gpu_left[:, :, None] * holds).sum(axis=1)
        hostable = (
            (count[:, self._threshold_of] >= self._devices[None, :])
            & (cpu_left[:, None] >= self._cpu[None, :])
            & access
        )
        usable = (hostable * self._freq[None, :] * big[:, self._threshold_of]).sum(axis=1)
        result: FloatArray = idle * self._weight_total - usable
        return result

    def _frag_before(self, cluster: GpuCluster, nodes: IntArray) -> FloatArray:
        assert self._access is not None
        stale = nodes[self._before_version[nodes] != cluster.version[nodes]]
        if len(stale):
            self._before[stale] = self.fragmentation(
                cluster.gpu_left[stale], cluster.cpu_left[stale], self._access[stale]
            )
            self._before_version[stale] = cluster.version[stale]
        return self._before[nodes]

    def score(
        self, cluster: GpuCluster, nodes: IntArray, shape: PodShapeKey
    ) -> tuple[IntArray, IntArray]:
        self._bind_cluster(cluster)
        assert self._access is not None
        before = self._frag_before(cluster, nodes)
        left = cluster.gpu_left[nodes]
        cpu_after = cluster.cpu_left[nodes] - shape.cpu
        access = self._access[nodes]
        if shape.shares_gpu:
            b, d = len(nodes), MAX_GPUS_PER_NODE
            trial = np.repeat(left[:, None, :], d, axis=1)
            trial -= shape.gpu_milli * np.eye(d, dtype=np.int64)[None, :, :]
            after = self.fragmentation(
                trial.reshape(b * d, d), np.repeat(cpu_after, d), np.repeat(access, d, axis=0)
            ).reshape(b, d)
            scores = _to_score(before[:, None] - after)
            scores[left < shape.gpu_milli] = -1
            device = np.argmax(scores, axis=1).astype(np.int64)
            return scores[np.arange(b), device], device
        if shape.gpus:
            free = left == MILLI
            taken = free & (np.cumsum(free, axis=1) <= shape.gpus)
            left = np.where(taken, 0, left)
        after = self.fragmentation(left, cpu_after, access)
        return _to_score(before - after), no_device(nodes)


def _to_score(gain: FloatArray) -> IntArray:
    return np.trunc(1.0 / (1.0 + np.exp(-gain / SCALE)) * MAX_SCORE).astype(np.int64)
