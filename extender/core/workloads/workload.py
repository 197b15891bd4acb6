"""Resolve a workload object through its compiled descriptor into a :class:`WorkloadTree`.

:func:`resolve_workload` is pure and deterministic: roles in descriptor order (generated roles
in the order of their list or map), per-pod demand from :func:`podspec.shape_of` (so init
containers, sidecars and overhead count as kube-scheduler counts them), gangs with minimums,
ordering edges and the phase. A value of the wrong type raises :class:`WorkloadError` naming
the workload and the path; nothing else escapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from extender.core.model.podspec import PodSpecError, shape_of
from extender.core.model.values import Role, SubReplicas, WorkloadRef, WorkloadTree
from extender.core.workloads.descriptor import (
    CreatedAfterSpec,
    Descriptor,
    Readiness,
    RoleSpec,
    SubReplicaSpec,
    TemplateSpec,
)
from extender.core.workloads.errors import DescriptionError
from extender.core.workloads.expressions import (
    INT32_MAX,
    ITEM,
    OBJECT,
    Count,
    PathRef,
    Scope,
    WorkloadError,
    type_name,
)
from extender.core.workloads.gangs import cut_gangs, gang_key, member_gang_key, replica_indexes
from extender.core.workloads.paths import compile_path
from extender.core.workloads.phase import phase_of
from extender.core.workloads.topology import with_topology

FOLLOWERS = "/followers"
"""Suffix of the role holding each replica's followers when a role is split at its leader."""

__all__ = ["DEFAULT_LIMITS", "FOLLOWERS", "WorkloadError", "WorkloadLimits", "gang_key",
           "member_gang_key",
           "replica_indexes", "resolve_workload", "workload_ref"]

@dataclass(frozen=True, slots=True)
class WorkloadLimits:
    """The most pods and gangs one workload may resolve to.

    Resolution is arithmetic over roles, but every gang is a value the scheduler keeps, plans
    and reports, so a workload asking for more is refused whole with a :class:`WorkloadError`
    naming it and the limit, rather than slowing every decision down. The defaults are far
    above any workload seen (150,000 pods is the largest cluster Kubernetes is tested at).
    """

    pods: int = 150_000
    gangs: int = 10_000

    def __post_init__(self) -> None:
        for name in ("pods", "gangs"):
            if getattr(self, name) <= 0:
                raise DescriptionError(f"WorkloadLimits.{name} must be positive, got "
                                       f"{getattr(self, name)}")


DEFAULT_LIMITS = WorkloadLimits()


