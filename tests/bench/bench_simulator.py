"""Benchmark of the simulator's trace mode on the openb default trace.

Prints (1) seconds for one paper experiment (one policy, one seed, up to 130% demand) for
each policy, as a ratio against the paper's reported ~600 s and against a same-run baseline
that only filters and places pods first-fit (no scoring), and (2) the full fidelity table:
mean allocation over seeds 42..51 for the six policies at 100% and 130% arrived demand versus
the published means, with the ranking at both points and each policy's per-seed standard
deviation (the CI-sized check in ``tests/unit/simulator/test_trace_fidelity.py`` derives its
tolerance from it). Exits 1 if a mean is more than 0.5 points off or the ranking differs.

    .venv/bin/python tests/bench/bench_simulator.py [--seeds 42..51] [--workers 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from simulator.policies import PAPER_ORDER
from simulator.trace.cluster import GpuCluster
from simulator.trace.openb import load_nodes, load_pods
from simulator.trace.published import PAPER_SECONDS_PER_EXPERIMENT, PUBLISHED_MEANS
from simulator.trace.replay import run_experiment
from simulator.trace.sweep import jobs_for, mean_curves, run_sweep
from simulator.trace.workload import arrival_order, shape_of

TRACE = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "openb" / "csv"
NODES = TRACE / "openb_node_list_gpu_node.csv"
PODS = TRACE / "openb_pod_list_default.csv"


def first_fit_seconds(seed: int) -> float:
    """Baseline: the same pods and filters, placed on the first feasible node."""
    nodes, pods = load_nodes(NODES), load_pods(PODS)
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    order = arrival_order(pods, cluster_gpus=nodes.total_gpus, ratio=1.3, rng=rng)
    cluster = GpuCluster(nodes)
    for index in order:
        i = int(index)
        shape = shape_of(pods, i)
        cpu, memory = int(pods.cpu[i]), int(pods.memory[i])
        ok = np.flatnonzero(cluster.feasible(shape, cpu=cpu, memory=memory))
        if len(ok):
            node = int(ok[0])
            room = np.flatnonzero(cluster.gpu_left[node] >= shape.gpu_milli)
            device = int(room[0]) if shape.shares_gpu else -1
            cluster.bind(node, shape, cpu=cpu, memory=memory, device=device)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", default="42..51")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    first, _, last = args.seeds.partition("..")
    seeds = list(range(int(first), int(last or first) + 1))

    nodes, pods = load_nodes(NODES), load_pods(PODS)
    baseline = first_fit_seconds(42)
    print(f"baseline first-fit replay (no scoring): {baseline:.2f} s")
    print("one paper experiment (seed 42, tune 1.3):")
    for policy in PAPER_ORDER:
        start = time.perf_counter()
        run_experiment(nodes, pods, policy=policy, seed=42, tune=1.3)
        took = time.perf_counter() - start
        print(
            f"  {policy:14s} {took:6.2f} s  = {took / baseline:5.2f}x first-fit, "
            f"{PAPER_SECONDS_PER_EXPERIMENT / took:6.0f}x faster than the paper's ~600 s"
            f"  [{'ok' if took < 6 else 'SLOW'} vs 6 s target]"
        )

    start = time.perf_counter()
    results = run_sweep(
        jobs_for(NODES, PODS, policies=PAPER_ORDER, seeds=seeds, tune=1.3), workers=args.workers
    )
    means = mean_curves(results)
    print(f"\nfidelity over seeds {seeds[0]}..{seeds[-1]} ({time.perf_counter() - start:.0f} s):")
    print(f"  {'policy':14s} {'100% ours':>10s} {'paper':>7s} {'diff':>6s} {'sd':>5s}   "
          f"{'130% ours':>10s} {'paper':>7s} {'diff':>6s} {'sd':>5s}")
    worst = 0.0
    for policy in PAPER_ORDER:
        cells = []
        for point in (100, 130):
            ours, paper = means[policy][point], PUBLISHED_MEANS[policy][point]
            spread = float(np.std([r.allocation_at[point] for r in results
                                   if r.policy == policy], ddof=1)) if len(seeds) > 1 else 0.0
            worst = max(worst, abs(ours - paper))
            cells.append(f"{ours:10.2f} {paper:7.2f} {ours - paper:+6.2f} {spread:5.2f}")
        print(f"  {policy:14s} " + "   ".join(cells))
    print(f"  worst difference {worst:.2f} pp (target 0.50)")
    same = True
    for point in (100, 130):
        ranking = sorted(PAPER_ORDER, key=lambda p: means[p][point])
        paper_ranking = sorted(PAPER_ORDER, key=lambda p: PUBLISHED_MEANS[p][point])
        same = same and ranking == paper_ranking
        verdict = "same as paper" if ranking == paper_ranking else "DIFFERS: " + " < ".join(
            paper_ranking
        )
        print(f"  ranking at {point}%: {' < '.join(ranking)}  [{verdict}]")
    return 0 if worst <= 0.5 and same else 1


if __name__ == "__main__":
    sys.exit(main())
