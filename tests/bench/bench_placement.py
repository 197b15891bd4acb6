"""Plan a 64-pod gang over 5,000 nodes (target: under 20 ms), and answer gangs that do NOT fit
about as fast, against a same-run baseline.

Run: ``.venv/bin/python tests/bench/bench_placement.py``. The baseline is one plain loop over
the 5,000 nodes checking ``Resources.fits_in`` once per node: the least any per-node planner
must do. Figures are medians of repeated runs; clusters are seeded, so runs are comparable.

The infeasible cases are the ones an audit found slow (seconds to minutes): a gang no node
can hold, a gang with more pods than a small cluster holds, a gang kept to one rack that no
rack holds, a waiting gang's member asking filter again, and a gang whose roles each fit but
not together (the only case left to the bounded search).
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from extender.core.decide.decisions import CoreSettings, FilterOutcome, decide_filter
from extender.core.gang.capacity import index_of
from extender.core.gang.ledger import Ledger
from extender.core.gang.placement import plan_gang
from extender.core.gang.plans import Infeasible, Plan
from extender.core.model.values import Gang, NodeInfo, PodInfo, TopologyConstraint
from tests.unit.core.builders import (
    make_gang,
    make_node,
    make_pod,
    make_shape,
    make_snapshot,
    uid,
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


def _time_plan(gang: Gang, nodes: list[NodeInfo], busy: list[PodInfo], *, fits: bool,
               repeat: int = 15) -> tuple[float, str]:
    snap = make_snapshot(nodes, gangs=[gang], pods=busy)
    base = index_of(snap).base
    result = plan_gang(gang, snapshot=snap, capacity=base)
    assert isinstance(result, Plan if fits else Infeasible), result
    reason = result.reason if isinstance(result, Infeasible) else ""
    return median_seconds(lambda: plan_gang(gang, snapshot=snap, capacity=base),
                          repeat=repeat), reason


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
    topo, _ = _time_plan(racked, nodes, busy, fits=True, repeat=5)

    def row(label: str, seconds: float, target: str = "") -> None:
        print(f"{label:<52}{seconds * 1e3:9.2f} ms = {seconds / baseline:6.1f}x baseline "
              f"= {seconds / planning:6.1f}x feasible plan{target}")

    print(f"cluster: {NODES} nodes x 8 GPUs, {len(busy)} busy pods; gang: {PODS} pods")
    print(f"{'baseline (one fits_in loop over 5000 nodes)':<52}{baseline * 1e3:9.2f} ms")
    row("plan 64-pod gang (warm snapshot index)", planning,
        f"   target < 20 ms: {'MET' if planning < 0.020 else 'MISSED'}")
    row("snapshot index, once per snapshot (cold)", cold_index)
    row("plan 16-pod gang inside one of 125 racks", topo)

    print("infeasible (each answered with a per-node reason):")
    huge = make_gang("huge", roles=[("worker", 4, make_shape(gpus=16))])
    seconds, why = _time_plan(huge, nodes, busy, fits=False)
    row("  4 pods x 16 GPUs over 5000 nodes", seconds)
    too_many = make_gang("many", roles=[("worker", PODS, make_shape(gpus=8, cpu=16))])
    one_short = [make_pod(f"small-{i}", shape=make_shape(gpus=1), node=f"node-{i:05d}",
                          ns="other") for i in range(PODS - 1, NODES)]
    seconds, _ = _time_plan(too_many, nodes, one_short, fits=False)
    row("  64 pods x 8 GPUs, 63 of 5000 nodes empty", seconds)

    small = [make_node(f"n{i:02d}", gpus=8, cpu=96) for i in range(20)]
    small_busy = [make_pod(f"b{i}", shape=make_shape(gpus=rng.choice([0, 1, 2, 3]), cpu=i + 1),
                           node=f"n{i:02d}", ns="other") for i in range(20)]
    thirty_one = make_gang("wide", roles=[("worker", 31, make_shape(gpus=5))])
    seconds, _ = _time_plan(thirty_one, small, small_busy, fits=False)
    row("  31 pods x 5 GPUs on 20 nodes", seconds)

    rack_bound = make_gang("rack42", roles=[("worker", 42, make_shape(gpus=8))],
                           topology=TopologyConstraint("rack", required=True))
    seconds, why = _time_plan(rack_bound, nodes, [], fits=False, repeat=5)
    row("  42 pods x 8 GPUs in one rack of 40 nodes", seconds)

    waiting = make_gang("waits", roles=[("worker", PODS, make_shape(gpus=8, cpu=16))])
    wsnap = make_snapshot(nodes, gangs=[waiting], pods=one_short)
    member = wsnap.pods[uid(waiting, "worker", 0)]
    names = list(wsnap.nodes)
    settings = CoreSettings()
    ledger = Ledger()

    def ask() -> object:
        return decide_filter(member, names, snapshot=wsnap, ledger=ledger, now=0.0,
                             settings=settings)

    decision = ask()
    assert decision.outcome is FilterOutcome.WAITING, decision.reason  # type: ignore[attr-defined]
    row("  filter of a waiting gang's member (5000 nodes)", median_seconds(ask))

    # Each role fits on its own and the totals fit; only together do they not: the bounded
    # search is what answers.
    mixed_rng = random.Random(5)
    mixed = [make_node(f"m{i:02d}", gpus=8, cpu=mixed_rng.choice([16, 24, 32]))
             for i in range(40)]
    mixed_busy = [make_pod(f"mb{i}", shape=make_shape(gpus=mixed_rng.choice([0, 1, 2, 3]),
                                                       cpu=mixed_rng.randint(1, 8)),
                           node=f"m{i:02d}", ns="other") for i in range(40)]
    together = make_gang("together", roles=[("a", 31, make_shape(gpus=1, cpu=4)),
                                            ("b", 40, make_shape(gpus=1, cpu=12)),
                                            ("c", 11, make_shape(gpus=2, cpu=12))])
    seconds, _ = _time_plan(together, mixed, mixed_busy, fits=False, repeat=5)
    row("  3 roles that fit apart, not together (40 nodes)", seconds)
    print(f"example reason: {why}")


if __name__ == "__main__":
    main()
