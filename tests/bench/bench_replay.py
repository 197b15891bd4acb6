"""Replay synthetic days of gang workloads: seconds, growth from 1,000 to 10,000 nodes, and a
loaded day where gangs queue, back off, retry and wait at the bind barrier.

    .venv/bin/python tests/bench/bench_replay.py [--small]

Idle day: 86,400 virtual seconds of JobSet / PyTorchJob / LWS / RayCluster gangs (1..16 pods
of 1..8 GPUs, 10 minutes to 2 hours) arriving at a steady rate: 10,000 pods on 1,000 nodes and
100,000 pods on 10,000 nodes, about a fifth of the GPUs busy. Loaded day: 22,500 pods on 500
nodes, arriving demand about the cluster's size, a fifth of the PyTorchJobs elastic.

Each day is replayed under the kube-scheduler model alone (``default``, the baseline) and with
Muster's decisions from ``extender.core`` (``muster``). Figures are wall seconds (the target)
and CPU seconds of this process (what the replay costs when other work shares the cores),
with ratios measured in this same run. Targets: the 10,000-node Muster day in under 60 s, and
growth near x10 for x10 nodes and pods.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

from extender.files.catalog import packaged_catalog
from simulator.simulation import Result, Scenario, simulate
from simulator.synthetic import SyntheticSpec, generate

DAY = 86_400.0
PODS_PER_WORKLOAD = 6.2  # mean of the generator's gang sizes, head pods included
TARGET_SECONDS = 60.0


@dataclass(frozen=True)
class Run:
    wall: float
    cpu: float
    result: Result


def day(nodes: int, pods: int, *, elastic: float = 0.0) -> Scenario:
    workloads = round(pods / PODS_PER_WORKLOAD)
    spec = SyntheticSpec(nodes=nodes, workloads=workloads, arrival_rate=workloads / DAY,
                         elastic=elastic)
    return generate(spec, seed=2024, catalog=packaged_catalog())


def offered(scenario: Scenario) -> float:
    """GPU-seconds the day's workloads ask for, in percent of the cluster's over the day."""
    gpus = sum(n.allocatable.gpus for n in scenario.nodes)
    asked = sum(w.tree.gpus * (w.runtime or 0.0) for w in scenario.workloads)
    return 100.0 * asked / (gpus * DAY)


def replay(scenario: Scenario, mode: str) -> Run:
    wall, cpu = time.perf_counter(), time.process_time()
    result = simulate(scenario, mode)
    return Run(time.perf_counter() - wall, time.process_time() - cpu, result)


def describe(run: Run) -> str:
    r, s = run.result.report, run.result.stats
    created = max(r["pods"]["created"], 1)
    wait = r["gang_wait_seconds"]
    return (f"{run.wall:7.2f} s ({run.cpu:6.2f} s CPU)  gangs {r['gangs']['total']}, "
            f"partial {r['gangs']['partial']}, GPU-h partial {r['gpu_hours_partial']:.0f}, "
            f"util {r['gpu_utilization']:.1f}% (working {r['gpu_utilization_working']:.1f}%), "
            f"wait p50 {wait['p50'] or 0:.0f} s p95 {wait['p95'] or 0:.0f} s; "
            f"attempts/pod {s['attempts'] / created:.2f}, backoffs {s['failed']}, "
            f"barrier holds {s['held']}, withdrawn {s['withdrawn']}, "
            f"core calls {s['core_calls']}, answered by the bound {s['answered_by_bound']}")


def idle(sizes: list[tuple[int, int]]) -> dict[int, dict[str, Run]]:
    print("idle day")
    out: dict[int, dict[str, Run]] = {}
    for nodes, pods in sizes:
        scenario = day(nodes, pods)
        out[nodes] = {}
        for mode in ("default", "muster"):
            out[nodes][mode] = run = replay(scenario, mode)
            print(f"  {nodes:>6} nodes {pods:>7} pods  {mode:<8} {describe(run)}", flush=True)
    return out


def loaded(nodes: int, pods: int) -> dict[str, Run]:
    scenario = day(nodes, pods, elastic=0.2)
    print(f"\nloaded day: {nodes} nodes, {pods} pods, arriving demand "
          f"{offered(scenario):.0f}% of the GPUs")
    out = {}
    for mode in ("default", "muster"):
        out[mode] = run = replay(scenario, mode)
        print(f"  {mode:<8} {describe(run)}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Replay synthetic days of gang workloads (about 3 minutes; --small: "
                    "a smaller pair of days, for a quick look).")
    parser.add_argument("--small", action="store_true",
                        help="200 and 1,000 nodes instead of 1,000 and 10,000")
    small = parser.parse_args(argv).small
    sizes = [(200, 2_000), (1_000, 10_000)] if small else [(1_000, 10_000), (10_000, 100_000)]
    results = idle(sizes)
    heavy = loaded(100, 4_500) if small else loaded(500, 22_500)

    (n1, a), (n2, b) = results.items()
    print("\nidle day")
    for mode in ("default", "muster"):
        print(f"  {mode:<8} {n1:>6} nodes {a[mode].wall:7.2f} s   {n2:>6} nodes "
              f"{b[mode].wall:7.2f} s   growth x{b[mode].wall / a[mode].wall:.1f} wall, "
              f"x{b[mode].cpu / a[mode].cpu:.1f} CPU, for x{n2 // n1} nodes and pods")
    print(f"  muster / default (same day): {a['muster'].cpu / a['default'].cpu:.1f}x CPU at "
          f"{n1} nodes, {b['muster'].cpu / b['default'].cpu:.1f}x at {n2} nodes")
    m, d = heavy["muster"].result.report, heavy["default"].result.report
    print("loaded day")
    print(f"  muster / default: {heavy['muster'].cpu / heavy['default'].cpu:.1f}x CPU; "
          f"partial gangs {d['gangs']['partial']} -> {m['gangs']['partial']}; gang wait p95 "
          f"{d['gang_wait_seconds']['p95'] or 0:.0f} s -> {m['gang_wait_seconds']['p95'] or 0:.0f}"
          f" s; working GPUs {d['gpu_utilization_working']:.1f}% -> "
          f"{m['gpu_utilization_working']:.1f}%")
    seconds = b["muster"].wall
    met = seconds < TARGET_SECONDS
    print(f"target: {n2}-node Muster day under {TARGET_SECONDS:.0f} s -> "
          f"{'met' if met else 'NOT met'} ({seconds:.1f} s wall, {b['muster'].cpu:.1f} s CPU); "
          f"growth near x{n2 // n1} -> x{b['muster'].cpu / a['muster'].cpu:.1f} CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
