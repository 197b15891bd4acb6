"""Replay a synthetic day of gang workloads: seconds, and growth from 1,000 to 10,000 nodes.

    .venv/bin/python tests/bench/bench_replay.py [--small]

A day is 86,400 virtual seconds of JobSet / PyTorchJob / LWS / RayCluster gangs (1..16 pods of
1..8 GPUs, 10 minutes to 2 hours) arriving at a steady rate: 10,000 pods on 1,000 nodes and
100,000 pods on 10,000 nodes. Each day is replayed under the kube-scheduler model alone
(``default``, the baseline) and with Muster's decisions from ``extender.core`` (``muster``);
figures are printed as seconds and as ratios measured in this same run. Target: the
10,000-node Muster day in under 60 s.
"""

from __future__ import annotations

import sys
import time

from extender.files.catalog import packaged_catalog
from simulator.simulation import simulate
from simulator.synthetic import SyntheticSpec, generate

DAY = 86_400.0
PODS_PER_WORKLOAD = 6.2  # mean of the generator's gang sizes, head pods included


def day(nodes: int, pods: int) -> tuple[float, dict[str, tuple[float, dict[str, object]]]]:
    workloads = round(pods / PODS_PER_WORKLOAD)
    spec = SyntheticSpec(nodes=nodes, workloads=workloads, arrival_rate=workloads / DAY)
    scenario = generate(spec, seed=2024, catalog=packaged_catalog())
    created = sum(w.tree.pods for w in scenario.workloads)
    out = {}
    for mode in ("default", "muster"):
        start = time.perf_counter()
        result = simulate(scenario, mode)
        seconds = time.perf_counter() - start
        out[mode] = (seconds, {"gangs": result.report["gangs"],
                               "util": result.report["gpu_utilization"],
                               "p95": result.report["gang_wait_seconds"]["p95"],
                               **result.stats})
        print(f"  {nodes:>6} nodes {created:>7} pods  {mode:<8} {seconds:8.2f} s  "
              f"{out[mode][1]}", flush=True)
    return created, out


def main() -> None:
    small = "--small" in sys.argv
    sizes = [(200, 2_000), (1_000, 10_000)] if small else [(1_000, 10_000), (10_000, 100_000)]
    results = {}
    for nodes, pods in sizes:
        results[nodes] = day(nodes, pods)
    (n1, (_, a)), (n2, (_, b)) = results.items()
    print()
    for mode in ("default", "muster"):
        print(f"{mode:<8} {n1:>6} nodes {a[mode][0]:7.2f} s   {n2:>6} nodes {b[mode][0]:7.2f} s   "
              f"growth x{b[mode][0] / a[mode][0]:.1f} for x{n2 // n1} nodes and pods")
    print(f"muster / default (baseline, same day): {a['muster'][0] / a['default'][0]:.1f}x at "
          f"{n1} nodes, {b['muster'][0] / b['default'][0]:.1f}x at {n2} nodes")
    print(f"target: {n2}-node Muster day under 60 s -> "
          f"{'met' if b['muster'][0] < 60 else 'NOT met'} ({b['muster'][0]:.1f} s)")


if __name__ == "__main__":
    main()
