"""Compile a descriptor's roles (``spec.roles[i]``): names, joins, counts, sub-replicas, gang
groups, templates and creation order, each path compiled once; and :func:`path_ref`, the path
or ``{path, scope}`` form every part of the descriptor uses.

It must not look at the whole descriptor: checks across roles, gangs and pods are
:func:`~extender.core.workloads.descriptor.compile_descriptor`'s.
"""

from __future__ import annotations

import re

from extender.core.workloads.descriptor_spec import (
    DEFAULT_GANG_GROUP,
    CreatedAfterSpec,
    Join,
    Readiness,
    RoleSpec,
    SubReplicaSpec,
    TemplateSpec,
)
from extender.core.workloads.expressions import (
    ITEM,
    OBJECT,
    DescriptorError,
    PathRef,
    check_fields,
    compile_condition,
    compile_count,
    compile_name,
    compile_paths,
    compile_ref,
    expect_list,
    expect_mapping,
    expect_str,
)

OBJECT_ONLY = frozenset({OBJECT})
ROLE_SCOPES = frozenset({OBJECT, ITEM})


def path_ref(raw: object, at: str, scopes: frozenset[str], default_scope: str) -> PathRef:
    """A bare path string (in ``default_scope``) or ``{path, scope}``."""
    if isinstance(raw, str | list):
        return PathRef(paths=compile_paths(raw, at), scope=default_scope)
    mapping = expect_mapping(raw, at)
    check_fields(mapping, at, ("path", "scope"))
    if "scope" not in mapping:
        mapping = {**mapping, "scope": default_scope}
    return compile_ref(mapping, at, scopes)


_TEMPLATE_FIELDS = ("podTemplate", "podSpec", "metadata", "containers", "resources",
                    "nodeSelector", "tolerations", "affinity", "resourceNames")


def _template(raw: object, at: str, scopes: frozenset[str]) -> TemplateSpec:
    spec = expect_mapping(raw, at)
    check_fields(spec, at, _TEMPLATE_FIELDS)
    if "podTemplate" in spec and ("podSpec" in spec or "metadata" in spec):
        raise DescriptorError(at, "podTemplate excludes podSpec and metadata; use one form")

    def ref(key: str) -> PathRef | None:
        return path_ref(spec[key], f"{at}.{key}", scopes, ITEM) if key in spec else None

    containers = expect_list(spec.get("containers", []), f"{at}.containers")
    names = expect_mapping(spec.get("resourceNames", {}), f"{at}.resourceNames")
    return TemplateSpec(
        pod_template=ref("podTemplate"),
        pod_spec=ref("podSpec"),
        metadata=ref("metadata"),
        containers=tuple(path_ref(c, f"{at}.containers[{i}]", scopes, ITEM)
                         for i, c in enumerate(containers)),
        resources=ref("resources"),
        node_selector=ref("nodeSelector"),
        tolerations=ref("tolerations"),
        affinity=ref("affinity"),
        resource_names=tuple(sorted(
            (str(k), expect_str(v, f"{at}.resourceNames.{k}")) for k, v in names.items())),
    )


_ROLE_FIELDS = ("name", "forEach", "join", "when", "replicas", "minReplicas", "podsPerReplica",
                "minPodsPerReplica", "subReplicas", "template", "after", "createdAfter",
                "gangGroup")
_GANG_GROUP = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _gang_group(raw: object, at: str) -> str:
    """A DNS label, since it names gangs; the default group's own name means no group."""
    name = expect_str(raw, at)
    if not _GANG_GROUP.match(name):
        raise DescriptorError(at, f"{name!r} is not a DNS label (lower-case letters, digits "
                              "and '-', at most 63): it names the group's gangs")
    return "" if name == DEFAULT_GANG_GROUP else name


def _sub_replicas(raw: object, at: str, scopes: frozenset[str]) -> SubReplicaSpec:
    spec = expect_mapping(raw, at)
    check_fields(spec, at, ("group", "count", "base"))
    for key in ("group", "count", "base"):
        if key not in spec:
            raise DescriptorError(f"{at}.{key}", "required")
    return SubReplicaSpec(
        group=compile_name(spec["group"], f"{at}.group", scopes),
        count=compile_count(spec["count"], f"{at}.count", scopes),
        base=compile_count(spec["base"], f"{at}.base", scopes),
    )


def _created_afters(raw: object, at: str, scopes: frozenset[str],
                    ) -> tuple[CreatedAfterSpec, ...]:
    """One ``createdAfter`` rule, or a list of them."""
    if isinstance(raw, list):
        return tuple(_created_after(r, f"{at}[{i}]", scopes) for i, r in enumerate(raw))
    return (_created_after(raw, at, scopes),)