def workload_ref(obj: Mapping[str, Any]) -> WorkloadRef:
    """The reference of an API object (namespace ``default`` when unset, as kubectl does)."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        # A manifest written for `kubectl create` has only a prefix; the server adds a suffix.
        name = meta.get("generateName")
    if not isinstance(name, str) or not name:
        raise WorkloadError("metadata.name: a workload needs a name (or generateName)")
    namespace = meta.get("namespace")
    return WorkloadRef(
        api_version=str(obj.get("apiVersion") or ""),
        kind=str(obj.get("kind") or ""),
        namespace=namespace if isinstance(namespace, str) and namespace else "default",
        name=name,
        uid=str(meta.get("uid") or ""),
    )


def _check_container(text: str, obj: Mapping[str, Any]) -> None:
    """A ``forEach`` path ends in ``[*]`` or ``.*``: what it walks must be a list or a map. A
    string there (``replicatedJobs: "workers"``) is an error, not a workload without roles."""
    for wild in ("[*]", ".*"):
        if text.endswith(wild) and len(text) > len(wild) + 1:
            for value in compile_path(text[: -len(wild)]).find(obj):
                if not isinstance(value, list | Mapping):
                    raise WorkloadError(f"{text[: -len(wild)]}: expected a list or a map, "
                                        f"got {type_name(value)}")


def _items(spec: RoleSpec, obj: Mapping[str, Any]) -> list[tuple[str, object]]:
    if spec.for_each is None:
        return [("", obj)]
    for path in spec.for_each.paths:
        _check_container(path.text, obj)
        finder = getattr(path, "find_with_keys", None)
        if finder is not None:
            found: list[tuple[str, object]] = finder(obj)
        else:  # a ValuePath without keys (a future jq path): positions stand in for keys
            found = [(str(i), v) for i, v in enumerate(path.find(obj))]
        if found:
            # A wildcard over a single list yields the list itself on some paths; unpack it.
            if len(found) == 1 and isinstance(found[0][1], list):
                return [(str(i), v) for i, v in enumerate(found[0][1])]
            return found
    return []


def _first_mapping(ref: PathRef | None, scope: Scope) -> dict[str, Any] | None:
    """The first object ``ref`` finds; a path that finds only other values (a template that
    is a string) is an error naming the path, not a pod without containers."""
    if ref is None:
        return None
    found = ref.find(scope)
    for value in found:
        if isinstance(value, Mapping):
            return dict(value)
    if found:
        raise WorkloadError(f"{ref.text}: expected an object, got {type_name(found[0])}")
    return None


def _rename(resources: object, names: Mapping[str, str]) -> object:
    if not isinstance(resources, Mapping):
        return resources
    out = dict(resources)
    for key in ("requests", "limits"):
        amounts = out.get(key)
        if isinstance(amounts, Mapping):
            out[key] = {names.get(str(k), str(k)): v for k, v in amounts.items()}
    return out


def _merge_resources(base: object, extra: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = dict(base) if isinstance(base, Mapping) else {}
    for key in ("requests", "limits", "claims"):
        value = extra.get(key)
        if isinstance(value, Mapping):
            current = out.get(key)
            out[key] = {**(dict(current) if isinstance(current, Mapping) else {}), **value}
        elif value is not None:
            out[key] = value
    return out


def pod_template(template: TemplateSpec, scope: Scope) -> dict[str, Any]:
    """The PodTemplateSpec (``metadata`` + ``spec``) a role's pods are made from."""
    metadata: dict[str, Any] = {}
    spec: dict[str, Any] = {}
    whole = _first_mapping(template.pod_template, scope)
    if whole is not None:
        meta = whole.get("metadata")
        metadata = dict(meta) if isinstance(meta, Mapping) else {}
        inner = whole.get("spec")
        spec = dict(inner) if isinstance(inner, Mapping) else {}
    else:
        spec = _first_mapping(template.pod_spec, scope) or {}
        metadata = _first_mapping(template.metadata, scope) or {}
    raw_containers = spec.get("containers")
    containers: list[Any] = list(raw_containers) if isinstance(raw_containers, list) else []
    for ref in template.containers:
        for value in ref.find(scope):
            if isinstance(value, Mapping):
                containers.append(dict(value))
            elif isinstance(value, list):
                containers.extend(dict(c) for c in value if isinstance(c, Mapping))
    resources = _first_mapping(template.resources, scope)
    if resources is not None:
        if containers and isinstance(containers[0], Mapping):
            first = dict(containers[0])
            first["resources"] = _merge_resources(first.get("resources"), resources)
            containers[0] = first
        else:
            containers.insert(0, {"name": "main", "resources": dict(resources)})
    for key, field_ref in (("nodeSelector", template.node_selector),
                           ("tolerations", template.tolerations),
                           ("affinity", template.affinity)):
        if field_ref is not None:
            found = field_ref.find(scope)
            if found:
                spec[key] = found[0]
    if template.resource_names:
        names = dict(template.resource_names)
        containers = [
            {**c, "resources": _rename(c.get("resources"), names)} if isinstance(c, Mapping)
            else c for c in containers
        ]
        init = spec.get("initContainers")
        if isinstance(init, list):
            spec["initContainers"] = [
                {**c, "resources": _rename(c.get("resources"), names)}
                if isinstance(c, Mapping) else c for c in init
            ]
    spec["containers"] = containers
    return {"metadata": metadata, "spec": spec}


