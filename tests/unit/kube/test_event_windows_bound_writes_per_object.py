"""Muster's Events: per object, the first of a reason at once, then at most one per window, the
newest said; an object's newest Event is always what Muster said last."""

from __future__ import annotations

import random

import pytest

from extender.kube.eventwindows import WINDOW, Due, EventWindows, subject_of
from extender.state.ports import AnyEvent, EventType, PodEvent, PodRef, WorkloadEvent

WAITING, PLANNED, YIELDED = "GangWaiting", "GangPlanned", "GangYielded"


def on_jobset(reason: str, message: str, *, name: str = "train") -> WorkloadEvent:
    kind = EventType.WARNING if reason != PLANNED else EventType.NORMAL
    return WorkloadEvent("jobset.x-k8s.io/v1alpha2", "JobSet", "ml", name, f"uid-{name}",
                         kind, reason, message, gang=f"ml/{name}")


def on_pod(index: int, reason: str, message: str) -> PodEvent:
    return PodEvent(PodRef("ml", f"train-{index}", f"pod-{index}"), EventType.WARNING, reason,
                    message)


def said(due: Due) -> tuple[str, str]:
    return (due.event.reason, due.event.message)


def test_the_first_event_of_a_reason_is_written_at_once() -> None:
    windows = EventWindows(30.0)
    due = windows.offer(on_jobset(WAITING, "0 of 4 pods fit"), 100.0)
    assert due is not None and said(due) == (WAITING, "0 of 4 pods fit")
    assert (due.count, due.first, due.last) == (1, 100.0, 100.0)


def test_changes_within_a_window_are_written_once_when_it_ends_the_newest() -> None:
    windows = EventWindows(30.0)
    windows.offer(on_jobset(WAITING, "0 of 4 pods fit"), 100.0)
    for second in range(1, 20):
        assert windows.offer(on_jobset(WAITING, f"{second} GPUs free"), 100.0 + second) is None
    assert windows.due(129.9) == []
    [due] = windows.due(130.0)
    assert said(due) == (WAITING, "19 GPUs free")
    assert windows.suppressed == 18


def test_a_new_reason_is_written_at_once_and_the_held_one_never_after_it() -> None:
    windows = EventWindows(30.0)
    windows.offer(on_jobset(WAITING, "0 of 4 pods fit"), 100.0)
    windows.offer(on_jobset(WAITING, "2 of 4 pods fit"), 105.0)
    due = windows.offer(on_jobset(PLANNED, "planned on gpu-1"), 110.0)
    assert due is not None and said(due) == (PLANNED, "planned on gpu-1")
    assert windows.due(200.0) == []  # the stale wait would read as the newest state


def test_a_reason_held_while_another_is_written_is_superseded_by_the_newer() -> None:
    windows = EventWindows(30.0)
    windows.offer(on_jobset(WAITING, "0 of 4 pods fit"), 100.0)
    windows.offer(on_jobset(PLANNED, "planned on gpu-1"), 101.0)
    assert windows.offer(on_jobset(WAITING, "1 of 4 pods fit"), 102.0) is None
    assert windows.offer(on_jobset(PLANNED, "planned on gpu-2"), 103.0) is None
    assert [said(d) for d in windows.due(130.5)] == []  # the wait's window: nothing of it held
    assert [said(d) for d in windows.due(131.0)] == [(PLANNED, "planned on gpu-2")]


def test_identical_repeats_are_one_event_whose_count_says_how_many() -> None:
    windows = EventWindows(30.0)
    windows.offer(on_jobset(YIELDED, "gave way to ml/other"), 100.0)
    windows.offer(on_jobset(YIELDED, "gave way to ml/third"), 101.0)
    windows.offer(on_jobset(YIELDED, "gave way to ml/third"), 107.0)
    windows.offer(on_jobset(YIELDED, "gave way to ml/third"), 109.0)
    [due] = windows.due(130.0)
    assert (said(due), due.count, due.first, due.last) == (
        (YIELDED, "gave way to ml/third"), 3, 101.0, 109.0)


