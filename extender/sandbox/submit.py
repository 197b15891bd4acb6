"""Submit a workload to a sandbox the way its operator would make it run: the object, then what
its controller would create (see :mod:`controllers`).

A built-in kind (Job, Deployment, StatefulSet, ReplicaSet) is only created: the sandbox's
kube-controller-manager makes its pods, as on a cluster. So is a kind whose real operator runs
in the sandbox (its CRD carries :data:`operators.OPERATOR_LABEL`): the operator makes the rest,
and a stand-in beside it would make every pod twice. Any other kind gets the stand-in's Jobs
(whose pods the Job controller makes) and the stand-in's own pods."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.core.model.values import WorkloadTree
from extender.core.workloads.catalog import Catalog
from extender.core.workloads.descriptor import Descriptor
from extender.core.workloads.workload import resolve_workload
from extender.kube.client import Connection, NotFound
from extender.sandbox.controllers import adopt, children, pod_groups
from extender.sandbox.crds import BUILT_IN_GROUPS
from extender.sandbox.operators import OPERATOR_LABEL


@dataclass(frozen=True)
class Submitted:
    workload: dict[str, Any]
    tree: WorkloadTree
    intermediates: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    """The pods the stand-in made; those of Jobs and built-in kinds are kube-controller-manager's
    to make, and appear later (``tree.pods`` counts them all)."""
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
    """Create ``obj`` and, unless it is a bare Pod, a built-in kind or a kind a real operator
    runs here, what its controller would create.

    With ``workload_api`` (a gang-mode sandbox), also the ``Workload`` and one ``PodGroup`` per
    gang, created before any pod, and each gang pod (or Job template) names its PodGroup, as
    the upstream GangScheduling plugin needs. ``scheduler_name`` replaces the pods'
    ``schedulerName``: an upstream manifest may name a scheduler (``kai-scheduler``) the
    sandbox does not run."""
    descriptor = catalog.require(obj)
    body = copy.deepcopy(dict(obj))
    body.setdefault("metadata", {}).setdefault("namespace", namespace)
    built_in = descriptor.target.group in BUILT_IN_GROUPS
    if built_in and scheduler_name is not None:
        _set_scheduler(body, scheduler_name)
    created = create(conn, body, descriptor.target.plural)
    tree = resolve_workload(created, descriptor)
    if built_in or not with_children or real_operator(conn, descriptor) is not None:
        return Submitted(workload=created, tree=tree, intermediates=[], pods=[])
    intermediates, pods = children(created, tree, descriptor, pods_by_caller=False)
    uids: dict[tuple[str, str], str] = {}
    groups: list[dict[str, Any]] = []
    if workload_api:  # before anything that makes pods
        workload, pod_group_list = pod_groups(created, tree, descriptor, pods)
        if workload is not None:
            done = create(conn, workload, "workloads")
            uids[("Workload", done["metadata"]["name"])] = done["metadata"]["uid"]
            groups = [done] + [create(conn, adopt(g, uids), "podgroups")
                               for g in pod_group_list]
    by_job = {p["metadata"]["ownerReferences"][0]["name"]: p for p in pods
              if p["metadata"]["ownerReferences"][0]["kind"] == "Job"}
    made = []
    for item in intermediates:
        template = item["spec"]["template"]["spec"]
        group = by_job[item["metadata"]["name"]]["spec"].get("schedulingGroup")
        if group is not None:
            template["schedulingGroup"] = group
        if scheduler_name is not None:
            template["schedulerName"] = scheduler_name
        done = create(conn, item, "jobs")
        uids[(done["kind"], done["metadata"]["name"])] = done["metadata"]["uid"]
        made.append(done)
    own = [p for p in pods if p["metadata"]["ownerReferences"][0]["kind"] != "Job"]
    if scheduler_name is not None:
        for pod in own:
            pod["spec"]["schedulerName"] = scheduler_name
    created_pods = [create(conn, adopt(pod, uids), "pods") for pod in own]
    return Submitted(workload=created, tree=tree, intermediates=made, pods=created_pods,
                     groups=groups)


def real_operator(conn: Connection, descriptor: Descriptor) -> str | None:
    """The real operator the sandbox runs for the descriptor's kind (``lws``), if any."""
    target = descriptor.target
    try:
        crd = conn.request(
            "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                   f"{target.plural}.{target.group}")
    except NotFound:
        return None
    name = (crd.get("metadata", {}).get("labels") or {}).get(OPERATOR_LABEL)
    return str(name) if name else None


def _set_scheduler(obj: dict[str, Any], name: str) -> None:
    """``schedulerName`` of a built-in kind's pod template (a bare Pod's own spec)."""
    spec = obj.setdefault("spec", {})
    if obj.get("kind") != "Pod":
        spec = spec.setdefault("template", {}).setdefault("spec", {})
    spec["schedulerName"] = name
