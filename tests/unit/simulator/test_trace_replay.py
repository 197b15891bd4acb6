"""Workload preparation, replay mechanics and the allocation sampling of trace mode."""

from __future__ import annotations

import numpy as np

from simulator.policies.bestfit import BestFit
from simulator.policies.random_fit import RandomFit
from simulator.trace.cluster import GpuCluster
from simulator.trace.openb import PodTable
from simulator.trace.replay import TraceReplay, allocation_curve
from simulator.trace.workload import PodShapeKey, arrival_order, typical_pods
from tests.unit.simulator.conftest import nodes


def pod_table(*specs: tuple[int, int, int]) -> PodTable:
    """Pods from (milli-CPU, GPUs, milli per GPU)."""
    return PodTable(
        names=tuple(f"p{i:03d}" for i in range(len(specs))),
        cpu=np.array([s[0] for s in specs], dtype=np.int64),
        memory=np.zeros(len(specs), dtype=np.int64),
        gpus=np.array([s[1] for s in specs], dtype=np.int64),
        gpu_milli=np.array([s[2] for s in specs], dtype=np.int64),
        gpu_spec=("",) * len(specs),
    )


def test_tuning_tops_the_demand_up_to_just_under_the_target() -> None:
    pods = pod_table(*[(1000, 1, 500)] * 10)  # 5 GPUs of demand
    order = arrival_order(pods, cluster_gpus=10, ratio=1.3, rng=np.random.default_rng(1))
    demand = int(pods.total_gpu_milli[order].sum())
    assert 13_000 - 500 < demand <= 13_000
    assert sorted(order[:10].tolist()) == list(range(10))  # the trace itself comes first


def test_tuning_down_removes_pods_until_the_target_is_met() -> None:
    pods = pod_table(*[(1000, 1, 1000)] * 10)
    order = arrival_order(pods, cluster_gpus=5, ratio=1.0, rng=np.random.default_rng(1))
    assert int(pods.total_gpu_milli[order].sum()) == 5000
    assert len(set(order.tolist())) == len(order)


def test_typical_pods_cover_the_popular_shapes_and_renormalise() -> None:
    pods = pod_table(*([(1000, 1, 500)] * 6 + [(2000, 1, 1000)] * 3 + [(4000, 0, 0)]))
    typical = typical_pods(pods, threshold=0.9)
    shapes = [(t.shape.cpu, round(t.frequency, 4)) for t in typical]
    assert shapes == [(1000, 0.6667), (2000, 0.3333)]


def test_ties_go_to_the_same_node_every_time_so_equal_scores_pack() -> None:
    cluster = GpuCluster(nodes((64_000, 8), (64_000, 8), (64_000, 8)))
    replay = TraceReplay(cluster, RandomFitFree(), np.random.default_rng(3))
    first = replay.place(PodShapeKey(cpu=1000, gpu_milli=0, gpus=0), cpu=1000, memory=0)
    again = replay.place(PodShapeKey(cpu=1000, gpu_milli=0, gpus=0), cpu=1000, memory=0)
    assert first == again == int(np.argmin(replay.tie_rank))


class RandomFitFree(BestFit):
    """Every node scores the same: only the tie-break decides."""

    def score(self, cluster: GpuCluster, nodes: np.ndarray, shape: PodShapeKey):  # type: ignore[no-untyped-def, override]
        return np.zeros(len(nodes), dtype=np.int64), np.full(len(nodes), -1, dtype=np.int64)


def test_a_pod_that_fits_nowhere_fails_and_changes_nothing() -> None:
    cluster = GpuCluster(nodes((8000, 1)))
    replay = TraceReplay(cluster, BestFit(), np.random.default_rng(0))
    assert replay.place(PodShapeKey(cpu=1000, gpu_milli=1000, gpus=2), cpu=1000, memory=0) is None
    assert cluster.used_gpu_milli == 0 and int(cluster.version.sum()) == 0


def test_gpu_sharing_never_oversubscribes_a_device() -> None:
    cluster = GpuCluster(nodes((64_000, 2), (64_000, 1)))
    replay = TraceReplay(cluster, RandomFit(), np.random.default_rng(7))
    placed = 0
    for _ in range(20):
        if replay.place(PodShapeKey(cpu=100, gpu_milli=300, gpus=1), cpu=100, memory=0) is not None:
            placed += 1
    assert placed == 9  # three 300-milli pods per GPU, three GPUs
    assert int(cluster.gpu_left.min()) >= 0
    assert cluster.used_gpu_milli == 2700


def test_allocation_curve_averages_events_by_rounded_arrived_percent() -> None:
    # 10 GPUs: arrived 0, 1000 (10%), 2000 (20%), 2040 (20.4% -> 20); allocated alongside.
    arrived = np.array([0, 1000, 2000, 2040])
    allocated = np.array([0, 1000, 1500, 2000])
    curve = allocation_curve(arrived, allocated, total_gpus=10)
    assert curve[0] == 0.0 and curve[10] == 10.0
    assert curve[20] == 17.5  # mean of 15% and 20%
    assert curve[21] == 17.5  # no event at 21%: the events within one percent either side
    assert 30 not in curve
