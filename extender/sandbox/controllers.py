"""Stand-ins for the operators a sandbox does not run yet (JobSet, LWS, KubeRay, ...).

Without an operator, a JobSet object creates nothing. These functions make what its controller
would, from the workload tree the descriptor resolves, with the labels and owner references the
descriptor matches pods by: so what Muster schedules in the sandbox is exactly what the
descriptor says the workload is. Pure: objects in, manifests out.

Where a real controller runs in the sandbox, the stand-in hands over to it:

* a role under a ``Job`` (a JobSet's replicatedJob) becomes a real ``batch/v1`` Job whose pod
  template carries the role's labels and annotations, and kube-controller-manager's Job
  controller makes its pods. A caller that makes the pods itself, in an order a test needs,
  asks ``pods_by_caller=True``: the Job then names the stand-in in ``spec.managedBy`` and the
  Job controller leaves it alone, as it leaves a MultiKueue Job;
* a stand-in makes no ``StatefulSet``: the real StatefulSet controller would make its pods from
  one template, while the operators it would stand for (LWS) label each pod differently
  through their own webhooks. Those pods are made here and owned by the workload itself.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from extender.core.model.dnsnames import dns_label, dns_subdomain
from extender.core.model.values import Role, WorkloadTree
from extender.core.workloads.descriptor import Descriptor
from extender.core.workloads.workload import member_gang_key, replica_indexes

#: Intermediate owners a stand-in creates as real built-in objects, by kind.
_INTERMEDIATE = {"Job": "batch/v1"}
#: ``spec.managedBy`` of a stand-in's Job whose pods the caller makes (the Job controller
#: reconciles only Jobs managed by ``kubernetes.io/job-controller`` or by no one).
STAND_IN_MANAGER = "muster.dev/sandbox-stand-in"


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
    """The role label value that :mod:`extender.core.workloads.membership` reads back as
    ``role``."""
    for value, name in descriptor.pods.role_map:
        if name == role.name:
            return value
    if descriptor.pods.role_default == role.name:
        return str(index + 1)  # e.g. LWS worker-index 1..size-1; "0" is the leader
    return role.name


def _pod_labels(tree: WorkloadTree, descriptor: Descriptor, role: Role, replica: int,
                index: int) -> dict[str, str]:
    match = descriptor.pods
    labels: dict[str, str] = {"muster.dev/sandbox-workload": dns_label(tree.ref.name)}
    if match.workload_label:
        labels[match.workload_label] = tree.ref.name
    for label in match.role_labels[:1]:
        labels[label] = _role_label_value(role, descriptor, index)
    at, sub = replica_indexes(role, replica)  # a Grove PCSG clique: (PCS, PCSG) replica
    if match.replica_label:
        labels[match.replica_label] = str(at)
    if match.sub_replica_label and sub is not None:
        labels[match.sub_replica_label] = str(sub)
    return labels


def _group_labels(tree: WorkloadTree, descriptor: Descriptor, role: Role,
                  replica: int) -> dict[str, str]:
    """Labels every pod of one role replica shares (an owner's selector)."""
    labels = _pod_labels(tree, descriptor, role, replica, 0)
    if descriptor.pods.role_map or descriptor.pods.role_default:
        for label in descriptor.pods.role_labels:  # varies per pod, e.g. LWS worker-index
            labels.pop(label, None)
    return labels


def _job(name: str, *, owner: Mapping[str, Any], labels: dict[str, str],
         template: Mapping[str, Any], pods: int, pods_by_caller: bool) -> dict[str, Any]:
    """The Job of one role replica; its pod template is what the Job controller copies into
    every pod (the role's own labels and annotations, e.g. a sandbox runtime, included)."""
    pod_meta = dict(template.get("metadata") or {})
    pod_spec = runnable(copy.deepcopy(dict(template.get("spec") or {})))
    policy = pod_spec.get("restartPolicy")  # a Job's pods may only be Never or OnFailure
    pod_spec["restartPolicy"] = policy if policy in ("Never", "OnFailure") else "Never"
    pod_template = {"metadata": {"labels": {**(pod_meta.get("labels") or {}), **labels},
                                 "annotations": dict(pod_meta.get("annotations") or {})},
                    "spec": pod_spec}
    meta = {"name": name, "namespace": owner["metadata"]["namespace"], "labels": labels,
            "ownerReferences": [owner_ref(owner)]}
    spec: dict[str, Any] = {"parallelism": pods, "completions": pods, "manualSelector": True,
                            "selector": {"matchLabels": labels}, "template": pod_template}
    if pods_by_caller:
        spec["managedBy"] = STAND_IN_MANAGER
    return {"apiVersion": _INTERMEDIATE["Job"], "kind": "Job", "metadata": meta, "spec": spec}


def children(obj: Mapping[str, Any], tree: WorkloadTree, descriptor: Descriptor, *,
             pods_by_caller: bool = True) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What the kind's controller would create for ``obj`` (which must carry its ``uid``).

    Returns ``(intermediates, pods)``. Each pod names its owner by ``name``; the caller creates
    the intermediates first and fills each pod's owner ``uid`` with :func:`adopt`. With
    ``pods_by_caller=False`` the Job controller makes the pods of each Job (see the module
    docstring): the pods under a Job are then only what it will make, not to be created.
    """
    owners = [k for k in descriptor.pods.owners if k in _INTERMEDIATE]
    via = owners[0] if owners else None
    namespace = obj["metadata"].get("namespace", "default")
    intermediates: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    for role in tree.roles:
        for replica in range(role.replicas):
            group = dns_label(tree.ref.name, role.name, replica)
            parent: Mapping[str, Any] = obj
            if via is not None:
                made = _job(group, owner=obj,
                            labels=_group_labels(tree, descriptor, role, replica),
                            template=role.template, pods=role.pods_per_replica,
                            pods_by_caller=pods_by_caller)
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
                        "name": dns_subdomain(group, index),
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


# -- the upstream Workload API (gang mode) ------------------------------------------------------
#: scheduling.k8s.io/v1beta1 as kube-scheduler v1.37.2's GangScheduling plugin reads it: a
#: ``PodGroup`` with ``spec.schedulingPolicy.gang.minCount``, and each pod naming its group in
#: ``spec.schedulingGroup.podGroupName``. The ``Workload`` holds the groups' templates.
WORKLOAD_API = "scheduling.k8s.io/v1beta1"
_MAX_TEMPLATES = 8  # WorkloadMaxPodGroupTemplates in k8s.io/api/scheduling/v1beta1


def _template_name(descriptor: Descriptor, roles: list[str]) -> str:
    """One template per kind of gang: every LWS group shares one, a JobSet has one."""
    policy = descriptor.gangs.policy.value
    if policy in ("workload", "replica"):
        return "all" if policy == "workload" else "group"
    return dns_label(*roles)


def pod_groups(obj: Mapping[str, Any], tree: WorkloadTree, descriptor: Descriptor,
               pods: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The ``Workload`` and ``PodGroup`` objects a Workload-aware controller would create for
    ``obj``'s gangs, and ``pods`` (from :func:`children`, same order) joined to their groups.

    Returns ``(workload, podgroups)``; ``(None, [])`` when the workload has no gangs. The
    PodGroups' owner is the Workload; fill its ``uid`` with :func:`adopt` once it is created.
    """
    if not tree.gangs:
        return None, []
    meta = obj["metadata"]
    namespace = meta.get("namespace", "default")
    prefix = f"{tree.ref.namespace}/{tree.ref.name}"
    group_of: dict[str, str] = {}
    templates: dict[str, int] = {}
    groups: list[dict[str, Any]] = []
    for gang in tree.gangs:
        name = dns_label(tree.ref.name, gang.key[len(prefix):].lstrip("/"))
        template = _template_name(descriptor, [m.role for m in gang.members])
        templates.setdefault(template, gang.min_member)
        group_of[gang.key] = name
        groups.append({
            "apiVersion": WORKLOAD_API, "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"muster.dev/sandbox-workload": dns_label(tree.ref.name)},
                         "ownerReferences": [{"apiVersion": WORKLOAD_API, "kind": "Workload",
                                              "name": dns_label(tree.ref.name), "uid": "",
                                              "controller": True}]},
            "spec": {"workloadRef": {"workloadName": dns_label(tree.ref.name),
                                     "templateName": template},
                     "schedulingPolicy": {"gang": {"minCount": gang.min_member}}},
        })
    if len(templates) > _MAX_TEMPLATES:
        raise ValueError(f"{tree.ref.key}: {len(templates)} kinds of gang, more than a "
                         f"Workload's {_MAX_TEMPLATES} podGroupTemplates")
    members = {(g.key, m.role) for g in tree.gangs for m in g.members}
    at = 0
    for role in tree.roles:  # the order children() made the pods in
        for replica in range(role.replicas):
            index, sub = replica_indexes(role, replica)
            key = member_gang_key(tree.ref, descriptor.gangs.policy, role, replica=index,
                                  sub_replica=sub)
            for _ in range(role.pods_per_replica):
                if key is not None and (key, role.name) in members:
                    pods[at]["spec"]["schedulingGroup"] = {"podGroupName": group_of[key]}
                at += 1
    target_group = str(obj["apiVersion"]).rpartition("/")[0]
    workload = {
        "apiVersion": WORKLOAD_API, "kind": "Workload",
        "metadata": {"name": dns_label(tree.ref.name), "namespace": namespace,
                     "ownerReferences": [owner_ref(obj)]},
        "spec": {"controllerRef": {"apiGroup": target_group, "kind": obj["kind"],
                                   "name": meta["name"]},
                 "podGroupTemplates": [{"name": name,
                                        "schedulingPolicy": {"gang": {"minCount": count}}}
                                       for name, count in templates.items()]},
    }
    return workload, groups
