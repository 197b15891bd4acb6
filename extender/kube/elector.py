"""The elector: one thread that takes, renews and gives up the Lease, and tells the server.

It acts out :func:`extender.state.election.next_attempt` on a :class:`LeaseLock`. Leading is
judged by a deadline on the monotonic clock: ``leading()`` is True only until
``renew_deadline`` after the start of the last successful renewal, so a replica whose renewals
fail (API server unreachable, partition, a stuck thread) stops deciding by itself, before a
standby may take over (``lease_duration`` after it last saw the lease change). Transitions
call the subscribers in order, from this thread, and are logged ``key=value``.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Protocol

from extender.kube.client import Connection, KubeError
from extender.kube.lease import LeaseLock
from extender.state.election import (
    JITTER,
    Create,
    ElectionTiming,
    LeaseRecord,
    Observed,
    Update,
    Wait,
    next_attempt,
    observe,
    released,
)

log = logging.getLogger("muster.election")

Monotonic = Callable[[], float]


class Lock(Protocol):
    """What the elector needs of a Lease (:class:`~extender.kube.lease.LeaseLock`); raises
    :class:`~extender.kube.client.KubeError` (``Conflict`` when another writer won)."""

    @property
    def describe(self) -> str: ...
    def get(self) -> LeaseRecord | None: ...
    def create(self, record: LeaseRecord) -> LeaseRecord: ...
    def update(self, record: LeaseRecord) -> LeaseRecord: ...


def micro_time(now: datetime.datetime) -> str:
    """A ``metav1.MicroTime`` as the API server writes it."""
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def wall_stamp() -> str:
    return micro_time(datetime.datetime.now(datetime.UTC))


class Elector:
    """Implements :class:`~extender.state.election.Leadership` for one replica."""

    def __init__(self, lock: Lock, *, identity: str, timing: ElectionTiming,
                 clock: Monotonic = time.monotonic, stamp: Callable[[], str] = wall_stamp,
                 on_transition: Callable[[bool], None] | None = None) -> None:
        self.identity = identity
        self._lock = lock
        self._timing = timing
        self._clock = clock
        self._stamp = stamp
        self._observed: Observed | None = None
        self._valid_until = -1.0
        """Monotonic deadline of this replica's leadership; in the past: not leading."""
        self._is_leader = False
        """Whether subscribers were last told True (the transition state)."""
        self._holder = ""
        self._subscribers: list[Callable[[bool], None]] = []
        if on_transition is not None:
            self._subscribers.append(on_transition)
        self._guard = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leader-election",
                                        daemon=True)
        self._jitter = random.Random(identity)  # seeded: a replica's retries are reproducible

    # --- Leadership ---------------------------------------------------------------------------

    def leading(self) -> bool:
        return self._clock() < self._valid_until

    def holder(self) -> str:
        return self._holder

    def subscribe(self, on_change: Callable[[bool], None]) -> None:
        self._subscribers.append(on_change)

    # --- running ------------------------------------------------------------------------------

    def start(self) -> Elector:
        log.info("event=election-start lease=%s identity=%s lease_duration=%g "
                 "renew_deadline=%g retry_period=%g", self._lock.describe, self.identity,
                 self._timing.lease_duration, self._timing.renew_deadline,
                 self._timing.retry_period)
        self._thread.start()
        return self

    def stop(self, *, release: bool = True) -> None:
        """Stop trying; a leader stops deciding at once and, with ``release``, gives the lease
        up so a standby takes over at its next try."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(self._timing.renew_deadline)
        with self._guard:
            was = self._valid_until
            self._valid_until = -1.0
        self._transition(False, reason="stopped")
        if release and was > self._clock():
            self._release()

    def step(self) -> float:
        """One try to take or renew the lease; returns the seconds to wait before the next.
        The thread calls this in a loop; tests call it directly with a fake clock."""
        started = self._clock()
        try:
            current = self._lock.get()
            if current is not None:
                self._observed = observe(self._observed, current, now=started)
                self._holder = current.holder
            attempt = next_attempt(current, me=self.identity, observed=self._observed,
                                   now=started, stamp=self._stamp(), timing=self._timing)
            if isinstance(attempt, Wait):
                self._lost_to(attempt.holder)
                return self._retry(leading=False)
            if isinstance(attempt, Create):
                written = self._lock.create(attempt.record)
            else:
                assert isinstance(attempt, Update)
                written = self._lock.update(attempt.record)
        except KubeError as err:  # Conflict included: someone else wrote first
            log.log(logging.WARNING if self._is_leader else logging.DEBUG,
                    "event=lease-attempt-failed lease=%s identity=%s leading=%s problem=%r",
                    self._lock.describe, self.identity, str(self.leading()).lower(),
                    str(err)[:300])
            self._expire_if_due()
            return self._retry(leading=self._is_leader)
        self._observed = Observed(written, started)
        self._holder = written.holder
        with self._guard:
            self._valid_until = started + self._timing.renew_deadline
        if not self._is_leader:
            log.info("event=lease-acquired lease=%s identity=%s transitions=%d",
                     self._lock.describe, self.identity, written.transitions)
            self._transition(True, reason="acquired")
        return self._retry(leading=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                wait = self.step()
            except Exception:  # the thread must live on; leading() runs out by itself
                log.exception("event=election-step-failed identity=%s", self.identity)
                self._expire_if_due()
                wait = self._timing.retry_period
            if self._is_leader:  # wake at the deadline, to step down at once if renewals fail
                wait = max(0.0, min(wait, self._valid_until - self._clock()))
            if self._stop.wait(wait):
                return
            self._expire_if_due()

    def _retry(self, *, leading: bool) -> float:
        period = self._timing.retry_period
        if leading:
            return period
        return period * (1 + self._jitter.random() * (JITTER - 1))

    def _expire_if_due(self) -> None:
        if self._is_leader and not self.leading():
            log.warning("event=lease-lost lease=%s identity=%s reason=renew-deadline-passed "
                        "renew_deadline=%g", self._lock.describe, self.identity,
                        self._timing.renew_deadline)
            self._transition(False, reason="renew-deadline")

    def _lost_to(self, holder: str) -> None:
        with self._guard:
            self._valid_until = -1.0
        if self._is_leader:
            log.warning("event=lease-lost lease=%s identity=%s reason=taken holder=%s",
                        self._lock.describe, self.identity, holder)
            self._transition(False, reason="taken")

    def _transition(self, leading: bool, *, reason: str) -> None:
        if leading == self._is_leader:
            return
        self._is_leader = leading
        log.info("event=leader-transition lease=%s identity=%s leading=%s reason=%s",
                 self._lock.describe, self.identity, str(leading).lower(), reason)
        for notify in self._subscribers:
            try:
                notify(leading)
            except Exception:
                log.exception("event=leader-transition-callback-failed leading=%s",
                              str(leading).lower())

    def _release(self) -> None:
        try:
            current = self._lock.get()
            if current is None or current.holder != self.identity:
                return
            self._lock.update(released(current, stamp=self._stamp()))
            log.info("event=lease-released lease=%s identity=%s", self._lock.describe,
                     self.identity)
        except KubeError as err:
            log.warning("event=lease-release-failed lease=%s identity=%s problem=%r",
                        self._lock.describe, self.identity, str(err)[:300])


SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def default_identity() -> str:
    """client-go's habit (kube-scheduler's too): the host name, which is the pod name in a
    pod, and a UUID, so a restarted replica is never mistaken for its previous life."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


def default_namespace() -> str:
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


def start_elector(conn: Connection, *, name: str, namespace: str, identity: str,
                  timing: ElectionTiming) -> Elector:
    """An elector on Lease ``namespace/name`` (not started: subscribe first, then start).
    Its API calls time out well inside the renew deadline, so a hung call cannot keep a
    leader past it unnoticed."""
    lease_conn = dataclasses.replace(conn, timeout=max(0.5, min(conn.timeout,
                                                                timing.renew_deadline / 3)))
    lock = LeaseLock(lease_conn, namespace or default_namespace(), name)
    return Elector(lock, identity=identity or default_identity(), timing=timing)
