"""Stand-ins for the operators a sandbox does not run (JobSet, LWS, KubeRay, ...).

Without an operator, a JobSet object creates nothing. These functions make what its controller
would: intermediate objects (one ``Job`` per replicatedJob replica, one ``StatefulSet`` per LWS
group) and the pods, with the labels and owner references the descriptor matches pods by. The
pods are built from the workload tree the descriptor resolves, so what Muster schedules in the
sandbox is exactly what the descriptor says the workload is. Pure: objects in, manifests out.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from extender.core.descriptor import Descriptor
from extender.core.model import Role, WorkloadTree

#: Intermediate owners we can create as real built-in objects, by kind.
_INTERMEDIATE = {"Job": "batch/v1", "StatefulSet": "apps/v1"}


def dns_name(*parts: object) -> str:
    """A DNS-1123 name from parts (``Master`` -> ``master``), at most 63 characters."""
    text = "-".join(str(p) for p in parts).lower()
    text = re.sub(r"[^a-z0-9-]+", "-", text).strip("-")
    return text[:63].rstrip("-") or "x"


def owner_ref(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"],
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}


PLACEHOLDER_IMAGE = "registry.invalid/muster-sandbox/placeholder:latest"


def runnable(spec: dict[str, Any]) -> dict[str, Any]:
    """A pod spec the API server accepts: operators fill in what their CRDs leave out (an
    image, a container name), so scattered-field kinds (Dynamo, NIM) get placeholders."""
    containers = [dict(c) for c in spec.get("containers") or [] if isinstance(c, dict)]
    if not containers:
        containers = [{}]
    for i, container in enumerate(containers):
        container.setdefault("name", "main" if i == 0 else f"c{i}")
        container.setdefault("image", PLACEHOLDER_IMAGE)
    return {**spec, "containers": containers}


def _role_label_value(role: Role, descriptor: Descriptor, index: int) -> str:
    """The role label value that :mod:`extender.core.membership` reads back as ``role``."""
    for value, name in descriptor.pods.role_map:
        if name == role.name:
            return value
    if descriptor.pods.role_default == role.name:
        return str(index + 1)  # e.g. LWS worker-index 1..size-1; "0" is the leader
    return role.name


def _pod_labels(tree: WorkloadTree, descriptor: Descriptor, role: Role, replica: int,
                index: int) -> dict[str, str]:
    match = descriptor.pods
    labels: dict[str, str] = {"muster.dev/sandbox-workload": dns_name(tree.ref.name)}
    if match.workload_label:
        labels[match.workload_label] = tree.ref.name
    for label in match.role_labels[:1]:
        labels[label] = _role_label_value(role, descriptor, index)
    if match.replica_label:
        labels[match.replica_label] = str(replica)
    return labels


def _group_labels(tree: WorkloadTree, descriptor: Descriptor, role: Role,
                  replica: int) -> dict[str, str]:
    """Labels every pod of one role replica shares (an owner's selector)."""
    labels = _pod_labels(tree, descriptor, role, replica, 0)
    if descriptor.pods.role_map or descriptor.pods.role_default:
        for label in descriptor.pods.role_labels:  # varies per pod, e.g. LWS worker-index
            labels.pop(label, None)
    return labels


def _intermediate(kind: str, name: str, *, owner: Mapping[str, Any], labels: dict[str, str],
                  template: Mapping[str, Any], pods: int) -> dict[str, Any]:
    pod_template = {"metadata": {"labels": labels}, "spec": template["spec"]}
    meta = {"name": name, "namespace": owner["metadata"]["namespace"], "labels": labels,
            "ownerReferences": [owner_ref(owner)]}
    if kind == "Job":
        spec: dict[str, Any] = {"parallelism": pods, "completions": pods,
                                "manualSelector": True,
                                "selector": {"matchLabels": labels}, "template": pod_template}
        spec["template"]["spec"] = {**template["spec"], "restartPolicy": "Never"}
    else:
        spec = {"replicas": pods, "serviceName": name, "selector": {"matchLabels": labels},
                "template": pod_template}
    return {"apiVersion": _INTERMEDIATE[kind], "kind": kind, "metadata": meta, "spec": spec}


def children(obj: Mapping[str, Any], tree: WorkloadTree,
             descriptor: Descriptor) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What the kind's controller would create for ``obj`` (which must carry its ``uid``).

    Returns ``(intermediates, pods)``. Each pod names its owner by ``name``; the caller creates
    the intermediates first and fills each pod's owner ``uid`` with :func:`adopt`.
    """
    owners = [k for k in descriptor.pods.owners if k in _INTERMEDIATE]
    via = owners[0] if owners else None
    namespace = obj["metadata"].get("namespace", "default")
    intermediates: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    for role in tree.roles:
        for replica in range(role.replicas):
            group = dns_name(tree.ref.name, role.name, replica)
            parent: Mapping[str, Any] = obj
            if via is not None:
                made = _intermediate(via, group, owner=obj,
                                     labels=_group_labels(tree, descriptor, role, replica),
                                     template=role.template, pods=role.pods_per_replica)
                intermediates.append(made)
                parent = {**made, "metadata": {**made["metadata"], "uid": ""}}
            for index in range(role.pods_per_replica):
                template: dict[str, Any] = copy.deepcopy(dict(role.template))
                meta: dict[str, Any] = dict(template.get("metadata") or {})
                labels = {**(meta.get("labels") or {}),
                          **_pod_labels(tree, descriptor, role, replica, index)}
                spec = runnable(dict(template.get("spec") or {}))
                spec.setdefault("restartPolicy", "Never" if via == "Job" else "Always")
                pods.append({
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {
                        "name": dns_name(group, index),
                        "namespace": namespace,
                        "labels": labels,
                        "annotations": dict(meta.get("annotations") or {}),
                        "ownerReferences": [owner_ref(parent)],
                    },
                    "spec": spec,
                })
    return intermediates, pods


def adopt(pod: dict[str, Any], uids: Mapping[tuple[str, str], str]) -> dict[str, Any]:
    """Fill the pod's owner UID from ``(kind, name) -> uid`` of the created intermediates."""
    for ref in pod["metadata"]["ownerReferences"]:
        if not ref.get("uid"):
            ref["uid"] = uids[(ref["kind"], ref["name"])]
    return pod
