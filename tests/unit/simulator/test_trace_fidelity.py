"""The replay reproduces the FGD paper on the real openb trace (CI-sized: two seeds)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from extender.cli.main import main
from simulator.trace.openb import load_nodes, load_pods
from simulator.trace.published import PUBLISHED_MEANS
from simulator.trace.replay import TraceResult, run_experiment

SEEDS = (42, 43)
POLICIES = ("random", "bestfit", "fgd")
# Per-seed standard deviation is at most ~0.6 pp; two seeds stay well inside 1 pp.
TOLERANCE = 1.0


@pytest.fixture(scope="module")
def results(openb_paths: tuple[Path, Path]) -> dict[str, list[TraceResult]]:
    nodes, pods = load_nodes(openb_paths[0]), load_pods(openb_paths[1])
    return {
        policy: [run_experiment(nodes, pods, policy=policy, seed=s, tune=1.3) for s in SEEDS]
        for policy in POLICIES
    }


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("percent", [100, 130])
def test_mean_allocation_is_close_to_the_published_mean(
    results: dict[str, list[TraceResult]], policy: str, percent: int
) -> None:
    ours = float(np.mean([r.allocation_at[percent] for r in results[policy]]))
    assert abs(ours - PUBLISHED_MEANS[policy][percent]) <= TOLERANCE, ours


def test_policies_rank_fgd_over_bestfit_over_random(results: dict[str, list[TraceResult]]) -> None:
    mean = {p: np.mean([r.allocation_at[130] for r in rs]) for p, rs in results.items()}
    assert mean["fgd"] > mean["bestfit"] > mean["random"]


def test_the_demand_is_tuned_to_130_percent_and_nothing_is_allocated_beyond_capacity(
    results: dict[str, list[TraceResult]],
) -> None:
    for runs in results.values():
        for r in runs:
            assert 129.9 <= r.arrived_milli[-1] / r.total_gpus / 10 <= 130.0
            assert r.allocated_milli.max() <= r.total_gpus * 1000
            assert np.all(np.diff(r.allocated_milli) >= 0)


def test_same_seed_gives_the_same_replay(openb_paths: tuple[Path, Path]) -> None:
    nodes, pods = load_nodes(openb_paths[0]), load_pods(openb_paths[1])
    a = run_experiment(nodes, pods, policy="gpupacking", seed=7)
    b = run_experiment(nodes, pods, policy="gpupacking", seed=7)
    c = run_experiment(nodes, pods, policy="gpupacking", seed=8)
    assert np.array_equal(a.allocated_milli, b.allocated_milli)
    assert not np.array_equal(a.allocated_milli, c.allocated_milli)


def test_cli_prints_the_allocation_curve_as_json(
    openb_paths: tuple[Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    plot = tmp_path / "alloc.png"
    code = main(["simulate", "--trace", "openb", "--nodes", str(openb_paths[0]),
                 "--pods", str(openb_paths[1]), "--policy", "dotprod", "--seed", "42",
                 "-o", "json", "--plot", str(plot)])
    assert code == 0
    data = orjson.loads(capsys.readouterr().out)
    curve = data["gpu_allocation_ratio_at"]
    assert set(curve) >= {str(p) for p in range(0, 131)}
    assert abs(curve["100"] - PUBLISHED_MEANS["dotprod"][100]) < 1.5
    assert plot.stat().st_size > 10_000


def test_cli_names_the_bad_policy(openb_paths: tuple[Path, Path],
                                  capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "--trace", "openb", "--nodes", str(openb_paths[0]),
                 "--pods", str(openb_paths[1]), "--policy", "worstfit"])
    assert code == 2
    assert "unknown policy worstfit" in capsys.readouterr().err
