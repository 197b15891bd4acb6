"""Where a pod belongs: its workload, role, replica and gang.

The controller owner chain decides first (Pod -> Job -> JobSet, Pod -> StatefulSet ->
LeaderWorkerSet, Pod -> ReplicaSet -> Deployment): the topmost owner of a described kind that
was resolved is the workload, so a Job inside a JobSet yields the JobSet. When the chain is
unknown (owner objects not at hand), the descriptors' ``pods.workloadLabel`` rules decide.
Role, replica and sub-replica indexes come from the descriptor's pod labels; the gang from
:func:`extender.core.workloads.gangs.member_gang_key`, the rule that cut the tree's gangs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.core.model.objects import owner_refs
from extender.core.model.values import Membership, OwnerRef, PodInfo, WorkloadRef, WorkloadTree
from extender.core.workloads.catalog import Catalog
from extender.core.workloads.descriptor import Descriptor, GangPolicy, RoleMatch
from extender.core.workloads.gangs import member_gang_key

#: Owner chains longer than this are cut (a cycle of owner references must not loop forever).
MAX_CHAIN = 16


@dataclass(frozen=True)
class ObjectIndex:
    """API objects by ``(namespace, kind, name)``, for walking owner references."""

    by_key: Mapping[tuple[str, str, str], Mapping[str, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, objects: Iterable[Mapping[str, Any]]) -> ObjectIndex:
        index: dict[tuple[str, str, str], Mapping[str, Any]] = {}
        for obj in objects:
            meta = obj.get("metadata") if isinstance(obj, Mapping) else None
            if not isinstance(meta, Mapping) or not isinstance(obj.get("kind"), str):
                continue
            index[(str(meta.get("namespace") or "default"), str(obj["kind"]),
                   str(meta.get("name") or ""))] = obj
        return cls(by_key=index)

    def get(self, namespace: str, kind: str, name: str) -> Mapping[str, Any] | None:
        return self.by_key.get((namespace, kind, name))


def _controller(refs: tuple[OwnerRef, ...]) -> OwnerRef | None:
    for ref in refs:
        if ref.controller:
            return ref
    return refs[0] if refs else None


def owner_chain(pod: PodInfo, objects: ObjectIndex) -> list[OwnerRef]:
    """The pod's controller owners, nearest first, as far as ``objects`` can follow them."""
    chain: list[OwnerRef] = []
    ref = pod.controller
    while ref is not None and len(chain) < MAX_CHAIN and ref not in chain:
        chain.append(ref)
        obj = objects.get(pod.namespace, ref.kind, ref.name)
        if obj is None:
            break
        meta = obj.get("metadata")
        ref = _controller(owner_refs(meta if isinstance(meta, Mapping) else {}))
    return chain


def _descriptor_of(tree: WorkloadTree, catalog: Catalog) -> Descriptor | None:
    return catalog.for_api(tree.ref.api_version, tree.ref.kind)


def _workload(pod: PodInfo, objects: ObjectIndex, catalog: Catalog,
              workloads: Mapping[str, WorkloadTree]) -> WorkloadTree | None:
    for ref in reversed(owner_chain(pod, objects)):
        tree = workloads.get(f"{ref.kind}/{pod.namespace}/{ref.name}")
        if tree is not None and catalog.for_api(ref.api_version or tree.ref.api_version,
                                                ref.kind) is not None:
            return tree
    if not pod.owners:
        bare = workloads.get(f"Pod/{pod.namespace}/{pod.name}")
        if bare is not None:
            return bare
    for descriptor in catalog.descriptors:
        label = descriptor.pods.workload_label
        value = pod.label(label) if label else None
        if value:
            tree = workloads.get(f"{descriptor.target.kind}/{pod.namespace}/{value}")
            if tree is not None and tree.descriptor == descriptor.name:
                return tree
    return None


def _suffixed(value: str, names: Mapping[str, str]) -> str | None:
    """The longest role name ``value`` ends with as ``-<name>`` (``w-0-sg-1-leader``)."""
    found = [lower for lower in names if value.endswith(f"-{lower}")]
    return names[max(found, key=len)] if found else None


def _role(pod: PodInfo, descriptor: Descriptor, tree: WorkloadTree) -> str:
    names = {r.name.lower(): r.name for r in tree.roles}
    mapping = dict(descriptor.pods.role_map)
    for label in descriptor.pods.role_labels:
        value = pod.label(label)
        if value is None:
            continue
        wanted = mapping.get(value, value)
        if wanted.lower() in names:
            return names[wanted.lower()]
        if descriptor.pods.role_match is RoleMatch.SUFFIX:
            suffixed = _suffixed(wanted.lower(), names)
            if suffixed is not None:
                return suffixed
        if descriptor.pods.role_default is None:
            return wanted
    if descriptor.pods.role_default is not None:
        return descriptor.pods.role_default
    return tree.roles[0].name if len(tree.roles) == 1 else ""


