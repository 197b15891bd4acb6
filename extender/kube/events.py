"""Kubernetes Events on pods, written by a background thread so decisions never wait on them.

``kubectl describe pod`` shows them, answering "why is my job pending?". The queue is
bounded: when the API server is slow, the oldest news is dropped rather than memory growing.
"""

from __future__ import annotations

import datetime
import itertools
import logging
import queue
import threading

from extender.kube.client import Connection, KubeError
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
        self._queue: queue.Queue[PodEvent] = queue.Queue(maxsize=capacity)
        self._seq = itertools.count()
        self.written = 0
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="events", daemon=True)
        self._thread.start()

    def emit(self, event: PodEvent) -> None:
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self.dropped += 1

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until every queued event was attempted (for tests and shutdown)."""
        done = threading.Event()

        def wait() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=wait, daemon=True).start()
        done.wait(timeout)

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            try:
                body = event_body(event, now=datetime.datetime.now(datetime.UTC),
                                  seq=next(self._seq) % 65536)
                self.conn.request("POST", f"/api/v1/namespaces/{event.pod.namespace}/events",
                                  body=body)
                self.written += 1
            except KubeError as err:
                log.warning("pod=%s reason=%s event=not-written problem=%r", event.pod.key,
                            event.reason, str(err))
            except Exception:
                log.exception("pod=%s event=not-written", event.pod.key)
            finally:
                self._queue.task_done()
