"""Submit a workload to a sandbox the way its operator would make it run: the object, then the
intermediate objects and pods its controller would create (see :mod:`controllers`)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.core.catalog import Catalog
from extender.core.model import WorkloadTree
from extender.core.workload import resolve_workload
from extender.kube.client import Connection
from extender.sandbox.controllers import adopt, children, pod_groups


@dataclass(frozen=True)
class Submitted:
    workload: dict[str, Any]
    tree: WorkloadTree
    intermediates: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    groups: list[dict[str, Any]] = field(default_factory=list)
    """The Workload and PodGroups made for the upstream GangScheduling plugin, if asked."""


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
           namespace: str = "default", with_children: bool = True,
           workload_api: bool = False, scheduler_name: str | None = None) -> Submitted:
    """Create ``obj`` and, unless it is a bare Pod, what its controller would create.

    With ``workload_api`` (a gang-mode sandbox), also the ``Workload`` and one ``PodGroup`` per
    gang, created before the pods, and each gang pod names its PodGroup, as the upstream
    GangScheduling plugin needs. ``scheduler_name`` replaces the pods' ``schedulerName``: an
    upstream manifest may name a scheduler (``kai-scheduler``) the sandbox does not run."""
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
    groups: list[dict[str, Any]] = []
    if workload_api:
        workload, pod_group_list = pod_groups(created, tree, descriptor, pods)
        if workload is not None:
            done = create(conn, workload, "workloads")
            uids[("Workload", done["metadata"]["name"])] = done["metadata"]["uid"]
            groups = [done] + [create(conn, adopt(g, uids), "podgroups")
                               for g in pod_group_list]
    if scheduler_name is not None:
        for pod in pods:
            pod["spec"]["schedulerName"] = scheduler_name
    created_pods = [create(conn, adopt(pod, uids), "pods") for pod in pods]
    return Submitted(workload=created, tree=tree, intermediates=made, pods=created_pods,
                     groups=groups)
