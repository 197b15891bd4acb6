"""Leader election on a Lease, as values: what a candidate does next, given what it read.

The rules are client-go's ``tools/leaderelection`` (what kube-scheduler and every controller
use), so a Muster replica behaves like one: a candidate may take the lease only once the
holder has not renewed it for ``leaseDurationSeconds`` *as measured by the candidate's own
clock since it last saw the record change* (never by comparing ``renewTime`` with its own
wall clock, so clock skew between nodes does not matter, only clock rate); the holder renews
every retry period and stops leading once ``renew_deadline`` has passed since its last
successful renewal began, which is before any other candidate may take over
(``lease_duration > renew_deadline``). Writes carry the ``resourceVersion`` read, so of two
candidates racing, the API server lets exactly one win.

Nothing here reads a clock or does I/O: ``now`` (monotonic seconds) and ``stamp`` (the
MicroTime to write) are passed in; :mod:`extender.kube.elector` is the adapter that acts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

JITTER = 1.2
"""client-go's ``JitterFactor``: a retry period must leave room for this much jitter."""


class ElectionError(ValueError):
    """The timing cannot give a single leader; the message says which rule it breaks."""


@dataclass(frozen=True, slots=True)
class ElectionTiming:
    """kube-scheduler's ``leaderElection`` durations, in seconds."""

    lease_duration: float = 15.0
    """How long a standby waits, from the last change of the lease it saw, before it takes
    the lease over: the longest a dead leader goes unreplaced."""
    renew_deadline: float = 10.0
    """How long the leader keeps deciding without a successful renewal; shorter than
    ``lease_duration`` so it has stopped before anyone else may start."""
    retry_period: float = 2.0
    """How often candidates try to take the lease and the leader renews it."""

    def problems(self) -> list[str]:
        out = []
        for name in ("lease_duration", "renew_deadline", "retry_period"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                out.append(f"{name} must be a positive duration, got {value}")
        if out:
            return out
        if self.lease_duration <= self.renew_deadline:
            out.append("lease_duration must be longer than renew_deadline, or a standby may "
                       "take over while the leader still decides")
        if self.renew_deadline <= JITTER * self.retry_period:
            out.append(f"renew_deadline must be longer than {JITTER:g} x retry_period, or one "
                       "slow renewal ends the leadership")
        if self.lease_duration < 1:
            out.append("lease_duration must be at least 1s (the Lease counts whole seconds)")
        return out


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The ``spec`` of a ``coordination.k8s.io/v1`` Lease, plus the version it was read at."""

    holder: str
    """``holderIdentity``; empty: released, anyone may take it at once."""
    duration_seconds: int
    """``leaseDurationSeconds``: what candidates wait, by their own clocks, after a renewal."""
    acquire_time: str
    renew_time: str
    transitions: int
    """``leaseTransitions``: how often the lease changed hands."""
    resource_version: str = ""
    """The version read; an update carrying it fails if anyone wrote in between."""

    def content(self) -> tuple[str, int, str, str, int]:
        return (self.holder, self.duration_seconds, self.acquire_time, self.renew_time,
                self.transitions)


@dataclass(frozen=True, slots=True)
class Observed:
    """The lease as this candidate last saw it change, and when (its monotonic clock)."""

    record: LeaseRecord
    at: float


def observe(last: Observed | None, current: LeaseRecord, *, now: float) -> Observed:
    """The observation after reading ``current``: the clock restarts only when the record's
    content changed (a live leader changes ``renewTime`` every renewal)."""
    if last is not None and last.record.content() == current.content():
        return Observed(current, last.at)
    return Observed(current, now)


@dataclass(frozen=True, slots=True)
class Create:
    """No lease exists: create it holding it."""

    record: LeaseRecord


@dataclass(frozen=True, slots=True)
class Update:
    """Write ``record`` (a renewal, or taking over an expired or released lease)."""

    record: LeaseRecord
    takeover: bool


@dataclass(frozen=True, slots=True)
class Wait:
    """Someone else holds a valid lease: try again later."""

    holder: str
    expires: float
    """Monotonic time from which, unless it changes again, the lease may be taken."""


Attempt = Create | Update | Wait


def next_attempt(current: LeaseRecord | None, *, me: str, observed: Observed | None,
                 now: float, stamp: str, timing: ElectionTiming) -> Attempt:
    """What candidate ``me`` does after reading ``current`` (None: no Lease) at ``now``."""
    duration = max(1, round(timing.lease_duration))
    if current is None:
        return Create(LeaseRecord(holder=me, duration_seconds=duration, acquire_time=stamp,
                                  renew_time=stamp, transitions=0))
    mine = current.holder == me
    if current.holder and not mine:
        seen = observed.at if observed is not None and (
            observed.record.content() == current.content()) else now
        expires = seen + current.duration_seconds
        if now < expires:
            return Wait(current.holder, expires)
    record = LeaseRecord(
        holder=me, duration_seconds=duration,
        acquire_time=current.acquire_time if mine else stamp, renew_time=stamp,
        transitions=current.transitions if mine else current.transitions + 1,
        resource_version=current.resource_version)
    return Update(record, takeover=not mine)


def released(current: LeaseRecord, *, stamp: str) -> LeaseRecord:
    """The lease given up on a clean shutdown (client-go's ``ReleaseOnCancel``): no holder and
    a one-second duration, so a standby takes over at its next try instead of waiting out
    the lease."""
    return replace(current, holder="", duration_seconds=1, acquire_time=stamp,
                   renew_time=stamp)


class Leadership(Protocol):
    """Whether this replica may decide: the server's view of the election (the elector in
    :mod:`extender.kube.elector` implements it)."""

    identity: str

    def leading(self) -> bool:
        """True while this replica holds the lease, judged by its own renewal deadline (so it
        turns False at the deadline even if the elector thread is stuck)."""

    def holder(self) -> str:
        """The holder this replica last read from the lease ('' unknown or released)."""

    def subscribe(self, on_change: Callable[[bool], None]) -> None:
        """Call ``on_change(True)`` on becoming leader and ``on_change(False)`` on losing it,
        from the elector's thread, in order."""
