"""A forecast replays the snapshot from now: running workloads end at their expected end,
waiting gangs start in kube-scheduler's order, and a start that rests on an unknown runtime is
reported as unknown, naming the workloads, never as a number."""

from __future__ import annotations

from typing import Any

import pytest

from extender.core.model.durations import parse_seconds
from extender.core.workloads.catalog import Catalog
from extender.files.catalog import packaged_catalog
from simulator.forecast import Forecast, GangForecast, Outlook, forecast
from tests.unit.simulator.forecast_snapshots import NOW, T0, jobset, node, running_pods


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return packaged_catalog()


def run(objects: list[dict[str, Any]], catalog: Catalog) -> Forecast:
    return forecast(objects, now=NOW, catalog=catalog, parse_duration=parse_seconds)


def by_name(found: Forecast) -> dict[str, GangForecast]:
    return {g.workload.split("/")[-1]: g for g in found.gangs}


def test_a_gang_behind_a_jobset_starts_when_the_jobset_is_expected_to_end(
        catalog: Catalog) -> None:
    found = run([node("n1"), node("n2"), jobset("train", runtime="10m"),
                 *running_pods("train", "n1", "n2"), jobset("next")], catalog)
    assert found.gangs == (GangForecast(gang=found.gangs[0].gang, workload="JobSet/ml/next",
                                        outlook=Outlook.STARTS, start=360.0,
                                        waits_for=("JobSet/ml/train",)),)


def test_waiting_gangs_start_one_after_another_in_age_order(catalog: Catalog) -> None:
    found = by_name(run([node("n1"), node("n2"), jobset("train", runtime="10m"),
                         *running_pods("train", "n1", "n2"),
                         jobset("young", runtime="1h", created=T0 + 60),
                         jobset("old", runtime="20m", created=T0 + 30)], catalog))
    assert (found["old"].start, found["old"].waits_for) == (360.0, ("JobSet/ml/train",))
    assert (found["young"].start, found["young"].waits_for) == (360.0 + 1200,
                                                                ("JobSet/ml/old",))


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value}


def test_a_higher_priority_gang_goes_before_an_older_one(catalog: Catalog) -> None:
    # The running JobSet is above both, so neither may preempt it (the replay's
    # kube-scheduler model does not preempt).
    train = jobset("train", runtime="10m", priority_class="critical")
    for pod in (pods := running_pods("train", "n1", "n2")):
        pod["spec"]["priority"] = 2000
    found = by_name(run([node("n1"), node("n2"), priority_class("critical", 2000),
                         priority_class("urgent", 1000), train, *pods,
                         jobset("young", runtime="1h", created=T0 + 60,
                                priority_class="urgent"),
                         jobset("old", runtime="20m", created=T0 + 30)], catalog))
    assert (found["young"].start, found["old"].start) == (360.0, 360.0 + 3600)


def test_a_gang_that_fits_now_starts_now_waiting_for_nothing(catalog: Catalog) -> None:
    found = run([node("n1"), node("n2"), jobset("train", pods=1, runtime="10m"),
                 *running_pods("train", "n1"), jobset("small", pods=1)], catalog)
    assert [(g.start, g.waits_for) for g in found.gangs] == [(0.0, ())]


def test_a_gang_behind_a_workload_of_unknown_runtime_is_unknown_naming_it(
        catalog: Catalog) -> None:
    found = run([node("n1"), node("n2"), jobset("train"), *running_pods("train", "n1", "n2"),
                 jobset("next", runtime="1h")], catalog)
    (gang,) = found.gangs
    assert (gang.outlook, gang.start, gang.unknown) == (Outlook.UNKNOWN, None,
                                                        ("JobSet/ml/train",))
    assert not found.runtimes["JobSet/ml/train"].known


def test_an_unknown_runtime_whose_end_could_start_it_sooner_makes_the_start_an_upper_bound(
        catalog: Catalog) -> None:
    found = run([node("n1"), node("n2"), node("n3"),
                 jobset("train", runtime="10m"), *running_pods("train", "n1", "n2"),
                 jobset("serve", pods=1), *running_pods("serve", "n3"),
                 jobset("next", pods=1)], catalog)
    (gang,) = found.gangs
    assert (gang.outlook, gang.start, gang.waits_for) == (Outlook.STARTS, 360.0,
                                                          ("JobSet/ml/train",))
    assert gang.upper_bound  # were serve to end now, it would start on n3 at once


def test_an_unknown_runtime_whose_end_changes_nothing_leaves_the_start_exact(
        catalog: Catalog) -> None:
    found = run([node("n1"), node("n2"), node("n3"),
                 jobset("train", runtime="10m"), *running_pods("train", "n1", "n2"),
                 jobset("serve", pods=1), *running_pods("serve", "n3"),
                 jobset("next")], catalog)
    (gang,) = found.gangs
    assert (gang.outlook, gang.start, gang.waits_for) == (Outlook.STARTS, 360.0,
                                                          ("JobSet/ml/train",))
    # Two nodes are needed: serve's one node ending now would not start it any sooner.
    assert not gang.upper_bound


def test_a_gang_no_runtime_can_make_room_for_never_starts(catalog: Catalog) -> None:
    found = run([node("n1"), node("n2"), jobset("huge", pods=3)], catalog)
    assert [g.outlook for g in found.gangs] == [Outlook.NEVER]


def test_the_same_snapshot_gives_the_same_forecast(catalog: Catalog) -> None:
    objects = [node("n1"), node("n2"), node("n3"), jobset("train", runtime="10m"),
               *running_pods("train", "n1", "n2"), jobset("a", pods=3, runtime="5m"),
               jobset("b", pods=1, runtime="2m"), jobset("c", pods=2, runtime="7m")]
    assert run(objects, catalog) == run(objects, catalog)
