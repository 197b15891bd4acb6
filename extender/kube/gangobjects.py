"""Write the ``Gang`` objects (``muster.dev/v1alpha1``) that say what Muster decided per gang.

What to write is pure (:mod:`extender.server.gangobjects`); this adapter writes only what
changed since it last wrote, in the background through a bounded queue like events, so a
slow API server never holds a decision. A gang has at most one write queued at a time: a
publication while it waits replaces what that write carries, so a slow API server gets
each gang's latest state once, not every state it passed through.

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
from collections.abc import Mapping
from typing import Any

from extender.kube.client import Conflict, Connection, NotFound
from extender.kube.writer import QueueWriter

log = logging.getLogger("muster.gangs")

Key = tuple[str, str]
PATH = "/apis/muster.dev/v1alpha1/namespaces/{namespace}/gangs"
_GONE = None
"""What a pending write carries for a gang to delete."""


class KubeGangObjects:
    def __init__(self, conn: Connection, *, capacity: int = 10_000) -> None:
        self.conn = conn
        self._lock = threading.Lock()
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
            objects = {k: self._forecast(k, o) for k, o in self._objects.items()}
            changed = [(k, o) for k, o in objects.items() if self._written.get(k) != o]
            gone = [k for k in self._written if k not in objects]
            for key, obj in changed:
                self._written[key] = obj
            for key in gone:
                del self._written[key]
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
        self._writer.flush(timeout)

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
