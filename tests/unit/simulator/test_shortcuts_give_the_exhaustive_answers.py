"""The replay asks Muster's core narrowed questions (plan nodes instead of every feasible node,
a necessary condition before planning); they must give exactly the answers of the full
questions a real cluster asks. Days are replayed both ways and compared."""

from __future__ import annotations

from pathlib import Path

import pytest

from extender.core.workloads.catalog import Catalog
from extender.files.catalog import packaged_catalog
from extender.files.snapshot import load_snapshot
from simulator.scheduler_values import SchedulerSettings
from simulator.simulation import Result, Scenario, simulate
from simulator.snapshot_replay import scenario_from_objects
from simulator.synthetic import SyntheticSpec, generate

EXAMPLE = Path(__file__).resolve().parents[3] / "docs" / "examples" / "gang-snapshot.yaml"
SHORTCUT_STATS = ("core_calls", "answered_by_bound")


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return packaged_catalog()


def both_ways(scenario: Scenario, seed: int) -> tuple[Result, Result]:
    narrowed = simulate(scenario, "muster", settings=SchedulerSettings(seed=seed))
    exhaustive = simulate(scenario, "muster",
                          settings=SchedulerSettings(seed=seed, exhaustive=True))
    return narrowed, exhaustive


def assert_same(narrowed: Result, exhaustive: Result) -> None:
    assert narrowed.report == exhaustive.report
    assert narrowed.utilization == exhaustive.utilization
    assert narrowed.waits == exhaustive.waits
    kept = {k: v for k, v in narrowed.stats.items() if k not in SHORTCUT_STATS}
    assert kept == {k: v for k, v in exhaustive.stats.items() if k not in SHORTCUT_STATS}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_tight_day_with_elastic_jobs_replays_the_same_both_ways(catalog: Catalog,
                                                                  seed: int) -> None:
    spec = SyntheticSpec(nodes=6, workloads=50, arrival_rate=0.02, gang_sizes=(1, 2, 4, 8),
                         gpus_per_pod=(1, 2, 4, 8), runtime=(300.0, 3600.0), elastic=0.6)
    narrowed, exhaustive = both_ways(generate(spec, seed=seed, catalog=catalog), seed)
    assert_same(narrowed, exhaustive)
    # The day is tight: gangs waited, the bound answered for the core, members were held.
    assert narrowed.stats["failed"] > 0 and narrowed.stats["held"] > 0
    assert narrowed.stats["answered_by_bound"] > 0
    assert narrowed.stats["core_calls"] < exhaustive.stats["core_calls"]
    assert narrowed.report["gangs"]["partial"] == 0


def test_the_example_snapshot_replays_the_same_both_ways(catalog: Catalog) -> None:
    scenario = scenario_from_objects(load_snapshot(EXAMPLE), catalog=catalog)
    assert_same(*both_ways(scenario, 42))
