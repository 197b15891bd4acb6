"""Submit a workload to a sandbox the way its operator would make it run: the object, then the
intermediate objects and pods its controller would create (see :mod:`controllers`)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.core.catalog import Catalog
from extender.core.model import WorkloadTree
from extender.core.workload import resolve_workload
from extender.kube.client import Connection
from extender.sandbox.controllers import adopt, children


@dataclass(frozen=True)
class Submitted:
    workload: dict[str, Any]
    tree: WorkloadTree
    intermediates: list[dict[str, Any]]
    pods: list[dict[str, Any]]


def collection_path(api_version: str, plural: str, namespace: str) -> str:
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return f"{prefix}/namespaces/{namespace}/{plural}"


def create(conn: Connection, obj: Mapping[str, Any], plural: str) -> dict[str, Any]:
    namespace = obj.get("metadata", {}).get("namespace") or "default"
    body = copy.deepcopy(dict(obj))
    body.setdefault("metadata", {})["namespace"] = namespace
    created: dict[str, Any] = conn.request(
        "POST", collection_path(str(obj["apiVersion"]), plural, namespace), body=body)
    return created


def submit(conn: Connection, obj: Mapping[str, Any], catalog: Catalog, *,
           namespace: str = "default", with_children: bool = True) -> Submitted:
    """Create ``obj`` and, unless it is a bare Pod, what its controller would create."""
    descriptor = catalog.require(obj)
    body = copy.deepcopy(dict(obj))
    body.setdefault("metadata", {}).setdefault("namespace", namespace)
    created = create(conn, body, descriptor.target.plural)
    tree = resolve_workload(created, descriptor)
    if (obj.get("kind") == "Pod" and obj.get("apiVersion") == "v1") or not with_children:
        return Submitted(workload=created, tree=tree, intermediates=[], pods=[])
    intermediates, pods = children(created, tree, descriptor)
    uids: dict[tuple[str, str], str] = {}
    made = []
    for item in intermediates:
        plural = "jobs" if item["kind"] == "Job" else "statefulsets"
        done = create(conn, item, plural)
        uids[(done["kind"], done["metadata"]["name"])] = done["metadata"]["uid"]
        made.append(done)
    created_pods = [create(conn, adopt(pod, uids), "pods") for pod in pods]
    return Submitted(workload=created, tree=tree, intermediates=made, pods=created_pods)
