"""A thread that lets time pass for the gang service, and looks again when the cluster moves.

Plans expire and turned-away pods are requeued on a clock, not only when kube-scheduler
happens to call: in a quiet cluster no call may come for minutes, and the pods waiting on a
plan that ended would wait just as long.

It also runs soon after a change that may let a waiting pod go (:func:`may_unblock`; the
app nudges the housekeeper from the state store's events while the service has pods waiting
on the cluster): the creation of a gang's last member, or the end of a pod that frees the
room a gated gang waits for, is acted on within ``gap`` seconds, not at the next tick. A
burst of events is taken in one round, and rounds are at least ``gap`` apart, so a busy
cluster costs at most one round per ``gap``; the status updates of running pods cost none.
A round that took long (a large cluster, or a busy machine where the round waited for the
CPU) spaces the next one further (:func:`spacing`), so rounds brought on by changes take at
most :data:`SHARE` of the time: the rest is for the verbs, and on a shared machine for the
API server.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

log = logging.getLogger("muster.housekeeping")

GAP = 0.05
"""Seconds between rounds brought on by changes: long enough to take a burst of pod events
(a controller creating a gang's members) in one round, short against kube-scheduler's own
pace."""


SHARE = 0.25
"""The most of the wall time that rounds brought on by changes may take."""
LONGEST = 0.5
"""The most seconds between a round and the next one brought on by changes, however long the
round took (it may have waited for the service's lock): a gang's last member is acted on
within this long after the round before."""

_ENDED = ("Succeeded", "Failed")


def spacing(took: float, gap: float) -> float:
    """Seconds from the end of a round that took ``took`` seconds to the earliest start of
    the next one brought on by changes: ``gap``, or longer so that rounds take at most
    :data:`SHARE` of the time, up to :data:`LONGEST`."""
    return max(gap, min(took * (1 - SHARE) / SHARE, LONGEST))


def behind_gates(obj: Mapping[str, Any] | None) -> bool:
    """Whether a pod object carries scheduling gates (any: Muster's or another's)."""
    return obj is not None and bool((obj.get("spec") or {}).get("schedulingGates"))


def may_unblock(source: str, kind: str, obj: Mapping[str, Any] | None, *,
                nodes: str = "v1/Node") -> bool:
    """Whether a change of the cluster may let a pod that waits on it go: a pod created or
    changed behind a scheduling gate (a gang's member arriving), a pod that ended or went
    (its room is free), any node change, a full list. Not a running pod's status update."""
    if source == nodes or obj is None or kind == "DELETED":
        return True
    return behind_gates(obj) or (obj.get("status") or {}).get("phase") in _ENDED


class Housekept(Protocol):
    def housekeep(self) -> int: ...


class Housekeeper:
    """Runs ``service.housekeep()`` in its own thread every ``interval`` seconds, and
    ``gap`` seconds after a nudge, spaced from the round before by ``pace(took)`` (default
    :func:`spacing`). The forecaster runs on one too (:mod:`extender.server.forecaster`)."""

    def __init__(self, service: Housekept, *, interval: float, gap: float = GAP,
                 pace: Callable[[float], float] | None = None,
                 name: str = "housekeeping") -> None:
        self._service = service
        self._interval = interval
        self._gap = min(gap, interval)
        self._pace = pace or (lambda took: spacing(took, self._gap))
        self._stop = threading.Event()
        self._nudged = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.rounds = 0
        """Rounds run so far (ticks and nudges alike)."""

    def start(self) -> Housekeeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._nudged.set()
        self._thread.join(5)

    def nudge(self) -> None:
        """Something changed: run a round soon. Cheap and safe from any thread (it only sets
        an event), so an informer may call it for every event."""
        self._nudged.set()

    def _run(self) -> None:
        ended, took = float("-inf"), 0.0
        while not self._stop.is_set():
            if self._nudged.wait(self._interval):
                # Coalesce: what arrives within the gap is taken by this one round.
                pause = max(self._gap, ended + self._pace(took) - time.monotonic())
                if self._stop.wait(pause):
                    return
                self._nudged.clear()  # a change during the round nudges the next one
            started = time.monotonic()
            try:
                self._service.housekeep()
            except Exception:  # the thread must outlive any bug; the next round tries again
                log.exception("event=housekeeping-failed")
            ended = time.monotonic()
            took = ended - started
            self.rounds += 1
