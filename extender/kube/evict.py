"""Evict the whole victims of a gang's preemption plan, through the Eviction API.

kube-scheduler deletes only the victims on the one node it picks per preemption call, so a
victim gang spanning nodes would go on running in part until the preemptor's next members
call. Muster evicts every victim of the plan at once instead, with ``policy/v1`` Evictions:
PodDisruptionBudgets are honoured (a refused eviction is logged, and kube-scheduler's own
preemption for the next member may still take the pod), and each eviction is pinned to the
pod's UID, so a pod recreated under the same name is never evicted in its place.

Writes go through a bounded queue on a background thread, like events and requeues.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from extender.kube.client import Connection, NotFound
from extender.kube.writer import QueueWriter
from extender.state.ports import PodRef

log = logging.getLogger("muster.evict")


def eviction(pod: PodRef) -> dict[str, object]:
    """The ``policy/v1`` Eviction of ``pod``, for that very pod (UID precondition)."""
    return {"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
            "deleteOptions": {"preconditions": {"uid": pod.uid}}}


class KubeEvictor:
    def __init__(self, conn: Connection, *, capacity: int = 10_000) -> None:
        self.conn = conn
        self._writer: QueueWriter[tuple[PodRef, str]] = QueueWriter(
            self._write, name="evict", capacity=capacity, log=log,
            describe=lambda item: f"pod={item[0].key} verb=evict")

    @property
    def written(self) -> int:
        return self._writer.written

    def evict(self, pods: Sequence[PodRef], reason: str) -> None:
        for pod in pods:
            self._writer.put((pod, reason))

    def flush(self, timeout: float = 5.0) -> None:
        self._writer.flush(timeout)

    def _write(self, item: tuple[PodRef, str]) -> None:
        pod, reason = item
        try:
            self.conn.request(
                "POST", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/eviction",
                body=eviction(pod))
        except NotFound:
            return  # gone already: nothing to evict
        log.info("pod=%s verb=evict outcome=evicted reason=%r", pod.key, reason)
