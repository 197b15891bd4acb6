"""Each policy's scores on tiny clusters, computed by hand from the paper's definitions."""

from __future__ import annotations

import numpy as np

from simulator.policies.bestfit import BestFit
from simulator.policies.dotprod import DotProduct
from simulator.policies.fgd import FragmentationGradientDescent
from simulator.policies.gpuclustering import GpuClustering
from simulator.policies.gpupacking import GpuPacking
from simulator.trace.cluster import GpuCluster
from simulator.trace.workload import PodShapeKey, TypicalPod
from tests.unit.simulator.conftest import nodes

ALL = np.array([0, 1], dtype=np.int64)
ONE_GPU = PodShapeKey(cpu=16_000, gpu_milli=1000, gpus=1)


def two_nodes() -> GpuCluster:
    # n0: 64 CPUs, 2 free GPUs; n1: 32 CPUs, 1 free GPU.
    return GpuCluster(nodes((64_000, 2), (32_000, 1)))


def test_bestfit_prefers_the_node_left_emptiest_after_placement() -> None:
    # n0: 1 - (0.5*48/128 + 0.5*1/8) = 0.75 -> 75; n1: 1 - 0.5*16/128 = 0.9375 -> 93.
    scores, devices = BestFit().score(two_nodes(), ALL, ONE_GPU)
    assert scores.tolist() == [75, 93]
    assert devices.tolist() == [-1, -1]


def test_dotprod_scores_one_minus_half_the_normalised_dot_product() -> None:
    # n0: (64/128*16/128 + 2/8*1/8)/2 = 0.046875 -> 95; n1: (32/128*16/128 + 1/8*1/8)/2 -> 97.
    scores, _ = DotProduct().score(two_nodes(), ALL, ONE_GPU)
    assert scores.tolist() == [95, 97]


def test_gpupacking_ranks_used_gpu_over_free_gpu_of_used_node_over_idle_node() -> None:
    cluster = GpuCluster(nodes((64_000, 2), (64_000, 2)))
    cluster.bind(1, PodShapeKey(cpu=1000, gpu_milli=700, gpus=1), cpu=1000, memory=0, device=0)
    small = PodShapeKey(cpu=1000, gpu_milli=200, gpus=1)
    scores, devices = GpuPacking().score(cluster, ALL, small)
    # idle n0: max(33 - 2, 2) = 31; n1 device 0 has 300 left: 100 - (30 // 10) = 97.
    assert scores.tolist() == [31, 97]
    assert devices.tolist() == [0, 0]
    big = PodShapeKey(cpu=1000, gpu_milli=500, gpus=1)
    scores, devices = GpuPacking().score(cluster, ALL, big)
    # 500 does not fit the 300 left, so n1 must open its free GPU 1: 50 - 1 = 49.
    assert scores.tolist() == [31, 49]
    assert devices.tolist()[1] == 1
    cpu_only = PodShapeKey(cpu=1000, gpu_milli=0, gpus=0)
    assert GpuPacking().score(cluster, ALL, cpu_only)[0].tolist() == [0, 0]


def test_gpuclustering_bands_nodes_by_the_gpu_kinds_they_already_hold() -> None:
    cluster = GpuCluster(nodes((64_000, 2), (64_000, 2)))
    shared = PodShapeKey(cpu=1000, gpu_milli=700, gpus=1)
    cluster.bind(1, shared, cpu=1000, memory=0, device=0)
    # n1 holds only shared pods, 1300 milli left: 25 * 6700 // 8000 = 20, + 75.
    # n0 is idle, 2000 left: 25 * 6000 // 8000 = 18, + 25.
    assert GpuClustering().score(cluster, ALL, shared)[0].tolist() == [43, 95]
    # A whole-GPU pod sees n1 as holding only other kinds: 20 + 0.
    assert GpuClustering().score(cluster, ALL, ONE_GPU)[0].tolist() == [43, 20]


def test_fgd_penalises_leaving_a_sliver_no_typical_pod_can_use() -> None:
    typical = [TypicalPod(PodShapeKey(cpu=1000, gpu_milli=500, gpus=1), 1.0)]
    fgd = FragmentationGradientDescent(typical)
    cluster = GpuCluster(nodes((8000, 1)))
    one = np.array([0], dtype=np.int64)
    # 700 leaves 300 that the 500-milli typical pod cannot use: gain -300,
    # 100 * sigmoid(-0.3) = 42.56 -> 42. 500 leaves a usable 500: gain 0 -> 50.
    assert fgd.score(cluster, one, PodShapeKey(cpu=1000, gpu_milli=700, gpus=1))[0].tolist() == [42]
    assert fgd.score(cluster, one, PodShapeKey(cpu=1000, gpu_milli=500, gpus=1))[0].tolist() == [50]


def test_fgd_picks_the_device_that_fragments_least() -> None:
    typical = [TypicalPod(PodShapeKey(cpu=1000, gpu_milli=500, gpus=1), 1.0)]
    fgd = FragmentationGradientDescent(typical)
    cluster = GpuCluster(nodes((8000, 2)))
    cluster.bind(0, PodShapeKey(cpu=0, gpu_milli=400, gpus=1), cpu=0, memory=0, device=0)
    pod = PodShapeKey(cpu=1000, gpu_milli=500, gpus=1)
    scores, devices = fgd.score(cluster, np.array([0], dtype=np.int64), pod)
    # Device 0 (600 left) would keep 100 unusable: gain -100 -> 47. Device 1 keeps 500: 50.
    assert devices.tolist() == [1]
    assert scores.tolist() == [50]


def test_fgd_fragmentation_counts_idle_gpu_of_unhostable_typical_pods() -> None:
    typical = [
        TypicalPod(PodShapeKey(cpu=1000, gpu_milli=1000, gpus=2), 0.5),
        TypicalPod(PodShapeKey(cpu=1000, gpu_milli=0, gpus=0), 0.5),
    ]
    fgd = FragmentationGradientDescent(typical)
    left = np.array([[1000, 1000, 300, 0], [1000, 0, 0, 0]], dtype=np.int64)
    frag = fgd.fragmentation(left, np.array([4000, 4000]), np.ones((2, 1), dtype=np.bool_))
    # Row 0: idle 2300; the 2-GPU pod fits, using 2000, so 300 counts (x0.5); the CPU pod
    # counts all idle GPU (x0.5): 150 + 1150. Row 1: nothing fits the 2-GPU pod: all 1000.
    assert frag.tolist() == [1300.0, 1000.0]
