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


def _describe(event: AnyEvent) -> str:
    if isinstance(event, PodEvent):
        return f"pod={event.pod.key} reason={event.reason}"
    return f"workload={event.key} reason={event.reason}"


def event_body(event: AnyEvent, *, now: datetime.datetime, seq: int) -> dict[str, object]:
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
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
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }


class KubeEvents:
    def __init__(self, conn: Connection, *, capacity: int = 1000) -> None:
        self.conn = conn
        self._seq = itertools.count()
        self._writer: QueueWriter[AnyEvent] = QueueWriter(
            self._write, name="events", capacity=capacity, log=log, describe=_describe)

    @property
    def written(self) -> int:
        return self._writer.written

    @property
    def dropped(self) -> int:
        return self._writer.dropped

    def emit(self, event: AnyEvent) -> None:
        self._writer.put(event)

    def flush(self, timeout: float = 5.0) -> None:
        self._writer.flush(timeout)

    def _write(self, event: AnyEvent) -> None:
        body = event_body(event, now=datetime.datetime.now(datetime.UTC),
                          seq=next(self._seq) % 65536)
        namespace = _involved(event)["namespace"]
        self.conn.request("POST", f"/api/v1/namespaces/{namespace}/events", body=body)
