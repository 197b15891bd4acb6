"""Two electors on one Lease, driven step by step on a shared fake clock: one leads, the
other waits; a leader whose renewals fail stops leading at its renew deadline, before the
standby may take over; a leader that stops gives the lease up and the standby takes it at
its next try. At no instant do both lead."""

from __future__ import annotations

from dataclasses import replace

import pytest

from extender.kube.client import ClusterUnreachable, Conflict
from extender.kube.elector import Elector, micro_time
from extender.state.election import ElectionTiming, LeaseRecord

TIMING = ElectionTiming(lease_duration=15, renew_deadline=10, retry_period=2)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class MemoryLease:
    """One Lease with the API server's optimistic concurrency; ``down`` cuts one caller."""

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self.version = 0
        self.down: set[str] = set()
        self.caller = ""

    @property
    def describe(self) -> str:
        return "ns/muster"

    def _check(self) -> None:
        if self.caller in self.down:
            raise ClusterUnreachable("cannot reach the API server")

    def get(self) -> LeaseRecord | None:
        self._check()
        return self.record

    def create(self, record: LeaseRecord) -> LeaseRecord:
        self._check()
        if self.record is not None:
            raise Conflict("409 already exists")
        return self._write(record)

    def update(self, record: LeaseRecord) -> LeaseRecord:
        self._check()
        if self.record is None or record.resource_version != self.record.resource_version:
            raise Conflict("409 the object has been modified")
        return self._write(record)

    def _write(self, record: LeaseRecord) -> LeaseRecord:
        self.version += 1
        self.record = replace(record, resource_version=str(self.version))
        return self.record


class Caller:
    """An elector whose calls the lease attributes to it."""

    def __init__(self, lease: MemoryLease, clock: Clock, name: str) -> None:
        self.lease = lease
        self.name = name
        self.transitions: list[bool] = []
        self.elector = Elector(_As(lease, name), identity=name, timing=TIMING, clock=clock,
                               stamp=lambda: micro_time_at(clock.now),
                               on_transition=self.transitions.append)

    def step(self) -> None:
        self.elector.step()


class _As:
    def __init__(self, lease: MemoryLease, name: str) -> None:
        self._lease, self._name = lease, name

    @property
    def describe(self) -> str:
        return self._lease.describe

    def get(self) -> LeaseRecord | None:
        self._lease.caller = self._name
        return self._lease.get()

    def create(self, record: LeaseRecord) -> LeaseRecord:
        self._lease.caller = self._name
        return self._lease.create(record)

    def update(self, record: LeaseRecord) -> LeaseRecord:
        self._lease.caller = self._name
        return self._lease.update(record)


def micro_time_at(seconds: float) -> str:
    import datetime  # noqa: PLC0415

    return micro_time(datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
                      + datetime.timedelta(seconds=seconds))


@pytest.fixture()
def pair() -> tuple[Clock, MemoryLease, Caller, Caller]:
    clock, lease = Clock(), MemoryLease()
    return clock, lease, Caller(lease, clock, "a"), Caller(lease, clock, "b")


def run(clock: Clock, callers: list[Caller], *, until: float, tick: float = 1.0,
        ) -> list[tuple[float, str]]:
    """Every caller steps every ``retry_period``; returns who led at each tick, asserting
    that never more than one did."""
    seen: list[tuple[float, str]] = []
    while clock.now < until:
        if round(clock.now) % round(TIMING.retry_period) == 0:
            for caller in callers:
                caller.step()
        for caller in callers:
            caller.elector._expire_if_due()  # what the thread does at its wake-up
        leaders = [c.name for c in callers if c.elector.leading()]
        assert len(leaders) <= 1, f"two leaders at t={clock.now}: {leaders}"
        seen.append((clock.now, leaders[0] if leaders else ""))
        clock.now += tick
    return seen


def test_one_leads_and_the_other_waits_while_it_renews(pair: tuple[Clock, MemoryLease,
                                                                   Caller, Caller]) -> None:
    clock, lease, a, b = pair
    seen = run(clock, [a, b], until=60)
    assert {who for _, who in seen} == {"a"}
    assert a.transitions == [True] and b.transitions == []
    assert lease.record is not None and lease.record.holder == "a"
    assert lease.record.transitions == 0


def test_a_leader_whose_renewals_fail_stops_before_the_standby_starts(
        pair: tuple[Clock, MemoryLease, Caller, Caller]) -> None:
    clock, lease, a, b = pair
    run(clock, [a, b], until=10)
    last_renewal = 8.0  # a renewed at t=8 (every 2s)
    lease.down.add("a")  # a is cut off from the API server; b is not
    seen = run(clock, [a, b], until=40)
    a_until = max(t for t, who in seen if who == "a")
    b_from = min(t for t, who in seen if who == "b")
    assert a.transitions == [True, False]
    assert b.transitions == [True]
    assert a_until < last_renewal + TIMING.renew_deadline  # stopped at its own deadline
    assert b_from >= last_renewal + TIMING.lease_duration  # waited out the lease
    assert b_from - a_until >= TIMING.lease_duration - TIMING.renew_deadline
    assert lease.record is not None and lease.record.holder == "b"
    assert lease.record.transitions == 1


def test_the_old_leader_stays_standby_once_the_lease_changed_hands(
        pair: tuple[Clock, MemoryLease, Caller, Caller]) -> None:
    clock, lease, a, b = pair
    run(clock, [a, b], until=10)
    lease.down.add("a")
    run(clock, [a, b], until=40)
    lease.down.clear()  # a reaches the API server again: b holds a valid lease
    seen = run(clock, [a, b], until=80)
    assert {who for _, who in seen} == {"b"}
    assert a.transitions == [True, False]
    assert a.elector.holder() == "b"


def test_a_leader_that_stops_releases_and_the_standby_takes_over_at_its_next_try(
        pair: tuple[Clock, MemoryLease, Caller, Caller]) -> None:
    clock, lease, a, b = pair
    run(clock, [a, b], until=10)
    a.elector.stop()
    assert not a.elector.leading() and a.transitions == [True, False]
    assert lease.record is not None and lease.record.holder == ""
    b.step()
    assert b.elector.leading() and b.transitions == [True]


def test_of_two_racing_for_a_free_lease_exactly_one_wins(
        pair: tuple[Clock, MemoryLease, Caller, Caller]) -> None:
    _, lease, a, b = pair
    # Both read "no lease"; the second create conflicts.
    original_get = lease.get
    lease.get = lambda: None  # type: ignore[method-assign]
    a.step()
    b.step()
    lease.get = original_get  # type: ignore[method-assign]
    assert [a.elector.leading(), b.elector.leading()] == [True, False]
    assert b.transitions == []
