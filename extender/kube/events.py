"""Kubernetes Events on pods and workloads, written by background threads so decisions never
wait on them.

``kubectl describe`` shows them, answering "why is my job pending?". What is written and when
is :class:`~extender.kube.eventwindows.EventWindows`'s: per object, the first Event of a
reason at once, then at most one per :data:`~extender.kube.eventwindows.WINDOW` seconds, the
newest said, held until its window ends (a timer thread writes it then). The queue of writes
is bounded: when the API server is slow, the newest news is dropped rather than memory
growing.
"""

from __future__ import annotations

import datetime
import itertools
import logging
import threading
import time
from collections.abc import Callable

from extender.kube.client import Connection
from extender.kube.eventwindows import WINDOW, Due, EventWindows
from extender.kube.writer import QueueWriter
from extender.state.ports import AnyEvent, PodEvent

log = logging.getLogger("muster.events")

COMPONENT = "muster"


def _involved(event: AnyEvent) -> dict[str, str]:
    if isinstance(event, PodEvent):
        pod = event.pod
        return {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace,
                "name": pod.name, "uid": pod.uid}
    return {"apiVersion": event.api_version, "kind": event.kind, "namespace": event.namespace,
            "name": event.name, "uid": event.uid}


def _describe(due: Due) -> str:
    event = due.event
    if isinstance(event, PodEvent):
        return f"pod={event.pod.key} reason={event.reason}"
    return f"workload={event.key} reason={event.reason}"


def _stamp(at: datetime.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def event_body(event: AnyEvent, *, now: datetime.datetime, seq: int, count: int = 1,
               first: datetime.datetime | None = None) -> dict[str, object]:
    """The Event saying ``event``, said ``count`` times from ``first`` to ``now``."""
    involved = _involved(event)
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{involved['name']}.muster."
                             f"{int(now.timestamp() * 1e6):x}{seq:04x}",
                     "namespace": involved["namespace"]},
        "involvedObject": involved,
        "reason": event.reason, "message": event.message[:1024], "type": event.type.value,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT, "reportingInstance": COMPONENT,
        "firstTimestamp": _stamp(first or now), "lastTimestamp": _stamp(now), "count": count,
    }


def _at(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC)


class KubeEvents:
    def __init__(self, conn: Connection, *, capacity: int = 1000, window: float = WINDOW,
                 clock: Callable[[], float] = time.time) -> None:
        self.conn = conn
        self._clock = clock
        self._seq = itertools.count()
        self._windows = EventWindows(window)
        self._due = threading.Condition()
        """Guards the windows; notified when one opens (the timer may wait less)."""
        self._writer: QueueWriter[Due] = QueueWriter(
            self._write, name="events", capacity=capacity, log=log, describe=_describe)
        threading.Thread(target=self._run_timer, name="events-timer", daemon=True).start()

    @property
    def written(self) -> int:
        return self._writer.written

    @property
    def dropped(self) -> int:
        return self._writer.dropped

    @property
    def suppressed(self) -> int:
        """Events said that were not written as an Event of their own (see
        :class:`~extender.kube.eventwindows.EventWindows`)."""
        with self._due:
            return self._windows.suppressed

    def emit(self, event: AnyEvent) -> None:
        with self._due:
            due = self._windows.offer(event, self._clock())
            self._due.notify()
        if due is not None:
            self._writer.put(due)

    def write_due(self) -> int:
        """Queue the held Events whose windows ended by now (the timer thread calls this);
        returns how many."""
        with self._due:
            due = self._windows.due(self._clock())
        for item in due:
            self._writer.put(item)
        return len(due)

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until every queued write was attempted (held Events stay held)."""
        self._writer.flush(timeout)

    def _run_timer(self) -> None:
        while True:
            with self._due:
                end = self._windows.next_due()
                wait = None if end is None else end - self._clock()
                if wait is None or wait > 0:
                    self._due.wait(wait)
            self.write_due()

    def _write(self, due: Due) -> None:
        event = due.event
        body = event_body(event, now=_at(due.last), seq=next(self._seq) % 65536,
                          count=due.count, first=_at(due.first))
        namespace = _involved(event)["namespace"]
        self.conn.request("POST", f"/api/v1/namespaces/{namespace}/events", body=body)
