"""Write the ``Gang`` objects (``muster.dev/v1alpha1``) that say what Muster decided per gang.

What to write is pure (:mod:`extender.server.gangobjects`); this adapter writes only what
changed since it last wrote, in the background through a bounded queue like events, so a
slow API server never holds a decision. A gang has at most one write queued at a time: a
publication while it waits replaces what that write carries, so a slow API server gets
each gang's latest state once, not every state it passed through.

A change of a gang's reason, holders or members held at bind alone (``status.reason``,
``status.heldBy``, ``status.heldAtBind``: what moves with the cluster while the gang waits or
gathers at its barrier) is written at most once per :data:`TEXT_WINDOW` seconds after the
gang's last write, the latest when the window ends (a timer publishes again then). Every
other change (its state, pods, bound count, forecast, a new object, a deletion) is written at
once and carries the latest of those with it.

A write is the object's creation when this process has not written it yet (a POST; it
exists already after a restart: then a merge patch), and a merge patch after that (a POST
again if it was deleted behind Muster's back). A gang gone is deleted (its workload's
deletion usually got there first: the object is owned by the workload). A failed write is
tried again at the next publication.

Forecasts (:mod:`extender.server.forecaster`) come from their own thread through
:meth:`KubeGangObjects.show_forecasts`: each object is written with its gang's latest
``status.forecast`` (or the one for a gang not forecast), whichever of the two publications
came last, so a forecast and a change of state make one write, not two that undo each other.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from extender.kube.client import Conflict, Connection, NotFound
from extender.kube.writer import QueueWriter

log = logging.getLogger("muster.gangs")

Key = tuple[str, str]
PATH = "/apis/muster.dev/v1alpha1/namespaces/{namespace}/gangs"
_GONE = None
"""What a pending write carries for a gang to delete."""
TEXT_WINDOW = 10.0
"""Seconds after a gang's last write before a change of its reason, holders or members held at
bind alone is written (measured in
``tests/unit/kube/test_gang_objects_write_a_changing_reason_once_a_window.py``)."""
_TEXT = frozenset({"reason", "heldBy", "heldAtBind"})


def _without_text(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return {**obj, "status": {k: v for k, v in obj["status"].items() if k not in _TEXT}}


class KubeGangObjects:
    def __init__(self, conn: Connection, *, capacity: int = 10_000,
                 text_window: float = TEXT_WINDOW,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.conn = conn
        self._clock = clock
        self._text_window = text_window
        self._lock = threading.Lock()
        self._text_due = threading.Condition(self._lock)
        """Notified when a change of text alone waits (the timer may wait less)."""
        self._due: float | None = None
        """When the earliest change of text alone held back may be written."""
        self._queued_at: dict[Key, float] = {}
        """Key -> when its last write was queued."""
        self._written: dict[Key, Mapping[str, Any]] = {}
        """Key -> the object last published (written, or queued to be), forecast included."""
        self._objects: Mapping[Key, Mapping[str, Any]] = {}
        """The objects last published, as the service built them (no forecast)."""
        self._forecasts: Mapping[Key, Mapping[str, Any]] = {}
        self._absent: Mapping[str, Any] | None = None
        """The forecast of an object none is given for; ``None``: no forecast shown yet."""
        self._pending: dict[Key, Mapping[str, Any] | None] = {}
        """Key -> what its one queued write will carry (``None``: delete it)."""
        self._created: set[Key] = set()
        """Keys this process created or patched: they exist, a patch is enough."""
        self._writer: QueueWriter[Key] = QueueWriter(
            self._take, name="gangs", capacity=capacity, log=log,
            describe=lambda key: f"gang={key[0]}/{key[1]}")
        threading.Thread(target=self._run_timer, name="gangs-timer", daemon=True).start()

    @property
    def written(self) -> int:
        return self._writer.written

    @property
    def dropped(self) -> int:
        return self._writer.dropped

    def publish(self, objects: Mapping[Key, Mapping[str, Any]]) -> None:
        with self._lock:
            self._objects = objects
        self._publish()

    def show_forecasts(self, forecasts: Mapping[Key, Mapping[str, Any]], *,
                       absent: Mapping[str, Any]) -> None:
        """Write ``forecasts`` (key -> ``status.forecast``) on the objects, ``absent`` on the
        others, with the objects last published."""
        with self._lock:
            self._forecasts, self._absent = forecasts, absent
        self._publish()

    def _forecast(self, key: Key, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        """Under the lock: ``obj`` with its forecast, once forecasts are shown."""
        if self._absent is None:
            return obj
        shown = self._forecasts.get(key, self._absent)
        return {**obj, "status": {**obj["status"], "forecast": shown}}

    def _publish(self) -> None:
        queue: list[Key] = []
        with self._lock:
            now = self._clock()
            objects = {k: self._forecast(k, o) for k, o in self._objects.items()}
            changed, held = [], []
            for key, obj in objects.items():
                last = self._written.get(key)
                if last == obj:
                    continue
                due = self._queued_at.get(key, now) + self._text_window
                if last is not None and due > now and _without_text(last) == _without_text(obj):
                    held.append(due)
                else:
                    changed.append((key, obj))
            gone = [k for k in self._written if k not in objects]
            for key, obj in changed:
                self._written[key] = obj
                self._queued_at[key] = now
            for key in gone:
                del self._written[key]
                self._queued_at.pop(key, None)
            self._due = min(held, default=None)
            self._text_due.notify()
            for key, item in [*sorted(changed, key=lambda c: c[0]),
                              *((k, _GONE) for k in sorted(gone))]:
                if key not in self._pending:
                    queue.append(key)
                self._pending[key] = item
        for key in queue:
            if not self._writer.put(key):  # dropped: forget it, the next publication retries
                with self._lock:
                    self._pending.pop(key, None)
                    self._written.pop(key, None)

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until every queued write was attempted (a change of text held stays held)."""
        self._writer.flush(timeout)

    def _run_timer(self) -> None:
        while True:
            with self._text_due:
                while self._due is None or self._due > self._clock():
                    self._text_due.wait(None if self._due is None
                                        else self._due - self._clock())
                self._due = None
            self._publish()

    def _take(self, key: Key) -> None:
        with self._lock:
            if key not in self._pending:
                return  # nothing left to write for it
            obj = self._pending.pop(key)
        self._write(key, obj)

    def _write(self, key: Key, obj: Mapping[str, Any] | None) -> None:
        namespace, name = key
        base = PATH.format(namespace=namespace)
        try:
            if obj is None:
                with contextlib.suppress(NotFound):  # gone with its workload already
                    self.conn.request("DELETE", f"{base}/{name}")
                with self._lock:
                    self._created.discard(key)
                return
            stamped = {**obj, "status": {**obj["status"], "lastTransitionTime":
                                         datetime.datetime.now(datetime.UTC).strftime(
                                             "%Y-%m-%dT%H:%M:%SZ")}}
            with self._lock:
                exists = key in self._created
            if exists:
                try:
                    self._patch(base, name, stamped)
                except NotFound:  # deleted behind Muster's back
                    self.conn.request("POST", base, body=stamped)
            else:
                try:
                    self.conn.request("POST", base, body=stamped)
                except Conflict:  # written before this process started
                    self._patch(base, name, stamped)
            with self._lock:
                self._created.add(key)
        except Exception:
            with self._lock:  # not written: the next publication tries again
                if key in self._written and self._written[key] is obj:
                    del self._written[key]
            raise

    def _patch(self, base: str, name: str, stamped: Mapping[str, Any]) -> None:
        self.conn.request("PATCH", f"{base}/{name}", body=stamped,
                          content_type="application/merge-patch+json")
