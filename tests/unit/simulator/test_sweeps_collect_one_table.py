"""``--sweep``: policy x seed experiments in parallel processes, or as Ray tasks on a local Ray
instance, give exactly the experiments one process runs one by one, collected in one table."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import orjson
import pytest

from extender.cli.main import main
from simulator.trace.openb import load_nodes, load_pods
from simulator.trace.replay import TraceResult, run_experiment
from simulator.trace.sweep import jobs_for, mean_curves, run_sweep

POLICIES = ("random", "bestfit", "fgd")
SEEDS = (1, 2)


def _same(a: list[TraceResult], b: list[TraceResult]) -> None:
    assert [(r.policy, r.seed) for r in a] == [(r.policy, r.seed) for r in b]
    for x, y in zip(a, b, strict=True):
        assert x.allocation_at == y.allocation_at
        assert x.failed == y.failed
        assert np.array_equal(x.allocated_milli, y.allocated_milli)


def test_a_process_pool_sweep_equals_the_experiments_run_one_by_one(
        small_trace: tuple[Path, Path]) -> None:
    nodes, pods = small_trace
    done: list[str] = []
    swept = run_sweep(jobs_for(nodes, pods, policies=POLICIES, seeds=SEEDS, tune=1.3),
                      workers=2, on_done=lambda r: done.append(r.policy))
    table, trace = load_nodes(nodes), load_pods(pods)
    alone = [run_experiment(table, trace, policy=p, seed=s, tune=1.3)
             for p in POLICIES for s in SEEDS]
    _same(swept, alone)
    assert sorted(done) == sorted(p for p in POLICIES for _ in SEEDS)
    means = mean_curves(swept)
    assert list(means) == list(POLICIES)
    fgd = [r.allocation_at[100] for r in swept if r.policy == "fgd"]
    assert means["fgd"][100] == round(float(np.mean(fgd)), 2)


def test_an_unknown_executor_is_refused(small_trace: tuple[Path, Path]) -> None:
    nodes, pods = small_trace
    with pytest.raises(ValueError, match="unknown executor 'dask'"):
        run_sweep(jobs_for(nodes, pods, policies=["random"], seeds=[1], tune=1.3),
                  executor="dask")


def _sweep_json(small_trace: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
                *extra: str) -> dict[str, object]:
    nodes, pods = small_trace
    code = main(["simulate", "--trace", "openb", "--nodes", str(nodes), "--pods", str(pods),
                 "--sweep", "--policy", ",".join(POLICIES), "--seeds", "1..2", "-o", "json",
                 *extra])
    assert code == 0
    data: dict[str, object] = orjson.loads(capsys.readouterr().out)
    return data


def test_cli_sweep_reports_every_experiment_and_the_means(
        small_trace: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    data = _sweep_json(small_trace, capsys, "--workers", "2")
    experiments = data["experiments"]
    assert isinstance(experiments, list)
    assert [(e["policy"], e["seed"]) for e in experiments] == [
        (p, s) for p in POLICIES for s in SEEDS]
    mean = data["mean"]
    assert isinstance(mean, dict) and set(mean) == set(POLICIES)


@pytest.fixture(scope="module")
def local_ray() -> Iterator[object]:
    ray = pytest.importorskip("ray")  # a guard only: CI installs the `ray` extra
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_sweep_equals_the_process_pool_sweep(
        local_ray: object, small_trace: tuple[Path, Path],
        capsys: pytest.CaptureFixture[str]) -> None:
    nodes, pods = small_trace
    jobs = jobs_for(nodes, pods, policies=POLICIES, seeds=SEEDS, tune=1.3)
    seen: list[TraceResult] = []
    on_ray = run_sweep(jobs, executor="ray", on_done=seen.append)
    _same(on_ray, run_sweep(jobs, workers=2))
    assert len(seen) == len(jobs)
    # The CLI's table (JSON) is the same whichever executor ran it.
    assert _sweep_json(small_trace, capsys, "--executor", "ray") == \
        _sweep_json(small_trace, capsys, "--workers", "2")