def _created_after(raw: object, at: str, scopes: frozenset[str]) -> CreatedAfterSpec:
    """``{roles: [names] | path, status: Ready | Complete | {path}, when: condition}``, or
    ``{previous: true, ...}`` for the role of the previous ``forEach`` item."""
    spec = expect_mapping(raw, at)
    check_fields(spec, at, ("roles", "previous", "leader", "status", "when"))
    previous = spec.get("previous", False)
    if not isinstance(previous, bool):
        raise DescriptorError(f"{at}.previous", f"expected true or false, got {previous!r}")
    leader = spec.get("leader", False)
    if not isinstance(leader, bool):
        raise DescriptorError(f"{at}.leader", f"expected true or false, got {leader!r}")
    if leader and ("roles" in spec or previous):
        raise DescriptorError(f"{at}.leader", "leader: true waits for the replica's own "
                              "leader; it takes no roles and no previous")
    if "roles" not in spec and not previous and not leader:
        raise DescriptorError(f"{at}.roles", "required (a list of role names or a path), "
                              "unless previous: true or leader: true")
    roles: tuple[str, ...] = ()
    roles_ref = None
    if "roles" not in spec:
        pass
    elif isinstance(spec["roles"], list):
        roles = tuple(expect_str(a, f"{at}.roles[{i}]") for i, a in enumerate(spec["roles"]))
    else:
        roles_ref = path_ref(spec["roles"], f"{at}.roles", scopes, ITEM)
    raw_status = spec.get("status", Readiness.READY.value)
    status: Readiness | None = None
    status_ref = None
    if isinstance(raw_status, str) and not raw_status.startswith("$"):
        try:
            status = Readiness(raw_status)
        except ValueError:
            raise DescriptorError(f"{at}.status", f"{raw_status!r} is not Ready, Scheduled or "
                                  "Complete (or a path to them)") from None
    else:
        status_ref = path_ref(raw_status, f"{at}.status", scopes, ITEM)
    when = compile_condition(spec["when"], f"{at}.when", scopes) if "when" in spec else None
    if (previous or leader) and status is None:
        raise DescriptorError(f"{at}.status", f"{'previous' if previous else 'leader'}: true "
                              "takes one status, not a path")
    if leader and status is Readiness.COMPLETE:
        raise DescriptorError(f"{at}.status", "a leader's followers run beside it: Ready or "
                              "Scheduled, not Complete")
    return CreatedAfterSpec(roles=roles, roles_ref=roles_ref, previous=previous, leader=leader,
                            status=status, status_ref=status_ref, when=when)


def compile_role(raw: object, at: str) -> RoleSpec:
    spec = expect_mapping(raw, at)
    check_fields(spec, at, _ROLE_FIELDS)
    if "name" not in spec:
        raise DescriptorError(f"{at}.name", "required: a literal, {path: ...} or {key: true}")
    joins: list[Join] = []
    join_raw = expect_mapping(spec.get("join", {}), f"{at}.join")
    for alias, j in join_raw.items():
        jat = f"{at}.join.{alias}"
        if alias in (OBJECT, ITEM):
            raise DescriptorError(jat, "object and item are reserved scope names")
        jspec = expect_mapping(j, jat)
        check_fields(jspec, jat, ("in", "match", "equals"))
        for key in ("in", "match", "equals"):
            if key not in jspec:
                raise DescriptorError(f"{jat}.{key}", "required")
        joins.append(Join(
            alias=str(alias),
            source=path_ref(jspec["in"], f"{jat}.in", OBJECT_ONLY, OBJECT),
            match=PathRef(paths=compile_paths(jspec["match"], f"{jat}.match"), scope=ITEM),
            equals=path_ref(jspec["equals"], f"{jat}.equals", ROLE_SCOPES, ITEM),
        ))
    scopes = ROLE_SCOPES | {j.alias for j in joins}
    after: tuple[str, ...] = ()
    after_ref = None
    if "after" in spec:
        if isinstance(spec["after"], list):
            after = tuple(expect_str(a, f"{at}.after[{i}]") for i, a in enumerate(spec["after"]))
        else:
            after_ref = path_ref(spec["after"], f"{at}.after", scopes, ITEM)
    for_each = None
    if "forEach" in spec:
        for_each = path_ref(spec["forEach"], f"{at}.forEach", OBJECT_ONLY, OBJECT)
    elif joins:
        raise DescriptorError(f"{at}.join", "a join needs forEach (it binds per item)")
    return RoleSpec(
        name=compile_name(spec["name"], f"{at}.name", scopes),
        for_each=for_each,
        joins=tuple(joins),
        when=compile_condition(spec["when"], f"{at}.when", scopes) if "when" in spec else None,
        replicas=compile_count(spec.get("replicas", 1), f"{at}.replicas", scopes),
        min_replicas=(compile_count(spec["minReplicas"], f"{at}.minReplicas", scopes)
                      if "minReplicas" in spec else None),
        pods_per_replica=compile_count(spec.get("podsPerReplica", 1), f"{at}.podsPerReplica",
                                       scopes),
        min_pods_per_replica=(compile_count(spec["minPodsPerReplica"], f"{at}.minPodsPerReplica",
                                            scopes) if "minPodsPerReplica" in spec else None),
        sub_replicas=(_sub_replicas(spec["subReplicas"], f"{at}.subReplicas", scopes)
                      if "subReplicas" in spec else None),
        template=_template(spec.get("template", {}), f"{at}.template", scopes),
        after=after,
        after_ref=after_ref,
        created_after=(_created_afters(spec["createdAfter"], f"{at}.createdAfter", scopes)
                       if "createdAfter" in spec else ()),
        gang_group=_gang_group(spec["gangGroup"], f"{at}.gangGroup") if "gangGroup" in spec
        else "",
    )
