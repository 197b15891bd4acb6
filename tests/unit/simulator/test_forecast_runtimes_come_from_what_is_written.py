"""A workload's remaining runtime comes from its muster.dev/expected-runtime annotation,
bounded by the activeDeadlineSeconds its kind enforces, minus what it has run; where nothing
is written it is unknown, never guessed."""

from __future__ import annotations

from typing import Any

import pytest

from extender.core.model.durations import parse_seconds
from simulator.forecast_runtimes import (
    Runtime,
    RuntimeSource,
    active_deadline,
    pods_started_at,
    remaining_runtime,
)

T0 = 1_800_000_000.0  # the workload's creation
STAMP = "2027-01-15T08:00:00Z"  # == T0


def workload(kind: str = "JobSet", *, runtime: str | None = None,
             spec: dict[str, Any] | None = None,
             status: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "w", "namespace": "ml", "creationTimestamp": STAMP}
    if runtime is not None:
        meta["annotations"] = {"muster.dev/expected-runtime": runtime}
    return {"kind": kind, "metadata": meta, "spec": spec or {}, "status": status or {}}


def left(obj: dict[str, Any], *, started: float | None, now: float) -> Runtime:
    return remaining_runtime(obj, pods_started=started, now=now, parse_duration=parse_seconds)


def test_stamp_is_the_creation_the_tests_count_from() -> None:
    assert pods_started_at([{"status": {"startTime": STAMP}}]) == T0


@pytest.mark.parametrize(("written", "seconds"), [
    ("10m", 600.0), ("2h30m", 9000.0), ("1.5h", 5400.0), ("90", 90.0), ("90s", 90.0),
])
def test_the_annotation_reads_go_durations_and_seconds(written: str, seconds: float) -> None:
    assert left(workload(runtime=written), started=None, now=T0) == Runtime(
        RuntimeSource.ANNOTATION, seconds)


def test_what_the_pods_have_run_is_taken_off_the_expected_runtime() -> None:
    assert left(workload(runtime="10m"), started=T0 + 60, now=T0 + 60 + 240).remaining == 360


def test_a_workload_not_started_has_its_whole_runtime_left() -> None:
    assert left(workload(runtime="10m"), started=None, now=T0 + 3000).remaining == 600


def test_nothing_written_is_unknown_and_says_why() -> None:
    found = left(workload(), started=T0, now=T0 + 60)
    assert found.source is RuntimeSource.UNKNOWN and found.remaining is None
    assert "muster.dev/expected-runtime" in found.reason


def test_an_unreadable_annotation_is_unknown_naming_the_value() -> None:
    found = left(workload(runtime="soon"), started=T0, now=T0)
    assert found.remaining is None and "'soon'" in found.reason


def test_a_workload_past_its_expected_runtime_is_overdue_not_ending_now() -> None:
    found = left(workload(runtime="5m"), started=T0, now=T0 + 600)
    assert found.source is RuntimeSource.OVERDUE and found.remaining is None


def test_a_shorter_deadline_bounds_the_annotation() -> None:
    job = workload("Job", runtime="1h", spec={"activeDeadlineSeconds": 1200})
    assert left(job, started=T0 + 100, now=T0 + 200).remaining == 1000


def test_a_deadline_alone_is_used_as_the_latest_end() -> None:
    job = workload("PyTorchJob", spec={"runPolicy": {"activeDeadlineSeconds": 3600}},
                   status={"startTime": "2027-01-15T08:10:00Z"})
    assert left(job, started=None, now=T0 + 1200) == Runtime(RuntimeSource.DEADLINE, 3000)


def test_an_overdue_workload_under_a_deadline_ends_by_its_deadline() -> None:
    job = workload("Job", runtime="5m", spec={"activeDeadlineSeconds": 900})
    assert left(job, started=T0, now=T0 + 600) == Runtime(RuntimeSource.DEADLINE, 300)


def jobset_spec(*deadlines: int | None, restarts: int | None = None) -> dict[str, Any]:
    jobs = [{"name": f"j{i}", "template": {"spec": {} if d is None else
                                          {"activeDeadlineSeconds": d}}}
            for i, d in enumerate(deadlines)]
    spec: dict[str, Any] = {"replicatedJobs": jobs}
    if restarts is not None:
        spec["failurePolicy"] = {"maxRestarts": restarts}
    return spec


@pytest.mark.parametrize(("spec", "bound"), [
    (jobset_spec(600, 900), 900.0),
    (jobset_spec(600, None), None),
    (jobset_spec(600, 900, restarts=2), None),
    (jobset_spec(600, restarts=0), 600.0),
], ids=["the-longest-child-deadline", "a-child-without-one-leaves-none",
        "restarts-leave-none", "no-restarts-keep-it"])
def test_a_jobset_is_bounded_only_when_every_child_job_is(spec: dict[str, Any],
                                                          bound: float | None) -> None:
    assert active_deadline(workload(spec=spec)) == bound


def test_kinds_without_a_deadline_have_none() -> None:
    assert active_deadline(workload("LeaderWorkerSet", spec={"replicas": 2})) is None
