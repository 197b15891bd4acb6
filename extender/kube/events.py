"""Kubernetes Events on pods, written by a background thread so decisions never wait on them.

``kubectl describe pod`` shows them, answering "why is my job pending?". The queue is
bounded: when the API server is slow, the oldest news is dropped rather than memory growing.
"""

from __future__ import annotations

import datetime
import itertools
import logging

from extender.kube.client import Connection
from extender.kube.writer import QueueWriter
from extender.state.ports import PodEvent

log = logging.getLogger("muster.events")

COMPONENT = "muster"


def event_body(event: PodEvent, *, now: datetime.datetime, seq: int) -> dict[str, object]:
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    pod = event.pod
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{pod.name}.muster.{int(now.timestamp() * 1e6):x}{seq:04x}",
                     "namespace": pod.namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace,
                           "name": pod.name, "uid": pod.uid},
        "reason": event.reason, "message": event.message[:1024], "type": event.type.value,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT, "reportingInstance": COMPONENT,
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }


class KubeEvents:
    def __init__(self, conn: Connection, *, capacity: int = 1000) -> None:
        self.conn = conn
        self._seq = itertools.count()
        self._writer: QueueWriter[PodEvent] = QueueWriter(
            self._write, name="events", capacity=capacity, log=log,
            describe=lambda e: f"pod={e.pod.key} reason={e.reason}")

    @property
    def written(self) -> int:
        return self._writer.written

    @property
    def dropped(self) -> int:
        return self._writer.dropped

    def emit(self, event: PodEvent) -> None:
        self._writer.put(event)

    def flush(self, timeout: float = 5.0) -> None:
        self._writer.flush(timeout)

    def _write(self, event: PodEvent) -> None:
        body = event_body(event, now=datetime.datetime.now(datetime.UTC),
                          seq=next(self._seq) % 65536)
        self.conn.request("POST", f"/api/v1/namespaces/{event.pod.namespace}/events", body=body)
