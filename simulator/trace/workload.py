"""The paper's workload preparation: shuffle, tune to a target demand, typical pods.

- Shuffle: pods sorted by name, then permuted by the seed.
- Tune: pods drawn uniformly (with replacement, from the name-sorted trace) are appended until
  the next draw would push the total GPU demand past ``ratio`` x cluster GPUs. As in the
  paper's simulator, the stop test adds the drawn pod's per-device milli, not its total.
- Typical pods: the most frequent pod shapes covering 95% of the trace (CPU-only pods
  included), with their frequencies renormalised to 1. FGD measures fragmentation against them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.trace.openb import MILLI, IntArray, PodTable

POPULARITY_THRESHOLD = 0.95


@dataclass(frozen=True, slots=True)
class PodShapeKey:
    """What scoring sees of a pod: milli-CPU (non-zero), per-device milli, devices, models."""

    cpu: int
    gpu_milli: int
    gpus: int
    gpu_spec: str = ""

    @property
    def shares_gpu(self) -> bool:
        return self.gpus == 1 and 0 < self.gpu_milli < MILLI


@dataclass(frozen=True, slots=True)
class TypicalPod:
    shape: PodShapeKey
    frequency: float


def scoring_cpu(cpu: int) -> int:
    """kube-scheduler scores a pod without a CPU request as if it asked for 100m."""
    return cpu if cpu > 0 else 100


def shape_of(pods: PodTable, i: int) -> PodShapeKey:
    return PodShapeKey(
        cpu=scoring_cpu(int(pods.cpu[i])),
        gpu_milli=int(pods.gpu_milli[i]),
        gpus=int(pods.gpus[i]),
        gpu_spec=pods.gpu_spec[i],
    )


def arrival_order(
    pods: PodTable, *, cluster_gpus: int, ratio: float, rng: np.random.Generator
) -> IntArray:
    """Indexes into ``pods`` (sorted by name) in arrival order: shuffled, then tuned up or down."""
    order = rng.permutation(len(pods)).astype(np.int64)
    if ratio <= 0:
        return order
    total = pods.total_gpu_milli
    target = ratio * cluster_gpus * MILLI
    demand = int(total.sum())
    if demand > target:
        kept = list(order)
        while demand > target and kept:
            removed = kept.pop(int(rng.integers(len(kept))))
            demand -= int(total[removed])
        return np.array(kept, dtype=np.int64)
    extra: list[int] = []
    while True:
        drawn = int(rng.integers(len(pods)))
        if demand + int(pods.gpu_milli[drawn]) > target:
            break
        demand += int(total[drawn])
        extra.append(drawn)
    return np.concatenate([order, np.array(extra, dtype=np.int64)])


def typical_pods(pods: PodTable, *, threshold: float = POPULARITY_THRESHOLD) -> list[TypicalPod]:
    """The most popular shapes covering ``threshold`` of pods, frequencies summing to 1.

    Ties in popularity go to the larger shape (CPU, then milli, then devices, then model),
    the order the paper's simulator produces.
    """
    counts: dict[PodShapeKey, int] = {}
    for i in range(len(pods)):
        key = shape_of(pods, i)
        counts[key] = counts.get(key, 0) + 1
    ranked = sorted(
        counts.items(),
        key=lambda kv: (kv[1], kv[0].cpu, kv[0].gpu_milli, kv[0].gpus, kv[0].gpu_spec),
        reverse=True,
    )
    wanted = threshold * len(pods)
    chosen: list[tuple[PodShapeKey, int]] = []
    covered = 0
    for key, count in ranked:
        if covered >= wanted:
            break
        chosen.append((key, count))
        covered += count
    return [TypicalPod(shape=key, frequency=count / covered) for key, count in chosen]