def _join_values(spec: RoleSpec, scope: dict[str, object]) -> None:
    for join in spec.joins:
        wanted = join.equals.find(Scope(scope))
        bound: object = None
        if wanted:
            candidates = join.source.find(Scope(scope))
            if len(candidates) == 1 and isinstance(candidates[0], list):
                candidates = list(candidates[0])
            for candidate in candidates:
                keys = join.match.find(Scope({ITEM: candidate}))
                flat = [k for v in keys for k in (v if isinstance(v, list) else [v])]
                if any(str(k) == str(wanted[0]) for k in flat):
                    bound = candidate
                    break
        scope[join.alias] = bound


def _count(count: Count, scope: Scope, field: str) -> int:
    """A count of the object (negative reads as 0), refused beyond int32 as the API server
    refuses it, naming the descriptor field (the object's path is named by the value read)."""
    value = max(0, count.evaluate(scope))
    if value > INT32_MAX:  # a sum or product of counts that are each within int32
        raise WorkloadError(f"{field}: {_short(value)} is beyond int32 ({INT32_MAX}), "
                            "which the API server refuses for a count")
    return value


def _short(value: int) -> str:
    return str(value) if value < 10**18 else f"{value:.3e}"


def _cut(spec: SubReplicaSpec, scope: Scope, *, key: str, replicas: int) -> SubReplicas | None:
    """The role's sub-replicas; ``None`` when ``group`` selects nothing (a standalone clique)."""
    group = spec.group
    if group.ref is not None and group.default is None and not group.ref.find(scope):
        return None
    try:
        name = group.evaluate(scope, key=key)
    except WorkloadError as err:
        raise WorkloadError(f"subReplicas.group: {err}") from err
    count = _count(spec.count, scope, "subReplicas.count")
    if replicas and (count == 0 or replicas % count):
        raise WorkloadError(f"subReplicas.count: {replicas} replicas do not come in blocks of "
                            f"{count} (one block per gang replica)")
    return SubReplicas(group=name, count=count,
                       base=min(count, _count(spec.base, scope, "subReplicas.base")))


def _roles(descriptor: Descriptor, obj: Mapping[str, Any],
           ) -> tuple[list[Role], list[tuple[str, str]], set[str]]:
    roles: list[Role] = []
    after: list[tuple[str, str]] = []
    outside: set[str] = set()
    for r, spec in enumerate(descriptor.roles):
        previous: str | None = None
        for key, item in _items(spec, obj):
            values: dict[str, object] = {OBJECT: obj, ITEM: item}
            _join_values(spec, values)
            scope = Scope(values)
            if spec.when is not None and not spec.when.holds(scope):
                continue
            name = spec.name.evaluate(scope, key=key)
            where = f"role {name!r} (spec.roles[{r}])"
            try:
                replicas = _count(spec.replicas, scope, "replicas")
                per = _count(spec.pods_per_replica, scope, "podsPerReplica")
                minimum = (None if spec.min_replicas is None
                           else min(replicas, _count(spec.min_replicas, scope, "minReplicas")))
                min_per = (None if spec.min_pods_per_replica is None else min(
                    per, _count(spec.min_pods_per_replica, scope, "minPodsPerReplica")))
                cut = (None if spec.sub_replicas is None
                       else _cut(spec.sub_replicas, scope, key=key, replicas=replicas))
                template = pod_template(spec.template, scope)
            except WorkloadError as err:
                raise WorkloadError(f"{where}: {err}") from err
            try:
                shape = shape_of(template["spec"], annotations=template["metadata"].get(
                    "annotations") if isinstance(template["metadata"], Mapping) else None)
            except PodSpecError as err:
                raise WorkloadError(f"{where}: pod template {err}") from err
            if any(existing.name == name for existing in roles):
                raise WorkloadError(f"{where}: two roles are named {name!r}")
            try:
                created_after = tuple(dict.fromkeys(
                    pair for rule in spec.created_after if not rule.leader
                    for pair in _created_after(rule, scope, previous)))
            except WorkloadError as err:
                raise WorkloadError(f"{where}: {err}") from err
            previous = name
            role = Role(name=name, replicas=replicas, pods_per_replica=per, shape=shape,
                        min_replicas=minimum, template=template, min_pods_per_replica=min_per,
                        sub_replicas=cut, created_after=created_after,
                        gang_group=spec.gang_group)
            roles.extend(_split_at_leader(role, spec.created_after, scope))
            befores = list(spec.after)
            if spec.after_ref is not None:
                befores += [str(v) for v in spec.after_ref.find(scope)
                            if isinstance(v, str | int)]
            after.extend((before, name) for before in befores)
            if spec.in_gang is not None and not spec.in_gang.holds(scope):
                outside.add(name)
    names = {r.name for r in roles}
    roles = _wait_for_followers(roles)
    # A role created after another also starts after it; a dependency on a role the object
    # does not have (or on itself) orders nothing and holds nothing back.
    after.extend((before, r.name) for r in roles for before, _ in r.created_after)
    roles = [r if all(b in names and b != r.name for b, _ in r.created_after) else replace(
        r, created_after=tuple((b, st) for b, st in r.created_after
                               if b in names and b != r.name)) for r in roles]
    roots = _gang_roots(roles)
    roles = [replace(r, gang_root=roots[r.name]) if roots[r.name] else r for r in roles]
    edges = sorted({(b, a) for b, a in after if b in names and b != a})
    return roles, edges, outside


