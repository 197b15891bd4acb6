"""The gang service: the adapter between HTTP requests, cluster state, threads and the session.

Every gang decision is made by :class:`~extender.core.decide.session.GangSession` on an immutable
snapshot; :class:`GangService` serialises access to it (one condition variable) and is made of
seams, one module each:

- :mod:`extender.server.service_filter`: filter, prioritize and preempt, request to answer;
- :mod:`extender.server.service_bind`: bind, the barrier's held requests, parked binds;
- :mod:`extender.server.service_effects`: the session's effects carried out through ports;
- :mod:`extender.server.service_parts`: the state they share, declared once.

This module builds the service and keeps what is not a verb: leadership terms (a new session
per term), readiness and liveness, housekeeping (ticks, ungating looks, Gang objects) and the
introspection ``/inspect`` and the metrics read. It must not decide anything (the session
does) nor do network I/O under the lock (ports and the bind pool do it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from extender.core.decide.effects import Requeue
from extender.core.decide.session import GangSession
from extender.core.decide.settings import CoreSettings
from extender.core.model.snapshot import ClusterSnapshot
from extender.server.decider import Busy
from extender.server.gangobjects import gang_objects
from extender.server.inspect import describe_gangs
from extender.server.service_bind import BindVerbs
from extender.server.service_effects import ServiceEffects
from extender.server.service_filter import FilterVerbs
from extender.server.service_parts import Count
from extender.server.settings import Settings
from extender.state.ports import (
    Binder,
    Clock,
    EventSink,
    Evictor,
    GangObjectSink,
    MemoryEvictor,
    MemoryRequeuer,
    MemoryUngater,
    PodRef,
    Requeuer,
    Ungater,
)
from extender.state.store import StateStore

_INSPECT_WAIT = 1.0
"""Seconds ``/inspect/gangs`` waits for the lock before it gives up and says it is busy."""
GANG_OBJECTS_EVERY = 2.0
"""Seconds between two looks at what the Gang objects show (written only when changed)."""
_GAUGE_WAIT = 0.1
"""The same for each gauge of a scrape (six of them: a scrape must stay well inside its
timeout)."""

def _no_count(_verb: str, _outcome: str) -> None:
    return None


def _always() -> bool:
    return True


def session_clock(clock: Clock, monotonic: Clock | None) -> Clock:
    """The clock the session's deadlines run on: ``monotonic`` when given; else the system's
    monotonic clock when ``clock`` is the system's wall clock (as ``muster serve`` gives it),
    and ``clock`` itself otherwise (a test's or a replay's, which nothing steps)."""
    if monotonic is not None:
        return monotonic
    return time.monotonic if clock is time.time else clock


def core_settings(settings: Settings) -> CoreSettings:
    """The session's settings from the server's: every held bind takes a gunicorn thread,
    so at most the threads less those kept free for filters may hold one."""
    return CoreSettings(plan_ttl=settings.plan_ttl, bind_timeout=settings.bind_timeout,
                        stage_ttl=settings.stage_ttl, gate_bound=settings.gate_bound,
                        replacement_ttl=settings.replacement_ttl,
                        scheduler_names=settings.scheduler_names,
                        scoring=settings.scoring, workload_limits=settings.workload_limits,
                        max_held=max(1, settings.threads - max(2, settings.threads // 8)))


class GangService(FilterVerbs, BindVerbs):
    """The gang service: its verbs (:class:`FilterVerbs`, :class:`BindVerbs`), leadership,
    housekeeping and introspection over one session, under one condition variable."""

    def __init__(self, state: StateStore, *, settings: Settings, clock: Clock, binder: Binder,
                 events: EventSink, count: Count = _no_count,
                 requeuer: Requeuer | None = None, evictor: Evictor | None = None,
                 session: GangSession | None = None,
                 may_act: Callable[[], bool] | None = None,
                 ungater: Ungater | None = None,
                 gang_objects: GangObjectSink | None = None,
                 monotonic: Clock | None = None) -> None:
        """``clock`` is the wall clock; the session runs on ``monotonic``
        (:func:`session_clock`)."""
        self._state = state
        self._count = count
        self._requeuer: Requeuer = requeuer or MemoryRequeuer()
        self._evictor: Evictor = evictor or MemoryEvictor()
        self._gang_objects = gang_objects
        """Where the Gang objects go (``kubectl get gangs``); none in snapshot-file mode."""
        self._published: tuple[object, ...] | None = None
        self._published_at = float("-inf")
        self._ungater: Ungater = ungater or MemoryUngater()
        self._binds = ThreadPoolExecutor(max_workers=4, thread_name_prefix="parked-bind")
        self._settings = settings
        self._clock = session_clock(clock, monotonic)
        self._wall = clock
        self._binder = binder
        self._cond = threading.Condition()
        self.session = session or GangSession(core_settings(settings))
        self._may_act = may_act or _always
        self._effects = ServiceEffects(events=events, requeuer=self._requeuer,
                                       evictor=self._evictor, ungater=self._ungater,
                                       may_act=self._may_act)
        self._term = 0
        self._looks_before = (0, 0)
        """Gangs planned and answered by the fit bound in ungating looks of the sessions
        this service had before the current one (:meth:`gang_looks`)."""

    # --- leadership (see extender.server.leading) ----------------------------------------------

    def take_over(self, refused: Sequence[PodRef] = ()) -> int:
        """Start a new term as leader: forget every decision of any earlier term and rebuild
        the ledger from the cluster now (bound members of a gang admit it; a gang left below
        its minimum is planned for the rest). ``refused`` are the pods turned away while
        standby: they are requeued. Returns how many pods were requeued."""
        with self._cond:
            self._term += 1
            self._cond.notify_all()  # a bind still held from an older term fails
            gates = self.session.gates
            self._looks_before = (self._looks_before[0] + gates.evaluated,
                                  self._looks_before[1] + gates.bounded)
            self.session = GangSession(self.session.settings)
            for ref in refused:
                self.session.turn_away(ref, untrusted=True)
        return self.housekeep()  # the first look at the cluster rebuilds the ledger

    def step_down(self) -> int:
        """Stop deciding: fail every bind held at the barrier (kube-scheduler retries them
        with the new leader). Returns how many were held."""
        with self._cond:
            self._term += 1
            held = len(self.session.open_requests())
            self._cond.notify_all()
        return held

    # --- readiness -----------------------------------------------------------------------------

    def readiness(self) -> tuple[bool, str]:
        ready = self._state.readiness()
        return ready.ready, ready.reason

    def liveness(self, timeout: float) -> tuple[bool, str]:
        """Alive while the lock every decision takes is free within ``timeout``: a wedged
        service (work under the lock that never ends) fails its liveness probe and is
        restarted, instead of answering probes while every filter times out."""
        try:
            with self._lock_or_busy(timeout):
                return True, "ok"
        except Busy as err:
            return False, str(err)

    @contextmanager
    def _lock_or_busy(self, wait: float = _GAUGE_WAIT) -> Iterator[None]:
        """The lock, for introspection that must not hang with a wedged service."""
        if not self._cond.acquire(timeout=wait):
            raise Busy(f"the service lock was not free within {wait:g}s")
        try:
            yield
        finally:
            self._cond.release()

    # --- housekeeping: time passes and state changes without requests ------------------------

    def waits_on_cluster(self) -> bool:
        """Whether pods wait for the cluster to change: gated pods Muster watches, or pods it
        turned away. Read without the lock (a hint for the housekeeper's nudges: a stale
        answer costs one round, or leaves the change to the next tick)."""
        session = self.session
        return bool(session.gates.since) or bool(session.turned_away)

    def housekeep(self) -> int:
        """Expire what is due, requeue turned-away pods whose obstacle is gone, and ungate
        gated gangs whose plan is made; returns how many were requeued. Run every second or
        so by the server's housekeeper."""
        ready = self._state.readiness().ready
        with self._cond:
            snapshot, now = self._state.snapshot(), self._clock()
            effects = self.session.tick(snapshot, now=now, trusted=ready)
            if ready:  # gated gangs are planned only on a state that can be trusted
                self.session.gates.wall_offset = self._wall() - now
                effects += self.session.ungate(snapshot, now=now)
            parked = self._apply(effects)
            objects = self._gang_objects_due(snapshot, now)
        if objects is not None and self._gang_objects is not None:
            self._gang_objects.publish(objects)
        for member in parked:
            self._binds.submit(self._bind_parked, member.pod, member.node)
        return sum(len(e.pods) for e in effects if isinstance(e, Requeue))

    def _gang_objects_due(self, snapshot: ClusterSnapshot, now: float,
                          ) -> dict[tuple[str, str], dict[str, Any]] | None:
        """Under the lock: the Gang objects on ``snapshot`` (the one housekeeping ticked
        with), when something they show may have changed and at most every
        :data:`GANG_OBJECTS_EVERY` seconds; ``None`` otherwise."""
        if self._gang_objects is None or now - self._published_at < GANG_OBJECTS_EVERY:
            return None
        session = self.session
        seen = (id(snapshot), session.ledger.version, session.reasons_version)
        if seen == self._published:
            return None
        self._published, self._published_at = seen, now
        return gang_objects(self._gangs(snapshot), snapshot)

    # --- introspection -----------------------------------------------------------------------

    def inspect_gangs(self) -> list[dict[str, Any]]:
        snapshot = self._state.snapshot()
        with self._lock_or_busy(_INSPECT_WAIT):
            return self._gangs(snapshot)

    def _gangs(self, snapshot: ClusterSnapshot) -> list[dict[str, Any]]:
        """Under the lock: the gangs this Muster serves, as ``/inspect/gangs`` shows them."""
        session = self.session
        return describe_gangs(snapshot, session.ledger, last_reason=dict(session.last_reason),
                              waiting=session.open_requests(), holders=dict(session.holders),
                              scheduler_names=self._settings.scheduler_names,
                              wall_offset=self._wall() - self._clock())

    def gang_looks(self) -> Mapping[str, int]:
        """Gangs left gated that ungating looks planned (the planner ran, whether or not it
        found room) and those the fit bound answered without planning, since start, over
        every term (read under the lock: a new term moves the counts to ``_looks_before``)."""
        with self._lock_or_busy():
            planned, bounded = self._looks_before
            gates = self.session.gates
            return {"planner": planned + gates.evaluated, "bound": bounded + gates.bounded}

    def gang_counts(self) -> Mapping[str, int]:
        snapshot = self._state.snapshot()
        with self._lock_or_busy():
            gangs = self._gangs(snapshot)
            counts = {"waiting": 0, "planned": 0, "bound": 0, "finished": 0,
                      "expired": self.session.expired_total}
            for g in gangs:
                counts[g["state"]] = counts.get(g["state"], 0) + 1
            return counts

    def reserved_gpus(self) -> float:
        snapshot = self._state.snapshot()
        with self._lock_or_busy():
            gangs = describe_gangs(snapshot, self.session.ledger, last_reason={}, waiting={},
                                   scheduler_names=self._settings.scheduler_names)
        return float(sum(g["reservedGpus"] for g in gangs))

    def binds_waiting(self) -> int:
        with self._lock_or_busy():
            return len(self.session.open_requests())
