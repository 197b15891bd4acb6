"""Workload controllers, modelled from descriptors: an arriving workload creates its pods.

A JobSet controller makes Jobs and the Jobs make pods; an LWS controller makes StatefulSets. The
simulator skips the intermediate objects and creates what they end in: for every role of the
workload's resolved tree, ``replicas x podsPerReplica`` pods from ``Role.template``, each with
the membership (role, replica index, gang) that :mod:`extender.core.workloads.membership` would
give it in a cluster, computed by the same
:func:`~extender.core.workloads.workload.member_gang_key`.

Pods a controller creates go through the API server's Priority admission, which turns the
template's ``priorityClassName`` (or the ``globalDefault`` class) into ``spec.priority``:
:func:`admit_priorities` does that once per workload, for its roles and gangs alike.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

from extender.core.model.values import (
    GangKey,
    Membership,
    OwnerRef,
    PodInfo,
    Role,
    WorkloadTree,
    freeze_labels,
)
from extender.core.workloads.catalog import Catalog
from extender.core.workloads.descriptor import GangPolicy
from extender.core.workloads.workload import member_gang_key, replica_indexes
from simulator.priority import PriorityClasses

#: Label every simulated pod carries: the workload it was made for.
WORKLOAD_LABEL = "muster.dev/simulated-workload"


def dns_name(*parts: object) -> str:
    text = "-".join(str(p) for p in parts).lower()
    return re.sub(r"[^a-z0-9-]+", "-", text).strip("-")[:253] or "x"


def membership_for(tree: WorkloadTree, role: Role, replica: int, *,
                   policy: GangPolicy) -> Membership:
    """Where the pod of ``role``'s ``replica``-th copy belongs: its gang if the tree has one
    for it (a copy of a role cut into sub-replicas, a Grove scaling group's, may be in its
    replica's base gang or in a scaled gang of its own)."""
    replica, sub_replica = replica_indexes(role, replica)
    key = member_gang_key(tree.ref, policy, role, replica=replica, sub_replica=sub_replica)
    gang: GangKey | None = None
    if key is not None and policy is not GangPolicy.NONE:
        for candidate in tree.gangs:
            if candidate.key == key and candidate.member(role.name) is not None:
                gang = candidate.key
                break
    return Membership(workload=tree.ref, role=role.name, replica=replica, gang=gang)


def gang_policy(tree: WorkloadTree, catalog: Catalog) -> GangPolicy:
    descriptor = catalog.for_api(tree.ref.api_version, tree.ref.kind)
    return GangPolicy.NONE if descriptor is None else descriptor.gangs.policy


def admit_priorities(tree: WorkloadTree, classes: PriorityClasses) -> WorkloadTree:
    """``tree`` with each role's pod priority resolved from its template's
    ``priorityClassName`` (or the default class), and each gang's priority the highest of its
    members', as :func:`~extender.core.workloads.workload.resolve_workload` computes it."""
    shapes = {}
    for role in tree.roles:
        spec = role.template.get("spec")
        priority = classes.resolve(spec if isinstance(spec, Mapping) else {},
                                   where=f"{tree.ref.key} role {role.name}")
        if priority is not None and priority != role.shape.priority:
            shapes[role.name] = replace(role.shape, priority=priority)
    if not shapes:
        return tree
    roles = tuple(replace(r, shape=shapes[r.name]) if r.name in shapes else r for r in tree.roles)
    gangs = []
    for gang in tree.gangs:
        members = tuple(replace(m, shape=shapes[m.role]) if m.role in shapes else m
                        for m in gang.members)
        gangs.append(replace(gang, members=members,
                             priority=max((m.shape.priority for m in members),
                                          default=gang.priority)))
    return replace(tree, roles=roles, gangs=tuple(gangs))


Unit = tuple[str, int]
"""``(role, replica)``: what an operator creates in one go (a Job, an LWS group's workers)."""


def per_replica(tree: WorkloadTree, role: Role, policy: GangPolicy) -> bool:
    """Whether ``role``'s copies wait for the same copy of the roles they depend on (each LWS
    group's workers for that group's leader), rather than for the whole of them (a JobSet's
    replicatedJob for the whole of the one it dependsOn). A role's followers wait for their own
    replica's leader (a JobSet Job's, under ``exclusive-topology``)."""
    if role.follows:
        return True
    return policy in (GangPolicy.REPLICA, GangPolicy.ROLE_REPLICA) and all(
        other.replicas == role.replicas for other in tree.roles
        if any(before == other.name for before, _ in role.created_after))


def first_units(tree: WorkloadTree) -> set[Unit]:
    """What the controller creates when the workload arrives: every copy of every role that
    waits for no other role (staged creation, ``createdAfter``, creates the rest later)."""
    return {(r.name, i) for r in tree.roles if not r.created_after for i in range(r.replicas)}


def create_pods(
    tree: WorkloadTree, *, policy: GangPolicy, now: float,
    existing: Mapping[str, int] | None = None, units: set[Unit] | None = None,
) -> list[tuple[PodInfo, Membership]]:
    """The pods the workload's controller creates at ``now``, in role order.

    ``existing`` counts pods per role that already exist (a recorded cluster): only the rest
    are created, highest indexes first left out, so a half-created workload is completed.
    ``units`` limits it to those ``(role, replica)`` copies (a stage created late).
    """
    have = dict(existing or {})
    owner = OwnerRef(api_version=tree.ref.api_version, kind=tree.ref.kind, name=tree.ref.name,
                     uid=tree.ref.uid, controller=True)
    out: list[tuple[PodInfo, Membership]] = []
    for role in tree.roles:
        skip = have.get(role.name, 0)
        for replica in range(role.replicas):
            if units is not None and (role.name, replica) not in units:
                continue
            for index in range(role.pods_per_replica):
                if skip > 0:
                    skip -= 1
                    continue
                name = dns_name(tree.ref.name, role.name, replica, index)
                pod = PodInfo(
                    uid=f"sim/{tree.ref.namespace}/{name}",
                    namespace=tree.ref.namespace,
                    name=name,
                    shape=role.shape,
                    labels=freeze_labels({WORKLOAD_LABEL: tree.ref.name}),
                    owners=(owner,),
                    scheduler_name="muster",
                    created=now,
                )
                member = membership_for(tree, role, replica, policy=policy)
                subgroup = _subgroup_of(tree, member, index)
                if subgroup is not None:  # what LWS's pod webhook labels the pod with
                    member = replace(member, subgroup=subgroup)
                out.append((pod, member))
    return out


def _subgroup_of(tree: WorkloadTree, member: Membership, index: int) -> str | None:
    """The subgroup of the ``index``-th pod of its role in its gang, when the gang's pods say
    their subgroup: the kinds' copies take each role's pods in order (LWS numbers them so)."""
    gang = next((g for g in tree.gangs if g.key == member.gang), None)
    sub = gang.subgroups if gang is not None else None
    if sub is None or sub.label is None:
        return None
    start = 0
    for kind in sub.kinds:
        per_copy = dict(kind.pods).get(member.role, 0)
        for value in kind.values:
            if start <= index < start + per_copy:
                return value
            start += per_copy
    return None
