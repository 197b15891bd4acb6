"""The pure lease rules are client-go's: a standby waits out the lease by its own clock from
the last change it saw, a renewal restarts that wait, a released lease is free at once, a
renewal keeps the acquire time and the transition count, a takeover counts one more."""

from __future__ import annotations

import pytest

from extender.state.election import (
    Create,
    ElectionTiming,
    LeaseRecord,
    Update,
    Wait,
    next_attempt,
    observe,
    released,
)

T = ElectionTiming(lease_duration=15, renew_deadline=10, retry_period=2)
HELD = LeaseRecord(holder="a", duration_seconds=15, acquire_time="t0", renew_time="t1",
                   transitions=3, resource_version="7")


def test_no_lease_is_created_holding_it() -> None:
    attempt = next_attempt(None, me="b", observed=None, now=100, stamp="s", timing=T)
    assert attempt == Create(LeaseRecord("b", 15, "s", "s", 0))


def test_a_held_lease_is_taken_only_after_its_duration_since_it_was_last_seen_changing() -> None:
    seen = observe(None, HELD, now=100)
    assert next_attempt(HELD, me="b", observed=seen, now=114.9, stamp="s",
                        timing=T) == Wait("a", 115)
    # The same record read again later does not restart the wait.
    seen = observe(seen, HELD, now=110)
    assert seen.at == 100
    taken = next_attempt(HELD, me="b", observed=seen, now=115, stamp="s", timing=T)
    assert taken == Update(LeaseRecord("b", 15, "s", "s", 4, resource_version="7"),
                           takeover=True)


def test_a_renewal_restarts_the_standbys_wait() -> None:
    seen = observe(None, HELD, now=100)
    renewed = LeaseRecord(**{**_fields(HELD), "renew_time": "t2", "resource_version": "8"})
    seen = observe(seen, renewed, now=112)
    assert seen.at == 112
    assert isinstance(next_attempt(renewed, me="b", observed=seen, now=120, stamp="s",
                                   timing=T), Wait)


def test_a_lease_first_seen_now_is_waited_out_in_full() -> None:
    # A standby that just started cannot know when the holder last renewed.
    assert next_attempt(HELD, me="b", observed=None, now=500, stamp="s",
                        timing=T) == Wait("a", 515)


def test_a_released_lease_is_taken_at_once() -> None:
    free = released(HELD, stamp="r")
    assert free.holder == "" and free.duration_seconds == 1 and free.transitions == 3
    seen = observe(None, free, now=100)
    attempt = next_attempt(free, me="b", observed=seen, now=100, stamp="s", timing=T)
    assert isinstance(attempt, Update) and attempt.record.holder == "b"
    assert attempt.record.transitions == 4


def test_the_holder_renews_keeping_acquire_time_and_transitions() -> None:
    attempt = next_attempt(HELD, me="a", observed=observe(None, HELD, now=0), now=1,
                           stamp="s", timing=T)
    assert attempt == Update(LeaseRecord("a", 15, "t0", "s", 3, resource_version="7"),
                             takeover=False)


@pytest.mark.parametrize(("timing", "words"), [
    (ElectionTiming(10, 10, 2), "longer than renew_deadline"),
    (ElectionTiming(15, 2, 2), "1.2 x retry_period"),
    (ElectionTiming(15, 10, 0), "positive"),
    (ElectionTiming(0.5, 0.3, 0.1), "at least 1s"),
])
def test_timings_that_could_give_two_leaders_are_refused(timing: ElectionTiming,
                                                         words: str) -> None:
    assert any(words in p for p in timing.problems()), timing.problems()


def test_kube_schedulers_defaults_are_valid() -> None:
    assert ElectionTiming().problems() == []


def _fields(r: LeaseRecord) -> dict[str, object]:
    return {"holder": r.holder, "duration_seconds": r.duration_seconds,
            "acquire_time": r.acquire_time, "renew_time": r.renew_time,
            "transitions": r.transitions, "resource_version": r.resource_version}
