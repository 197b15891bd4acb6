"""A waiting gang's Gang object: a change of its reason, holders or members held at bind alone
is written at most once a window after its last write, the latest; a change of its state, pods
or bound count at once."""

from __future__ import annotations

import time
from typing import Any

from extender.kube.gangobjects import KubeGangObjects
from tests.unit.kube.recording import Clock, RecordingConnection

KEY = ("ml", "jobset-train")


def statuses(conn: RecordingConnection) -> list[dict[str, Any]]:
    return [body["status"] for body in conn.bodies()]


def gang(*, state: str = "Waiting", bound: int = 0, held: int = 0,
         reason: str = "0 of 8 GPUs free") -> dict[str, Any]:
    return {"apiVersion": "muster.dev/v1alpha1", "kind": "Gang",
            "metadata": {"name": KEY[1], "namespace": KEY[0]},
            "status": {"gang": "ml/train", "state": state, "minMember": 4, "pods": 4,
                       "bound": bound, "heldAtBind": held, "reason": reason,
                       "heldBy": "8 GPUs on n0 for ml/other (plan)"}}


def test_a_reason_changing_every_two_seconds_is_written_once_a_window_the_latest() -> None:
    conn, clock = RecordingConnection(), Clock(1000.0)
    gangs = KubeGangObjects(conn, text_window=10.0, clock=clock)  # type: ignore[arg-type]
    for step in range(30):  # housekeeping publishes every 2 s, 60 s in all
        clock.now = 1000.0 + 2 * step
        gangs.publish({KEY: gang(reason=f"{step} of 8 GPUs free")})
        gangs.flush()
    clock.now += 10
    gangs.publish({KEY: gang(reason="29 of 8 GPUs free")})  # unchanged: the held one goes
    gangs.flush()
    reasons = [s["reason"] for s in statuses(conn)]
    assert reasons == [f"{step} of 8 GPUs free" for step in (0, 5, 10, 15, 20, 25, 29)]


def test_members_reaching_bind_one_by_one_are_written_once_a_window() -> None:
    conn, clock = RecordingConnection(), Clock(1000.0)
    gangs = KubeGangObjects(conn, text_window=10.0, clock=clock)  # type: ignore[arg-type]
    for held in range(8):
        gangs.publish({KEY: gang(state="Planned", held=held, reason=f"{held} of 8 at bind")})
        gangs.flush()
        clock.now += 2
    gangs.publish({KEY: gang(state="Bound", bound=8, reason="admitted")})
    gangs.flush()
    assert [(s["state"], s["heldAtBind"]) for s in statuses(conn)] == [
        ("Planned", 0), ("Planned", 5), ("Bound", 0)]


def test_a_change_of_state_or_counts_is_written_at_once_with_the_latest_reason() -> None:
    conn, clock = RecordingConnection(), Clock(1000.0)
    gangs = KubeGangObjects(conn, text_window=10.0, clock=clock)  # type: ignore[arg-type]
    for published in (gang(), gang(reason="2 of 8 GPUs free"),
                      gang(bound=2, reason="planned on n0"),
                      gang(state="Bound", bound=4, reason="admitted")):
        gangs.publish({KEY: published})
        gangs.flush()
        clock.now += 1
    assert [(s["state"], s["bound"], s["reason"]) for s in statuses(conn)] == [
        ("Waiting", 0, "0 of 8 GPUs free"), ("Waiting", 2, "planned on n0"),
        ("Bound", 4, "admitted")]


def test_a_held_reason_is_written_when_its_window_ends_without_another_publication() -> None:
    conn = RecordingConnection()
    gangs = KubeGangObjects(conn, text_window=0.05)  # type: ignore[arg-type]
    gangs.publish({KEY: gang()})
    gangs.publish({KEY: gang(reason="3 of 8 GPUs free")})
    deadline = time.monotonic() + 5
    while len(statuses(conn)) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [s["reason"] for s in statuses(conn)] == ["0 of 8 GPUs free", "3 of 8 GPUs free"]


def test_a_gang_gone_while_its_reason_is_held_is_deleted_and_not_written() -> None:
    conn, clock = RecordingConnection(), Clock(1000.0)
    gangs = KubeGangObjects(conn, text_window=10.0, clock=clock)  # type: ignore[arg-type]
    gangs.publish({KEY: gang()})
    gangs.flush()
    gangs.publish({KEY: gang(reason="3 of 8 GPUs free")})
    gangs.publish({})
    clock.now += 20
    gangs.publish({})
    gangs.flush()
    assert [method for method, _, _ in conn.requests] == ["POST", "DELETE"]
