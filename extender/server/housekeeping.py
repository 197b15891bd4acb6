"""A thread that lets time pass for the gang service when no request comes.

Plans expire and turned-away pods are requeued on a clock, not only when kube-scheduler
happens to call: in a quiet cluster no call may come for minutes, and the pods waiting on a
plan that ended would wait just as long.
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

log = logging.getLogger("muster.housekeeping")


class Housekept(Protocol):
    def housekeep(self) -> int: ...


class Housekeeper:
    def __init__(self, service: Housekept, *, interval: float) -> None:
        self._service = service
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="housekeeping", daemon=True)

    def start(self) -> Housekeeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._service.housekeep()
            except Exception:  # the thread must outlive any bug; the next round tries again
                log.exception("event=housekeeping-failed")
