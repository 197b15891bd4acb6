"""One trace experiment: place the pods one by one under a policy and record allocation.

The method of the FGD paper's simulator: nodes and pods from the trace, pods shuffled and
tuned to ``tune`` x cluster GPUs by the seed, each pod filtered (CPU, memory, GPU model, a
device with room or enough free devices), scored by the policy, bound to a best-scoring node
or failed for good. Nothing departs. Ties between best-scoring nodes go to the first node in
a random order of nodes drawn once per experiment: the paper's simulator prefixes node names
with a random permutation and its scheduler is patched to pick the smallest name on a tie,
which makes ties pack onto the same nodes rather than spread.

After every pod the arrived GPU demand and the allocated GPU milli are recorded;
:func:`allocation_curve` turns them into the paper's "allocation ratio at X% arrived demand".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from simulator.policies import POLICIES, Policy
from simulator.policies.random_fit import random_device
from simulator.trace.cluster import GpuCluster
from simulator.trace.openb import IntArray, NodeTable, PodTable
from simulator.trace.workload import PodShapeKey, arrival_order, shape_of, typical_pods

MAX_ARRIVED_PERCENT = 130

Progress = Callable[[int, int], None]
"""Called as ``progress(pods_done, pods_total)`` now and then during a replay."""


@dataclass(frozen=True)
class TraceResult:
    policy: str
    seed: int
    tune: float
    pods: int
    failed: int
    total_gpus: int
    arrived_milli: IntArray
    """Arrived GPU demand (milli) after each event; event 0 is the empty cluster."""
    allocated_milli: IntArray
    """Allocated GPU milli after each event."""
    allocation_at: dict[int, float] = field(default_factory=dict)
    """Arrived-demand percent -> mean allocation percent (the paper's sampling)."""


@dataclass
class _ScoreCache:
    """Scores of one pod shape per node, valid while the node's version is unchanged."""

    scores: IntArray
    devices: IntArray
    version: IntArray


def allocation_curve(
    arrived_milli: IntArray, allocated_milli: IntArray, *, total_gpus: int
) -> dict[int, float]:
    """Allocation percent at each whole percent of arrived demand, as the paper's analysis
    computes it: events are grouped by arrived percent rounded half to even; a percent with
    no event takes the events within one percent either side; means rounded to 0.01."""
    arrived = np.round(arrived_milli / total_gpus / 10, 0)
    allocated = np.round(allocated_milli / total_gpus / 10, 2)
    curve: dict[int, float] = {}
    for percent in range(MAX_ARRIVED_PERCENT + 1):
        chosen = allocated[arrived == percent]
        if len(chosen) == 0:
            chosen = allocated[(arrived >= percent - 1) & (arrived <= percent + 1)]
            if len(chosen) == 0:
                continue
        curve[percent] = round(float(chosen.mean()), 2)
    return curve


class TraceReplay:
    """Replays ordered pods on a cluster under one policy; owns its random stream."""

    def __init__(self, cluster: GpuCluster, policy: Policy, rng: np.random.Generator) -> None:
        self.cluster = cluster
        self.policy = policy
        self.rng = rng
        self.tie_rank: IntArray = rng.permutation(len(cluster)).astype(np.int64)
        """Position of each node in the tie-break order (lowest wins)."""
        self._caches: dict[PodShapeKey, _ScoreCache] = {}

    def _scores(self, nodes: IntArray, shape: PodShapeKey) -> tuple[IntArray, IntArray]:
        n = len(self.cluster)
        cache = self._caches.get(shape)
        if cache is None:
            cache = _ScoreCache(
                scores=np.zeros(n, dtype=np.int64),
                devices=np.full(n, -1, dtype=np.int64),
                version=np.full(n, -1, dtype=np.int64),
            )
            self._caches[shape] = cache
        stale = nodes[cache.version[nodes] != self.cluster.version[nodes]]
        if len(stale):
            scores, devices = self.policy.score(self.cluster, stale, shape)
            cache.scores[stale] = scores
            cache.devices[stale] = devices
            cache.version[stale] = self.cluster.version[stale]
        return cache.scores[nodes], cache.devices[nodes]

    def place(self, shape: PodShapeKey, *, cpu: int, memory: int) -> int | None:
        """Bind one pod; the node index, or ``None`` when no node passes the filters."""
        feasible: npt.NDArray[np.int64] = np.flatnonzero(
            self.cluster.feasible(shape, cpu=cpu, memory=memory)
        )
        if len(feasible) == 0:
            return None
        if self.policy.randomized:
            node = int(feasible[int(self.rng.integers(len(feasible)))])
            device = (
                random_device(self.cluster.gpu_left[node], shape.gpu_milli, self.rng)
                if shape.shares_gpu
                else -1
            )
        else:
            scores, devices = self._scores(feasible, shape)
            best = np.flatnonzero(scores == scores.max())
            pick = int(best[np.argmin(self.tie_rank[feasible[best]])]) if len(best) > 1 else int(
                best[0]
            )
            node, device = int(feasible[pick]), int(devices[pick])
        self.cluster.bind(node, shape, cpu=cpu, memory=memory, device=device)
        return node


def run_experiment(
    nodes: NodeTable,
    pods: PodTable,
    *,
    policy: str,
    seed: int,
    tune: float = 1.3,
    progress: Progress | None = None,
) -> TraceResult:
    """One paper experiment: one trace, one policy, one seed."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
    rng = np.random.default_rng(seed)
    order = arrival_order(pods, cluster_gpus=nodes.total_gpus, ratio=tune, rng=rng)
    chosen = POLICIES[policy](typical_pods(pods))
    cluster = GpuCluster(nodes)
    replay = TraceReplay(cluster, chosen, rng)
    arrived = np.zeros(len(order) + 1, dtype=np.int64)
    allocated = np.zeros(len(order) + 1, dtype=np.int64)
    demand = 0
    failed = 0
    shapes: dict[int, PodShapeKey] = {}
    for step, index in enumerate(order, start=1):
        i = int(index)
        shape = shapes.get(i)
        if shape is None:
            shape = shapes[i] = shape_of(pods, i)
        demand += shape.gpus * shape.gpu_milli
        if replay.place(shape, cpu=int(pods.cpu[i]), memory=int(pods.memory[i])) is None:
            failed += 1
        arrived[step] = demand
        allocated[step] = cluster.used_gpu_milli
        if progress is not None and step % 500 == 0:
            progress(step, len(order))
    if progress is not None:
        progress(len(order), len(order))
    return TraceResult(
        policy=policy,
        seed=seed,
        tune=tune,
        pods=len(order),
        failed=failed,
        total_gpus=nodes.total_gpus,
        arrived_milli=arrived,
        allocated_milli=allocated,
        allocation_at=allocation_curve(arrived, allocated, total_gpus=nodes.total_gpus),
    )
