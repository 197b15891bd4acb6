"""Create a pod's Binding (``pods/binding``) as kube-scheduler's DefaultBinder would.

The Binding carries the pod's UID as a precondition, so a pod deleted and recreated under the
same name is never bound by mistake. A retried bind is idempotent: if the API server says the
pod is already assigned, we read the pod back and succeed when it sits on the same node.
"""

from __future__ import annotations

import logging

from extender.kube.client import Connection, KubeError
from extender.state.ports import BindError, PodRef

log = logging.getLogger("muster.binder")


class KubeBinder:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def bind(self, pod: PodRef, node: str) -> None:
        body = {
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding"
        try:
            self.conn.request("POST", path, body=body)
        except KubeError as err:
            if self._already_on(pod, node):
                log.info("pod=%s node=%s outcome=already-bound", pod.key, node)
                return
            raise BindError(str(err)) from err

    def _already_on(self, pod: PodRef, node: str) -> bool:
        try:
            current = self.conn.request(
                "GET", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}") or {}
        except KubeError:
            return False
        meta, spec = current.get("metadata") or {}, current.get("spec") or {}
        return bool(meta.get("uid") == pod.uid and spec.get("nodeName") == node)
