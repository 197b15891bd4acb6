"""Plan a 64-pod gang over 5,000 nodes (target: under 20 ms), against a same-run baseline.

Run: ``.venv/bin/python tests/bench/bench_placement.py``. The baseline is one plain loop over
the 5,000 nodes checking ``Resources.fits_in`` once per node: the least any per-node planner
must do. Figures are medians of repeated runs; the cluster is seeded, so runs are comparable.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from extender.core.capacity import index_of
from extender.core.model import TopologyConstraint
from extender.core.placement import Plan, plan_gang
from tests.unit.core.builders import (
    make_gang,
    make_node,
    make_pod,
    make_shape,
    make_snapshot,
)

NODES = 5_000
PODS = 64


def median_seconds(fn: Callable[[], object], *, repeat: int = 15) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    rng = random.Random(20240611)
    nodes = [make_node(f"node-{i:05d}", gpus=8, cpu=96,
                       labels={"rack": f"r{i // 40:03d}"}) for i in range(NODES)]
    busy = [make_pod(f"busy-{i}", shape=make_shape(gpus=rng.choice([1, 2, 4]), cpu=4),
                     node=f"node-{rng.randrange(NODES):05d}", ns="other")
            for i in range(NODES)]
    gang = make_gang("llama", roles=[("worker", PODS - 1, make_shape(gpus=4, cpu=16)),
                                     ("leader", 1, make_shape(gpus=0, cpu=4))])
    snap = make_snapshot(nodes, gangs=[gang], pods=busy)

    start = time.perf_counter()
    base = index_of(snap).base
    cold_index = time.perf_counter() - start
    plan = plan_gang(gang, snapshot=snap, capacity=base)
    assert isinstance(plan, Plan) and plan.pods == PODS, plan

    demand = gang.members[0].shape.requests
    allocs = [n.allocatable for n in nodes]
    baseline = median_seconds(lambda: [demand.fits_in(a) for a in allocs])
    planning = median_seconds(lambda: plan_gang(gang, snapshot=snap, capacity=base))

    racked = make_gang("racked", roles=[("worker", 16, make_shape(gpus=4, cpu=16))],
                       topology=TopologyConstraint("rack", required=True))
    snap2 = make_snapshot(nodes, gangs=[racked], pods=busy)
    base2 = index_of(snap2).base
    topo = median_seconds(lambda: plan_gang(racked, snapshot=snap2, capacity=base2), repeat=5)

    print(f"cluster: {NODES} nodes x 8 GPUs, {len(busy)} busy pods; gang: {PODS} pods")
    print(f"baseline (one fits_in loop over {NODES} nodes): {baseline * 1e3:8.2f} ms")
    print(f"plan 64-pod gang (warm snapshot index):       {planning * 1e3:8.2f} ms "
          f"= {planning / baseline:5.1f}x baseline   target < 20 ms: "
          f"{'MET' if planning < 0.020 else 'MISSED'}")
    print(f"snapshot index, once per snapshot (cold):     {cold_index * 1e3:8.2f} ms "
          f"= {cold_index / baseline:5.1f}x baseline")
    print(f"plan 16-pod gang inside one of 125 racks:     {topo * 1e3:8.2f} ms "
          f"= {topo / baseline:5.1f}x baseline")


if __name__ == "__main__":
    main()
