"""Make kube-scheduler retry pods Muster turned away, once what kept them out is gone.

kube-scheduler puts a pod an extender rejected in its unschedulable queue and retries it on
the next cluster event it watches (any node or pod change) or, failing that, after five
minutes. What Muster learns on its own (a gang plan ended and freed its capacity, a workload
was observed, the cluster state is trusted again) is not such an event. So Muster makes one:
it patches the pod's status with a ``muster.dev/Gang`` condition saying why, which is a pod
update kube-scheduler reacts to (the extender's rejection requeues on any event). Status is
the least privilege that does it: ``pods/status patch``, not ``pods patch``.

Writes go through a bounded queue on a background thread, like events, so a slow API server
never holds a scheduling decision.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Sequence

from extender.kube.client import Connection, NotFound
from extender.kube.writer import PodWrites
from extender.state.ports import PodRef

log = logging.getLogger("muster.requeue")

CONDITION = "muster.dev/Gang"


def requeue_patch(reason: str, *, now: datetime.datetime) -> dict[str, object]:
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"status": {"conditions": [{
        "type": CONDITION, "status": "False", "reason": "Requeued",
        "message": f"Muster asked kube-scheduler to retry this pod: {reason}"[:1024],
        "lastProbeTime": stamp, "lastTransitionTime": stamp,
    }]}}


class KubeRequeuer(PodWrites):
    def __init__(self, conn: Connection, *, capacity: int = 10_000) -> None:
        super().__init__(conn, name="requeue", capacity=capacity, log=log)

    def requeue(self, pods: Sequence[PodRef], reason: str) -> None:
        # A dropped requeue is not lost work: kube-scheduler's own flush retries the pod.
        self._put(pods, reason)

    def _write(self, item: tuple[PodRef, str]) -> None:
        pod, reason = item
        try:
            self.conn.request(
                "PATCH", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status",
                body=requeue_patch(reason, now=datetime.datetime.now(datetime.UTC)),
                content_type="application/strategic-merge-patch+json")
        except NotFound:
            return  # deleted meanwhile: nothing to retry