def _split_at_leader(role: Role, rules: tuple[CreatedAfterSpec, ...], scope: Scope,
                     ) -> list[Role]:
    """``role``, or its leaders (one pod per replica) and ``<role>/followers`` (the rest of
    each replica, created once that replica's leader reaches the first holding ``leader``
    rule's status). A replica of one pod has no followers: nothing to split."""
    status = next((r.status for r in rules if r.leader and r.status is not None
                   and (r.when is None or r.when.holds(scope))), None)
    if status is None or role.pods_per_replica < 2 or role.sub_replicas is not None:
        return [role]
    min_per = role.min_pods_per_replica
    leaders = replace(role, pods_per_replica=1,
                      min_pods_per_replica=None if min_per is None else min(1, min_per))
    followers = Role(name=role.name + FOLLOWERS, replicas=role.replicas,
                     pods_per_replica=role.pods_per_replica - 1, shape=role.shape,
                     min_replicas=role.min_replicas, template=role.template,
                     min_pods_per_replica=None if min_per is None else max(0, min_per - 1),
                     created_after=((role.name, status.value),), follows=role.name,
                     gang_group=role.gang_group)
    return [leaders, followers]


def _wait_for_followers(roles: list[Role]) -> list[Role]:
    """A role waiting for a role split at its leader waits for its followers too: a Job is
    Ready or Complete once all its pods are, not its leader alone."""
    followers = {r.follows: r.name for r in roles if r.follows}
    if not followers:
        return roles
    out = []
    for r in roles:
        extra = tuple((followers[b], st) for b, st in r.created_after
                      if b in followers and followers[b] != r.name)
        out.append(replace(r, created_after=tuple(dict.fromkeys(r.created_after + extra)))
                   if extra else r)
    return out


def _gang_roots(roles: list[Role]) -> dict[str, str]:
    """Per role, the role created after another *completes* whose gang it joins: itself if
    it is one, else that of the first role it waits to be Ready for that has one."""
    by_name = {r.name: r for r in roles}
    out: dict[str, str] = {}

    def root(name: str, path: frozenset[str]) -> str:
        if name in out:
            return out[name]
        role = by_name[name]
        if any(status == Readiness.COMPLETE.value for _, status in role.created_after):
            return name
        for before, status in role.created_after:
            if status != Readiness.COMPLETE.value and before not in path:
                found = root(before, path | {name})
                if found:
                    return found
        return ""

    for name in by_name:
        out[name] = root(name, frozenset())
    return out


