"""``muster simulate`` has two modes; a flag of one given to the other is an error, never
silently ignored. ``--compare A,B`` compares schedulers in a gang replay and two policies,
point by point, in trace mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from extender.cli.main import main
from simulator.trace.openb import load_nodes, load_pods
from simulator.trace.replay import run_experiment

EXAMPLE = Path(__file__).resolve().parents[3] / "docs" / "examples" / "gang-snapshot.yaml"


def trace_args(small_trace: tuple[Path, Path], *extra: str) -> list[str]:
    nodes, pods = small_trace
    return ["simulate", "--trace", "openb", "--nodes", str(nodes), "--pods", str(pods), *extra]


def test_trace_compare_sets_two_policies_side_by_side(
        small_trace: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(trace_args(small_trace, "--compare", "random,fgd", "--seeds", "3..4",
                           "-o", "json")) == 0
    data = orjson.loads(capsys.readouterr().out)
    assert set(data["policies"]) == {"random", "fgd"}
    random_at, fgd_at = (data["policies"][p]["gpu_allocation_ratio_at"] for p in ("random", "fgd"))
    table, trace = load_nodes(small_trace[0]), load_pods(small_trace[1])
    alone = [run_experiment(table, trace, policy="fgd", seed=s, tune=1.3) for s in (3, 4)]
    assert fgd_at["100"] == round((alone[0].allocation_at[100] + alone[1].allocation_at[100])
                                  / 2, 2)
    assert data["difference"]["gpu_allocation_ratio_at"]["100"] == round(
        fgd_at["100"] - random_at["100"], 2)
    assert len(data["experiments"]) == 4

    assert main(trace_args(small_trace, "--compare", "random,fgd")) == 0
    out = capsys.readouterr().out
    assert "fgd - random" in out and "failed pods" in out


@pytest.mark.parametrize(("extra", "message"), [
    (["--compare", "random,fgd", "--policy", "fgd"], "drop --policy"),
    (["--compare", "fgd"], "name two policies"),
    (["--compare", "fgd,default"], "unknown policy default"),
    (["--horizon", "600"], "--horizon: only for a SNAPSHOT or --synthetic replay"),
])
def test_trace_mode_refuses_what_it_would_ignore(
        small_trace: tuple[Path, Path], capsys: pytest.CaptureFixture[str],
        extra: list[str], message: str) -> None:
    assert main(trace_args(small_trace, *extra)) == 1
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("args", "message"), [
    ([str(EXAMPLE), "--policy", "fgd"], "--policy: only for --trace openb"),
    ([str(EXAMPLE), "--pods", "p.csv", "--tune", "1.0"], "--pods, --tune: only for --trace"),
    (["--synthetic", "nodes=4,workloads=3", "--sweep", "--executor", "ray"],
     "--sweep, --executor: only for --trace openb"),
    ([str(EXAMPLE), "--seeds", "1..3"], "--seeds: only for --trace openb"),
])
def test_gang_replay_refuses_trace_flags(capsys: pytest.CaptureFixture[str], args: list[str],
                                         message: str) -> None:
    assert main(["simulate", *args]) == 1
    assert message in capsys.readouterr().err


def test_the_seed_draws_among_equal_nodes_in_a_gang_replay(
        capsys: pytest.CaptureFixture[str]) -> None:
    runs = []
    for seed in ("1", "1", "2"):
        assert main(["simulate", "--synthetic", "nodes=20,workloads=30,rate=0.05",
                     "--seed", seed, "--compare", "default,muster", "-o", "json"]) == 0
        runs.append(orjson.loads(capsys.readouterr().out))
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def _rack_day(capsys: pytest.CaptureFixture[str], topology: str) -> dict[str, Any]:
    day = ("nodes=8,racks=2,workloads=40,sizes=2/4,gpus-per-pod=8,rate=0.01,"
           f"topology={topology}")
    assert main(["simulate", "--synthetic", day, "--seed", "7", "-o", "json"]) == 0
    report: dict[str, Any] = orjson.loads(capsys.readouterr().out)
    return report


def test_a_two_rack_day_counts_gangs_within_one_rack_with_and_without_the_requirement(
        capsys: pytest.CaptureFixture[str]) -> None:
    free = _rack_day(capsys, "none")
    required = _rack_day(capsys, "required")
    assert free["gangs"]["admitted"] == required["gangs"]["admitted"] == 40
    # Unconstrained binpack splits some gangs across racks; required keeps every one in one.
    assert free["gangs_in_one_domain"] < 40
    assert required["gangs_in_one_domain"] == 40
    exclusive = _rack_day(capsys, "exclusive")
    assert exclusive["gangs_in_one_domain"] == exclusive["gangs"]["admitted"]
    # A rack held alone leaves the other gangs waiting longer.
    assert exclusive["gang_wait_seconds"]["p50"] > required["gang_wait_seconds"]["p50"]


def test_a_day_without_racks_counts_no_domains_and_topology_needs_racks(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--synthetic", "nodes=4,workloads=3", "-o", "json"]) == 0
    assert orjson.loads(capsys.readouterr().out)["gangs_in_one_domain"] is None
    assert main(["simulate", "--synthetic", "nodes=4,workloads=3,topology=required"]) == 1
    assert "topology needs racks (racks=2)" in capsys.readouterr().err
