"""How a resolved workload is cut into gangs, and the key of the gang each pod joins.

Keys are ``namespace/name`` plus a suffix per policy (``/group-1``, or ``/prefill-1`` for
replica 1 of gang group ``prefill``; ``/workers``; ``/decode-0``; ``baseAndScaled``: ``/0`` for
replica 0's base gang and ``/0/prefill-1`` for sub-replica 1 of group ``prefill``).
:func:`cut_gangs` builds the gangs, :func:`gang_key` and :func:`member_gang_key` name the one a
pod belongs to, from the same rules.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from extender.core.model.values import Gang, GangKey, GangMember, Role, WorkloadRef
from extender.core.workloads.descriptor import Descriptor, GangPolicy
from extender.core.workloads.descriptor_spec import DEFAULT_GANG_GROUP
from extender.core.workloads.expressions import WorkloadError

__all__ = ["cut_gangs", "gang_key", "member_gang_key", "replica_indexes"]


def gang_key(ref: WorkloadRef, policy: GangPolicy, *, role: str = "",
             replica: int | None = None, scaled: tuple[str, int] | None = None,
             group: str = "") -> GangKey | None:
    """The key of the gang a pod of ``role``/``replica`` belongs to under ``policy``.

    Under ``replica`` it is replica ``replica`` of the role's gang ``group`` (its
    ``gangGroup``; empty: the default group).

    Under ``baseAndScaled`` the base gang of replica ``r`` is ``ns/name/r`` and, with
    ``scaled=(group, j)``, sub-replica ``j`` of ``group`` is ``ns/name/r/group-j``; which
    applies to a pod is :func:`member_gang_key`'s to say.
    """
    base = f"{ref.namespace}/{ref.name}"
    if policy is GangPolicy.WORKLOAD:
        return GangKey(base)
    if policy is GangPolicy.REPLICA and replica is not None:
        return GangKey(f"{base}/{group or DEFAULT_GANG_GROUP}-{replica}")
    if policy is GangPolicy.ROLE and role:
        return GangKey(f"{base}/{role}")
    if policy is GangPolicy.ROLE_REPLICA and replica is not None:
        return GangKey(f"{base}/{role}-{replica}")
    if policy is GangPolicy.BASE_AND_SCALED and replica is not None:
        if scaled is None:
            return GangKey(f"{base}/{replica}")
        group, sub = scaled
        return GangKey(f"{base}/{replica}/{group}-{sub}")
    return None


def replica_indexes(role: Role, index: int) -> tuple[int, int | None]:
    """``(replica, sub-replica)`` of the role's ``index``-th copy (0-based, in role order):
    ``(index, None)`` unless the role is cut into sub-replicas."""
    if role.sub_replicas is None or role.sub_replicas.count <= 0:
        return index, None
    return divmod(index, role.sub_replicas.count)


def member_gang_key(ref: WorkloadRef, policy: GangPolicy, role: Role | None, *,
                    replica: int | None, sub_replica: int | None = None) -> GangKey | None:
    """The key of the gang a pod of ``role`` with these indexes joins (``None``: no gang).

    A copy below ``subReplicas.base`` is in its replica's base gang, a further one in its own
    scaled gang. A pod of a cut role that does not say its sub-replica joins nothing unless the
    role has no scaled gangs: guessing could put it in the wrong gang.
    """
    name = role.name if role is not None else ""
    sub = role.sub_replicas if role is not None else None
    if policy is GangPolicy.WORKLOAD and role is not None and role.gang_root:
        return gang_key(ref, GangPolicy.ROLE, role=role.gang_root)
    if policy is not GangPolicy.BASE_AND_SCALED or sub is None:
        return gang_key(ref, policy, role=name, replica=replica,
                        group=role.gang_group if role is not None else "")
    if sub_replica is None:
        return gang_key(ref, policy, replica=replica) if sub.base >= sub.count else None
    if sub_replica < sub.base:
        return gang_key(ref, policy, replica=replica)
    return gang_key(ref, policy, replica=replica, scaled=(sub.group, sub_replica))


def cut_gangs(descriptor: Descriptor, ref: WorkloadRef, roles: list[Role],
              created: float, *, outside: set[str], limit: int) -> tuple[Gang, ...]:
    """The workload's gangs under its descriptor's policy; roles in ``outside`` (or not in
    ``gangs.roles``, where a role's followers go with the role) and roles without pods are in
    none.

    More than ``limit`` gangs raise :class:`WorkloadError` before more than ``limit`` are cut,
    so the work stays bounded whatever the replica counts say.
    """
    policy = descriptor.gangs.policy
    chosen = [r for r in roles if r.pods > 0 and r.name not in outside and
              (not descriptor.gangs.roles or (r.follows or r.name) in descriptor.gangs.roles)]
    if policy is GangPolicy.NONE or not chosen:
        return ()

    priority = max(r.shape.priority for r in chosen)

    def gang(key: GangKey | None, members: list[GangMember]) -> Gang:
        assert key is not None
        return Gang(key=key, workload=ref, members=tuple(members), priority=priority,
                    created=created)

    apart: dict[str, list[Role]] = {}
    if policy is GangPolicy.WORKLOAD:
        # A role created only once another has *completed* (an initializer before a trainer)
        # is a gang of its own with the roles waiting for it: holding its GPUs while the
        # other runs would idle them.
        for r in chosen:
            if r.gang_root:
                apart.setdefault(r.gang_root, []).append(r)
        chosen = [r for r in chosen if not r.gang_root]
    stages = _stages(chosen)
    for group in apart.values():
        stages.update(_stages(group))
    out: list[Gang] = []
    cuts = itertools.chain(
        _cuts(ref, policy, chosen) if chosen else (),
        ((gang_key(ref, GangPolicy.ROLE, role=root), [_whole(r) for r in group])
         for root, group in sorted(apart.items())))
    for key, members in cuts:
        if len(out) == limit:
            raise WorkloadError(f"more than the limit of {limit} gangs per workload "
                                f"(gang policy {policy.value})")
        out.append(gang(key, _staged(members, stages)))
    return tuple(out)


def _stages(roles: list[Role]) -> dict[str, int]:
    """Per role of one gang, the stage its pods are created in: 0 with the gang, else one
    past the latest stage of the gang's roles it waits to be Ready or Scheduled. A cycle is
    refused with its path."""
    by_name = {r.name: r for r in roles}
    out: dict[str, int] = {}

    def stage(name: str, path: tuple[str, ...]) -> int:
        if name in out:
            return out[name]
        if name in path:
            cycle = " -> ".join([*path[path.index(name):], name])
            raise WorkloadError(f"createdAfter forms a cycle: {cycle}")
        deps = [b for b, status in by_name[name].created_after
                if status in ("Ready", "Scheduled") and b in by_name]
        out[name] = 1 + max(stage(b, (*path, name)) for b in deps) if deps else 0
        return out[name]

    for name in by_name:
        stage(name, ())
    return out


def _staged(members: list[GangMember], stages: dict[str, int]) -> list[GangMember]:
    """The members with their stages, renumbered 0, 1, ... within the gang."""
    present = sorted({stages.get(m.role, 0) for m in members})
    number = {s: i for i, s in enumerate(present)}
    return [m if number[stages.get(m.role, 0)] == m.stage else
            GangMember(m.role, m.count, m.min_count, m.shape, number[stages.get(m.role, 0)])
            for m in members]


def _whole(role: Role) -> GangMember:
    return GangMember(role=role.name, count=role.pods, min_count=role.min_pods, shape=role.shape)


def _cuts(ref: WorkloadRef, policy: GangPolicy, chosen: list[Role],
          ) -> Iterator[tuple[GangKey | None, list[GangMember]]]:
    """Each gang's key and members, lazily: the caller stops at its limit."""
    if policy is GangPolicy.WORKLOAD:
        yield gang_key(ref, policy), [
            GangMember(role=r.name, count=r.pods, min_count=r.min_pods, shape=r.shape)
            for r in chosen]
    elif policy is GangPolicy.REPLICA:
        groups: dict[str, list[Role]] = {}
        for r in chosen:
            groups.setdefault(r.gang_group, []).append(r)
        for group, members in groups.items():
            for i in range(max(r.replicas for r in members)):
                yield gang_key(ref, policy, replica=i, group=group), [
                    _copies(r, 1) for r in members if r.replicas > i]
    elif policy is GangPolicy.ROLE:
        for r in chosen:
            yield gang_key(ref, policy, role=r.name), [
                GangMember(role=r.name, count=r.pods, min_count=r.min_pods, shape=r.shape)]
    elif policy is GangPolicy.BASE_AND_SCALED:
        yield from _base_and_scaled(ref, chosen)
    else:
        for r in chosen:
            for i in range(r.replicas):
                yield gang_key(ref, policy, role=r.name, replica=i), [_copies(r, 1)]


def _copies(role: Role, copies: int) -> GangMember:
    """``copies`` replicas of ``role`` in one gang, each needing its minimum pods."""
    return GangMember(role=role.name, count=copies * role.pods_per_replica,
                      min_count=copies * role.min_per_replica, shape=role.shape)


def _base_and_scaled(ref: WorkloadRef, roles: list[Role],
                     ) -> Iterator[tuple[GangKey | None, list[GangMember]]]:
    """Per replica index: the base gang, then each group's scaled gangs by sub-replica."""
    policy = GangPolicy.BASE_AND_SCALED

    def blocks(r: Role) -> int:  # gang replicas the role takes part in
        return r.replicas // max(1, r.sub_replicas.count) if r.sub_replicas else r.replicas

    for i in range(max(blocks(r) for r in roles)):
        present = [r for r in roles if blocks(r) > i]
        base = [_copies(r, r.sub_replicas.base if r.sub_replicas else 1) for r in present]
        if any(m.count for m in base):
            yield gang_key(ref, policy, replica=i), [m for m in base if m.count]
        groups: dict[str, list[Role]] = {}
        for r in present:
            if r.sub_replicas is not None:
                groups.setdefault(r.sub_replicas.group, []).append(r)
        for group, members in groups.items():
            cuts = [m.sub_replicas for m in members if m.sub_replicas]
            # Copies below every base are in the base gang: start past them, not at 0.
            for j in range(min(c.base for c in cuts), max(c.count for c in cuts)):
                scaled = [_copies(m, 1) for m in members
                          if m.sub_replicas and m.sub_replicas.base <= j < m.sub_replicas.count]
                if scaled:
                    yield gang_key(ref, policy, replica=i, scaled=(group, j)), scaled
