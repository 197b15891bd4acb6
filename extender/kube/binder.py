"""Create a pod's Binding (``pods/binding``) as kube-scheduler's DefaultBinder would.

The Binding carries the pod's UID as a precondition, so a pod deleted and recreated under the
same name is never bound by mistake. A retried bind is idempotent: if the API server says the
pod is already assigned, we read the pod back and succeed when it sits on the same node.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from extender.core.devices.reservation import not_allocated_to, reserved_for
from extender.kube.client import Conflict, Connection, KubeError
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

    def reserve_claims(self, pod: PodRef, node: str, claims: Sequence[str]) -> None:
        """Put the pod back in each claim's ``status.reservedFor`` before Muster binds it
        itself (kube-scheduler's Unreserve took it out when the pod's request was refused),
        as kube-scheduler's PreBind would. A claim kube-scheduler deallocated or moved
        meanwhile (its PostFilter frees an unreserved claim) fails the bind: the pod would
        be bound with devices nobody holds for it. Once reserved, the claim is no longer one
        PostFilter frees. (kube-controller-manager also reserves an allocated claim for a pod
        found bound, but only after the Binding.) The write carries the claim's
        ``resourceVersion``: a claim changed meanwhile is read again, twice at most."""
        for name in claims:
            path = f"/apis/resource.k8s.io/v1/namespaces/{pod.namespace}/resourceclaims/{name}"
            for attempt in range(3):
                try:
                    claim = self.conn.request("GET", path) or {}
                    why = not_allocated_to(claim, node)
                    if why is not None:
                        raise BindError(f"not binding {pod.key} to {node}: {why}")
                    body = reserved_for(claim, name=pod.name, uid=pod.uid)
                    if body is not None:
                        self.conn.request("PUT", path + "/status", body=body)
                        log.info("pod=%s claim=%s node=%s outcome=reserved", pod.key, name, node)
                    break
                except Conflict as err:
                    if attempt == 2:
                        raise BindError(f"reserving ResourceClaim {pod.namespace}/{name} for "
                                        f"{pod.key}: {err}") from err
                except (KubeError, ValueError) as err:
                    raise BindError(f"reserving ResourceClaim {pod.namespace}/{name} for "
                                    f"{pod.key}: {err}") from err

    def _already_on(self, pod: PodRef, node: str) -> bool:
        try:
            current = self.conn.request(
                "GET", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}") or {}
        except KubeError:
            return False
        meta, spec = current.get("metadata") or {}, current.get("spec") or {}
        return bool(meta.get("uid") == pod.uid and spec.get("nodeName") == node)