def _follower(pod: PodInfo, descriptor: Descriptor, tree: WorkloadTree, role: str) -> str:
    """``role``'s followers' role when the role is split at its leader and ``pod`` is not the
    leader (its leader label, or else annotation, has another value); else ``role``."""
    key = descriptor.pods.leader_key
    followers = next((r.name for r in tree.roles if r.follows == role and role), None)
    if key is None or followers is None:
        return role
    value = pod.label(key)
    if value is None:
        value = next((v for k, v in pod.annotations if k == key), None)
    return role if value is None or value == descriptor.pods.leader_value else followers


def _index(pod: PodInfo, label: str | None) -> int | None:
    value = pod.label(label) if label else None
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def find_membership(pod: PodInfo, *, objects: ObjectIndex, catalog: Catalog,
                    workloads: Mapping[str, WorkloadTree]) -> Membership | None:
    """Where ``pod`` belongs among the resolved ``workloads`` (keyed by ``WorkloadRef.key``).

    ``None`` when the pod belongs to no resolved workload. ``gang`` is ``None`` for a pod that
    is not in any gang (serving replicas, roles left out of gangs, unknown replica index).
    """
    tree = _workload(pod, objects, catalog, workloads)
    if tree is None:
        return None
    descriptor = _descriptor_of(tree, catalog)
    if descriptor is None:
        return Membership(workload=tree.ref, role="")
    role = _follower(pod, descriptor, tree, _role(pod, descriptor, tree))
    replica = _index(pod, descriptor.pods.replica_label)
    policy = descriptor.gangs.policy
    resolved = next((r for r in tree.roles if r.name == role), None)
    key = member_gang_key(tree.ref, policy, resolved, replica=replica,
                          sub_replica=_index(pod, descriptor.pods.sub_replica_label))
    gang = None
    if key is not None and policy is not GangPolicy.NONE:
        for candidate in tree.gangs:
            if candidate.key == key and (candidate.member(role) is not None or not role):
                gang = candidate.key
                break
    label = descriptor.pods.subgroup_label
    subgroup = pod.label(label) if label is not None else None
    return Membership(workload=tree.ref, role=role, replica=replica, gang=gang,
                      subgroup=subgroup)


def refused_owner(pod: PodInfo, *, objects: ObjectIndex,
                  refused: Mapping[str, tuple[WorkloadRef, str]]) -> str | None:
    """Why a pod waits when a workload above it was refused (beyond the limits, fields of the
    wrong type): its gang cannot be known, so it must not be placed as a lone pod either."""
    if not refused:
        return None
    for link in owner_chain(pod, objects):
        found = refused.get(f"{link.kind}/{pod.namespace}/{link.name}")
        if found is not None:
            why = found[1].removeprefix(f"{link.kind}/{link.name}: ")
            return f"its {link.kind} {pod.namespace}/{link.name} cannot be scheduled: {why}"
    return None


def pending_owner(pod: PodInfo, *, objects: ObjectIndex, catalog: Catalog) -> str | None:
    """Why a pod without membership may still belong to a workload Muster has not seen yet.

    Informers lag: a JobSet's pod can reach kube-scheduler before Muster has observed its
    ``Job`` or the ``JobSet``. Taking such a pod for a lone pod could bind part of a gang, so
    a pod whose controller chain stops at a missing object of a kind Muster watches (a
    described kind, or an owner kind a descriptor names), or that carries a descriptor's
    workload label naming a missing object, is *pending*. ``None`` means it is truly alone.
    """
    watched = {d.target.kind for d in catalog.descriptors}
    for descriptor in catalog.descriptors:
        watched.update(descriptor.pods.owners)
    chain = owner_chain(pod, objects)
    if chain:
        last = chain[-1]
        if last.kind in watched and objects.get(pod.namespace, last.kind, last.name) is None:
            return f"its owner {last.kind} {pod.namespace}/{last.name} is not observed yet"
    for descriptor in catalog.descriptors:
        label = descriptor.pods.workload_label
        value = pod.label(label) if label else None
        kind = descriptor.target.kind
        if value and objects.get(pod.namespace, kind, value) is None:
            return f"its {kind} {pod.namespace}/{value} is not observed yet"
    return None