def test_a_held_event_saying_what_the_object_shows_already_is_not_written_again() -> None:
    windows = EventWindows(30.0)
    windows.offer(on_jobset(WAITING, "0 of 4 pods fit"), 100.0)
    windows.offer(on_jobset(WAITING, "1 of 4 pods fit"), 101.0)
    windows.offer(on_jobset(WAITING, "0 of 4 pods fit"), 102.0)
    assert windows.due(130.0) == []


def test_a_quiet_reason_is_written_at_once_again_once_its_window_ended() -> None:
    windows = EventWindows(30.0)
    windows.offer(on_jobset(WAITING, "0 of 4 pods fit"), 100.0)
    assert windows.due(130.0) == []
    assert windows.next_due() is None
    due = windows.offer(on_jobset(WAITING, "1 of 4 pods fit"), 140.0)
    assert due is not None and said(due) == (WAITING, "1 of 4 pods fit")


def test_each_object_has_its_own_windows() -> None:
    windows = EventWindows(30.0)
    firsts = [windows.offer(on_jobset(WAITING, "0 fit", name=n), 100.0) for n in ("a", "b")]
    firsts += [windows.offer(on_pod(i, WAITING, "0 fit"), 100.0) for i in range(2)]
    assert all(d is not None for d in firsts)


def test_no_window_writes_every_event_at_once() -> None:
    windows = EventWindows(0.0)
    assert all(windows.offer(on_jobset(WAITING, f"{i} fit"), 100.0 + i) is not None
               for i in range(5))


def replay(events: list[tuple[float, AnyEvent]], window: float) -> list[tuple[float, Due]]:
    """What is written, and when, for ``events`` said at their times; the windows are looked
    at every 0.5 s, as a late timer would."""
    windows = EventWindows(window)
    out: list[tuple[float, Due]] = []
    tick = 0.0
    for at, event in events:
        while tick + 0.5 <= at:
            tick += 0.5
            out += [(tick, d) for d in windows.due(tick)]
        due = windows.offer(event, at)
        if due is not None:
            out.append((at, due))
    out += [(at + 10 * window + 1, d) for d in windows.due(at + 10 * window + 1)]
    return out


def a_busy_gang(seconds: int, *, pods: int, seed: int) -> list[tuple[float, AnyEvent]]:
    """A gang whose reason changes about once a second (its counts move with the cluster),
    between waiting, planned and yielding, told on its workload and its pods."""
    rng = random.Random(seed)
    out: list[tuple[float, AnyEvent]] = []
    for second in range(seconds):
        reason = rng.choice([WAITING, WAITING, WAITING, PLANNED, YIELDED])
        message = f"{rng.randint(0, 8)} of 8 pods fit"
        out.append((float(second), on_jobset(reason, message)))
        if reason != PLANNED:
            out += [(second + 0.1, on_pod(i, reason, message)) for i in range(pods)]
    return out


@pytest.mark.parametrize("seed", [1, 2, 3, 13])
def test_a_busy_gang_writes_a_few_events_a_window_per_object_not_one_per_change(
        seed: int) -> None:
    said_ = a_busy_gang(300, pods=8, seed=seed)
    before = replay(said_, 0.0)
    after = replay(said_, WINDOW)
    assert len(before) == len(said_)
    objects, reasons = 9, 3
    assert len(after) <= objects * reasons * (300 / WINDOW + 1)
    assert len(after) * 4 <= len(before)


@pytest.mark.parametrize("seed", range(8))
def test_every_object_ends_showing_what_was_said_to_it_last(seed: int) -> None:
    said_ = a_busy_gang(120, pods=3, seed=seed)
    written = replay(said_, WINDOW)
    last_said = {subject_of(e): (e.reason, e.message) for _, e in said_}
    last_written = {subject_of(d.event): said(d) for _, d in written}
    assert last_written == last_said


@pytest.mark.parametrize("seed", range(8))
def test_writes_of_one_reason_on_one_object_are_a_window_apart_and_in_order(seed: int) -> None:
    written = replay(a_busy_gang(120, pods=3, seed=seed), WINDOW)
    last: dict[object, float] = {}
    newest: dict[object, float] = {}
    for at, due in written:
        key = (subject_of(due.event), due.event.reason)
        assert at - last.get(key, -WINDOW) >= WINDOW - 1e-9
        last[key] = at
        assert due.last >= newest.get(subject_of(due.event), 0.0)
        newest[subject_of(due.event)] = due.last