def _created_after(spec: CreatedAfterSpec, scope: Scope, previous: str | None,
                   ) -> tuple[tuple[str, str], ...]:
    """``(role, status)`` pairs of one ``createdAfter`` rule, read in the role's scope;
    ``previous`` is the role made for the previous item of the same ``forEach``."""
    if spec.when is not None and not spec.when.holds(scope):
        return ()
    names = list(spec.roles)
    if spec.previous and previous is not None:
        names.append(previous)
    if spec.roles_ref is not None:
        names += [str(v) for v in spec.roles_ref.find(scope) if isinstance(v, str | int)]
    if spec.status is not None:
        statuses = [spec.status.value] * len(names)
    else:
        assert spec.status_ref is not None
        found = spec.status_ref.find(scope)
        statuses = [str(v) for v in found]
        if len(statuses) != len(names):
            raise WorkloadError(f"createdAfter: {len(names)} roles but {len(statuses)} statuses "
                                f"at {spec.status_ref.text}")
    pairs = []
    for name, status in zip(names, statuses, strict=True):
        if status not in {r.value for r in Readiness}:
            raise WorkloadError(f"createdAfter: status {status!r} of role {name!r} is not "
                                "Ready, Scheduled or Complete")
        pairs.append((name, status))
    return tuple(pairs)


def _no_roles(descriptor: Descriptor, obj: Mapping[str, Any]) -> tuple[str, ...]:
    """A warning when every role is looked for at a path that finds nothing (a JobSet without
    ``spec``): the object most likely lacks a field its kind requires. Only a warning, as some
    kinds make no pods of their own until an operator's defaulting fills the field in."""
    paths = [spec.for_each for spec in descriptor.roles]
    if not paths or any(p is None or _items_found(p, obj) for p in paths):
        return ()
    texts = " and ".join(p.text for p in paths if p is not None)
    return (f"no roles: {texts} found nothing, so it makes no pods (is a field its kind "
            "requires missing?)",)


def _items_found(ref: PathRef, obj: Mapping[str, Any]) -> bool:
    return any(path.find(obj) for path in ref.paths)


def _created(obj: Mapping[str, Any]) -> float:
    meta = obj.get("metadata")
    stamp = meta.get("creationTimestamp") if isinstance(meta, Mapping) else None
    if not isinstance(stamp, str):
        return 0.0
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def resolve_workload(obj: Mapping[str, Any], descriptor: Descriptor,
                     limits: WorkloadLimits = DEFAULT_LIMITS) -> WorkloadTree:
    """Resolve ``obj`` (a parsed API object) through ``descriptor`` into its workload tree.

    The work is bounded by the roles and ``limits``, never by a replica count: counts are
    multiplied out, and gangs are cut only while they stay within ``limits.gangs``.
    """
    if not isinstance(obj, Mapping):
        raise WorkloadError("a workload must be an object")
    ref = workload_ref(obj)
    try:
        roles, edges, outside = _roles(descriptor, obj)
        pods = sum(r.pods for r in roles)
        if pods > limits.pods:
            raise WorkloadError(f"{_short(pods)} pods is more than the limit of {limits.pods} "
                                "pods per workload")
        gangs = cut_gangs(descriptor, ref, roles, _created(obj), outside=outside,
                          limit=limits.gangs)
        gangs, notes = with_topology(obj, descriptor.gangs.topology, roles, gangs,
                                     subgroup_label=descriptor.pods.subgroup_label)
    except WorkloadError as err:
        raise WorkloadError(f"{ref.kind}/{ref.name}: {err}") from err
    return WorkloadTree(
        ref=ref,
        descriptor=descriptor.name,
        phase=phase_of(obj, descriptor.status),
        roles=tuple(roles),
        gangs=gangs,
        edges=tuple(edges),
        descriptor_format=descriptor.format,
        warnings=notes + (() if roles else _no_roles(descriptor, obj)),
    )
