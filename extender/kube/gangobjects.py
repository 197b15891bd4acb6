"""Write the ``Gang`` objects (``muster.dev/v1alpha1``) that say what Muster decided per gang.

What to write is pure (:mod:`extender.server.gangobjects`); this adapter writes only what
changed since it last wrote, in the background through a bounded queue like events, so a
slow API server never holds a decision. A write is a merge patch of the object, or its
creation when it does not exist; a gang gone is deleted (its workload's deletion usually
got there first: the object is owned by the workload). A failed write is tried again at the
next publication.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import threading
from collections.abc import Mapping
from typing import Any

from extender.kube.client import Connection, NotFound
from extender.kube.writer import QueueWriter

log = logging.getLogger("muster.gangs")

Key = tuple[str, str]
PATH = "/apis/muster.dev/v1alpha1/namespaces/{namespace}/gangs"


class KubeGangObjects:
    def __init__(self, conn: Connection, *, capacity: int = 10_000) -> None:
        self.conn = conn
        self._lock = threading.Lock()
        self._written: dict[Key, Mapping[str, Any]] = {}
        self._writer: QueueWriter[tuple[Key, Mapping[str, Any] | None]] = QueueWriter(
            self._write, name="gangs", capacity=capacity, log=log,
            describe=lambda item: f"gang={item[0][0]}/{item[0][1]}")

    @property
    def written(self) -> int:
        return self._writer.written

    def publish(self, objects: Mapping[Key, Mapping[str, Any]]) -> None:
        with self._lock:
            changed = [(k, o) for k, o in objects.items() if self._written.get(k) != o]
            gone = [k for k in self._written if k not in objects]
            for key, obj in changed:
                self._written[key] = obj
            for key in gone:
                del self._written[key]
        for key, obj in sorted(changed, key=lambda item: item[0]):
            self._writer.put((key, obj))
        for key in sorted(gone):
            self._writer.put((key, None))

    def flush(self, timeout: float = 5.0) -> None:
        self._writer.flush(timeout)

    def _write(self, item: tuple[Key, Mapping[str, Any] | None]) -> None:
        (namespace, name), obj = item
        base = PATH.format(namespace=namespace)
        try:
            if obj is None:
                with contextlib.suppress(NotFound):  # gone with its workload already
                    self.conn.request("DELETE", f"{base}/{name}")
                return
            stamped = {**obj, "status": {**obj["status"], "lastTransitionTime":
                                         datetime.datetime.now(datetime.UTC).strftime(
                                             "%Y-%m-%dT%H:%M:%SZ")}}
            try:
                self.conn.request("PATCH", f"{base}/{name}", body=stamped,
                                  content_type="application/merge-patch+json")
            except NotFound:
                self.conn.request("POST", base, body=stamped)
        except Exception:
            with self._lock:  # not written: the next publication tries again
                if self._written.get((namespace, name)) is obj:
                    del self._written[(namespace, name)]
            raise
