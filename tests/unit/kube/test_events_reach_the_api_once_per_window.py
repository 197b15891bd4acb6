"""KubeEvents posts an object's first Event of a reason at once and the newest held one when
its window ends, by its own timer, with how often it was said."""

from __future__ import annotations

import time

from extender.kube.events import KubeEvents
from extender.state.ports import EventType, WorkloadEvent
from tests.unit.kube.recording import Clock, RecordingConnection


def waiting(message: str) -> WorkloadEvent:
    return WorkloadEvent("jobset.x-k8s.io/v1alpha2", "JobSet", "ml", "train", "js-uid",
                         EventType.WARNING, "GangWaiting", message, gang="ml/train")


def test_a_gang_whose_reason_changes_every_second_gets_one_event_a_window() -> None:
    conn, clock = RecordingConnection(), Clock(1_800_000_000.0)
    events = KubeEvents(conn, window=30.0, clock=clock)  # type: ignore[arg-type]
    for second in range(90):
        clock.now = 1_800_000_000.0 + second
        events.write_due()
        events.emit(waiting(f"{second % 7} of 8 pods fit"))
    clock.now += 30
    events.write_due()
    events.flush()
    messages = [body["message"] for body in conn.bodies("POST")]
    # said at seconds 0, 29, 59 and 89: the first at once, each window's newest at its end
    assert messages == ["0 of 8 pods fit", "1 of 8 pods fit", "3 of 8 pods fit",
                        "5 of 8 pods fit"]
    assert events.written == 4
    assert events.suppressed == 86


def test_a_held_event_carries_when_it_was_said_first_and_last_and_how_often() -> None:
    conn, clock = RecordingConnection(), Clock(1_800_000_000.0)
    events = KubeEvents(conn, window=30.0, clock=clock)  # type: ignore[arg-type]
    events.emit(waiting("0 of 8 pods fit"))
    for second in (5, 12, 20):
        clock.now = 1_800_000_000.0 + second
        events.emit(waiting("2 of 8 pods fit"))
    clock.now = 1_800_000_030.0
    assert events.write_due() == 1
    events.flush()
    first, held = conn.bodies("POST")
    assert (first["count"], first["firstTimestamp"]) == (1, "2027-01-15T08:00:00Z")
    assert (held["message"], held["count"]) == ("2 of 8 pods fit", 3)
    assert (held["firstTimestamp"], held["lastTimestamp"]) == (
        "2027-01-15T08:00:05Z", "2027-01-15T08:00:20Z")
    assert held["metadata"]["name"] != first["metadata"]["name"]


def test_the_timer_writes_a_held_event_when_its_window_ends() -> None:
    conn = RecordingConnection()
    events = KubeEvents(conn, window=0.05)  # type: ignore[arg-type]
    events.emit(waiting("0 of 8 pods fit"))
    events.emit(waiting("1 of 8 pods fit"))
    deadline = time.monotonic() + 5
    while len(conn.bodies("POST")) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [body["message"] for body in conn.bodies("POST")] == ["0 of 8 pods fit",
                                                           "1 of 8 pods fit"]
