"""Many experiments (policies x seeds) in parallel processes, collected into one table.

Workers receive file paths, not tables, and load each trace once per process; results come
back as plain values. ``executor="ray"`` runs the same function as Ray tasks when Ray is
installed (``pip install 'muster[ray]'``); otherwise a clear error says so.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.trace.openb import NodeTable, PodTable, load_nodes, load_pods
from simulator.trace.replay import TraceResult, run_experiment


@dataclass(frozen=True, slots=True)
class Job:
    nodes: Path
    pods: Path
    policy: str
    seed: int
    tune: float


@functools.lru_cache(maxsize=4)
def _tables(nodes: Path, pods: Path) -> tuple[NodeTable, PodTable]:
    return load_nodes(nodes), load_pods(pods)


def run_job(job: Job) -> TraceResult:
    nodes, pods = _tables(job.nodes, job.pods)
    return run_experiment(nodes, pods, policy=job.policy, seed=job.seed, tune=job.tune)


def jobs_for(
    nodes: Path, pods: Path, *, policies: Sequence[str], seeds: Iterable[int], tune: float
) -> list[Job]:
    return [Job(nodes, pods, p, s, tune) for p in policies for s in seeds]


def run_sweep(
    jobs: Sequence[Job],
    *,
    workers: int | None = None,
    executor: str = "process",
    on_done: Callable[[TraceResult], None] | None = None,
) -> list[TraceResult]:
    """Run every job; results in the jobs' order whatever order they finish in."""
    if executor == "ray":
        return _run_ray(jobs, on_done)
    if executor != "process":
        raise ValueError(f"unknown executor {executor!r}; use 'process' or 'ray'")
    workers = workers or min(len(jobs), os.cpu_count() or 1)
    results: dict[int, TraceResult] = {}
    if workers <= 1:
        for i, job in enumerate(jobs):
            results[i] = run_job(job)
            if on_done:
                on_done(results[i])
    else:
        with concurrent.futures.ProcessPoolExecutor(max_workers=workers) as pool:
            futures = {pool.submit(run_job, job): i for i, job in enumerate(jobs)}
            for future in concurrent.futures.as_completed(futures):
                results[futures[future]] = future.result()
                if on_done:
                    on_done(results[futures[future]])
    return [results[i] for i in range(len(jobs))]


def _run_ray(
    jobs: Sequence[Job], on_done: Callable[[TraceResult], None] | None
) -> list[TraceResult]:
    """The jobs as Ray tasks: on the Ray instance this process is already connected to, else
    on the cluster ``RAY_ADDRESS`` names, else on a local instance Ray starts (and stops when
    this process exits). Results come back in the jobs' order; ``on_done`` sees each as it
    finishes."""
    try:
        import ray  # noqa: PLC0415 - an optional extra, imported only when asked for
    except ImportError:
        raise ValueError("--executor ray needs Ray: pip install 'muster[ray]'") from None
    if not ray.is_initialized():
        ray.init(ignore_reinit_error=True, log_to_driver=False, include_dashboard=False)
    remote = ray.remote(run_job)
    pending = {remote.remote(job): i for i, job in enumerate(jobs)}
    results: dict[int, TraceResult] = {}
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            result: TraceResult = ray.get(ref)
            results[pending.pop(ref)] = result
            if on_done:
                on_done(result)
    return [results[i] for i in range(len(jobs))]


def mean_curves(results: Sequence[TraceResult]) -> dict[str, dict[int, float]]:
    """Policy -> arrived percent -> mean allocation percent over the results' seeds."""
    grouped: dict[str, list[TraceResult]] = {}
    for r in results:
        grouped.setdefault(r.policy, []).append(r)
    out: dict[str, dict[int, float]] = {}
    for policy, runs in grouped.items():
        points = sorted(set.intersection(*(set(r.allocation_at) for r in runs)))
        out[policy] = {
            p: round(float(np.mean([r.allocation_at[p] for r in runs])), 2) for p in points
        }
    return out
