"""Remove Muster's scheduling gate from pods whose gang may start (or that are in none).

The API server lets a pod's ``spec.schedulingGates`` only shrink after creation, and each
removal is a pod update kube-scheduler reacts to at once (its SchedulingGates PreEnqueue
plugin lets the pod into the queue when no gate is left). The patch is a strategic merge
patch that deletes only the entry named Muster's gate (``schedulingGates`` merges by
``name``), so gates other controllers put there stay; it carries the pod's UID, which the API
server refuses to change, so a pod recreated under the same name is never ungated by mistake.
Writes go through a bounded queue drained by :data:`THREADS` background threads: housekeeping
never waits on them, and a gang's members are ungated in a few round trips, not one per pod
(a 16-pod gang's patches one after another took 16 round trips before its last member could
be scheduled, and every gang ungated in a burst queued behind the ones before it).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from extender.kube.client import Connection, KubeError, NotFound
from extender.kube.writer import PodWrites
from extender.state.ports import PodRef

log = logging.getLogger("muster.ungate")

THREADS = 8
"""Patches in flight at once: the kubernetes client's connection pool holds more."""


def ungate_patch(pod: PodRef, gate: str) -> dict[str, object]:
    return {"metadata": {"uid": pod.uid},
            "spec": {"schedulingGates": [{"$patch": "delete", "name": gate}]}}


class KubeUngater(PodWrites):
    def __init__(self, conn: Connection, *, gate: str, capacity: int = 10_000) -> None:
        super().__init__(conn, name="ungate", capacity=capacity, log=log, threads=THREADS)
        self.gate = gate

    def ungate(self, pods: Sequence[PodRef], reason: str) -> None:
        # A dropped write is asked for again: the session retries a gate still seen.
        self._put(pods, reason)

    def _write(self, item: tuple[PodRef, str]) -> None:
        pod, reason = item
        try:
            self.conn.request(
                "PATCH", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}",
                body=ungate_patch(pod, self.gate),
                content_type="application/strategic-merge-patch+json")
        except NotFound:
            return  # deleted meanwhile: nothing to ungate
        except KubeError as err:
            log.warning("pod=%s event=ungate-failed reason=%r problem=%r", pod.key, reason,
                        str(err)[:300])
            return
        log.debug("pod=%s event=ungated reason=%r", pod.key, reason)
