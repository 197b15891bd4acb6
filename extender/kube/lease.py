"""A ``coordination.k8s.io/v1`` Lease as a lock: read it, create it, update it only at the
version read.

The kubernetes client's own ``leaderelection`` package ships a Lease lock, but its elector
sleeps on the wall clock, keeps leading for a whole renew deadline after a failed renewal and
cannot be driven by a test clock; this small adapter over the same REST calls lets
:mod:`extender.kube.elector` follow client-go's rules exactly. RBAC: ``get``, ``create`` and
``update`` on the one named Lease (``manifests/rbac.yaml``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from extender.kube.client import Connection, NotFound
from extender.state.election import LeaseRecord


@dataclass
class LeaseLock:
    conn: Connection
    namespace: str
    name: str

    @property
    def path(self) -> str:
        return (f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases")

    @property
    def describe(self) -> str:
        return f"{self.namespace}/{self.name}"

    def get(self) -> LeaseRecord | None:
        try:
            lease = self.conn.request("GET", f"{self.path}/{self.name}")
        except NotFound:
            return None
        return record_of(lease)

    def create(self, record: LeaseRecord) -> LeaseRecord:
        """POST; a candidate that lost the race to create it gets a Conflict (409)."""
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": spec_of(record)}
        return record_of(self.conn.request("POST", self.path, body=body))

    def update(self, record: LeaseRecord) -> LeaseRecord:
        """PUT with ``metadata.resourceVersion``: the API server refuses it with
        :class:`~extender.kube.client.Conflict` (409) when the Lease changed since ``record``
        was read, which is what makes one winner of two racing candidates."""
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace,
                             "resourceVersion": record.resource_version},
                "spec": spec_of(record)}
        return record_of(self.conn.request("PUT", f"{self.path}/{self.name}", body=body))


def spec_of(record: LeaseRecord) -> dict[str, Any]:
    spec: dict[str, Any] = {"holderIdentity": record.holder,
                            "leaseDurationSeconds": record.duration_seconds,
                            "acquireTime": record.acquire_time,
                            "renewTime": record.renew_time,
                            "leaseTransitions": record.transitions}
    return spec


def record_of(lease: dict[str, Any] | None) -> LeaseRecord:
    lease = lease or {}
    spec = lease.get("spec") or {}
    return LeaseRecord(
        holder=str(spec.get("holderIdentity") or ""),
        duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
        acquire_time=str(spec.get("acquireTime") or ""),
        renew_time=str(spec.get("renewTime") or ""),
        transitions=int(spec.get("leaseTransitions") or 0),
        resource_version=str((lease.get("metadata") or {}).get("resourceVersion") or ""))
