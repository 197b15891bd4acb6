"""The ``WorkloadDescriptor`` format: schema types and the compiler that validates them.

:func:`compile_descriptor` turns one parsed document (``apiVersion: muster.dev/v1alpha1``,
``kind: WorkloadDescriptor``) into a frozen :class:`Descriptor`, or raises
:class:`DescriptorError` whose ``path`` names the offending field, e.g.
``spec.roles[1].replicas.path``. Every path is compiled here, once. The format is documented
field by field in ``docs/descriptors.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from extender.core.model.values import Phase
from extender.core.workloads.expressions import (
    ITEM,
    OBJECT,
    Condition,
    Count,
    DescriptorError,
    Name,
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
from extender.core.workloads.named import expand_named_conditions
from extender.core.workloads.topology import Slices, TopologyRule, bad_label_key

__all__ = [
    "API_VERSION",
    "KIND",
    "Descriptor",
    "DescriptorError",
    "GangPolicy",
    "GangSpec",
    "Join",
    "PodMatch",
    "RoleMatch",
    "RoleSpec",
    "StatusRule",
    "StatusSpec",
    "SubReplicaSpec",
    "Target",
    "TemplateSpec",
    "compile_descriptor",
]

API_VERSION = "muster.dev/v1alpha1"
KIND = "WorkloadDescriptor"


class GangPolicy(StrEnum):
    """How a workload is cut into gangs."""

    WORKLOAD = "workload"
    """One gang of all gang roles; its minimum is the sum of the roles' minimum pods."""
    REPLICA = "replica"
    """One gang per replica index shared by the gang roles (an LWS group: leader + workers)."""
    ROLE = "role"
    """One gang per role (a JobSet replicatedJob, a Dynamo service, as Karta groups them)."""
    ROLE_REPLICA = "roleReplica"
    """One gang per replica of each gang role (a multi-node Dynamo service replica)."""
    BASE_AND_SCALED = "baseAndScaled"
    """One base gang per replica index, holding each role's first ``subReplicas.base`` copies,
    plus one gang per further copy (Grove: a base PodGang per PodCliqueSet replica, a scaled
    PodGang per PodCliqueScalingGroup replica above ``minAvailable``)."""
    NONE = "none"
    """No gangs: pods schedule one by one (plain serving replicas)."""


@dataclass(frozen=True, slots=True)
class Target:
    """The kind a descriptor describes and the names people may call it by."""

    group: str
    kind: str
    versions: tuple[str, ...]
    plural: str
    short_names: tuple[str, ...] = ()

    @property
    def api_versions(self) -> tuple[str, ...]:
        return tuple(f"{self.group}/{v}" if self.group else v for v in self.versions)

    @property
    def group_kind(self) -> str:
        """``Kind.group`` as kubectl spells it (``JobSet.jobset.x-k8s.io``; ``Pod`` for core)."""
        return f"{self.kind}.{self.group}" if self.group else self.kind


@dataclass(frozen=True, slots=True)
class Join:
    """Bind, for each role item, the entry of another list whose ``match`` equals ``equals``."""

    alias: str
    source: PathRef
    match: PathRef
    equals: PathRef


@dataclass(frozen=True, slots=True)
class TemplateSpec:
    """Where a role's pod is described: a template, a PodSpec, or scattered fields."""

    pod_template: PathRef | None = None
    pod_spec: PathRef | None = None
    metadata: PathRef | None = None
    containers: tuple[PathRef, ...] = ()
    resources: PathRef | None = None
    node_selector: PathRef | None = None
    tolerations: PathRef | None = None
    affinity: PathRef | None = None
    resource_names: tuple[tuple[str, str], ...] = ()
    """The kind's own resource names mapped to Kubernetes ones (``gpu`` -> ``nvidia.com/gpu``)."""


@dataclass(frozen=True, slots=True)
class SubReplicaSpec:
    """How a role's replicas are cut into base and scaled gangs (``baseAndScaled``)."""

    group: Name
    """Names the scaled gangs; roles of one group share them. Selecting nothing: not cut."""
    count: Count
    """Copies per gang replica (a PodCliqueScalingGroup's ``replicas``)."""
    base: Count
    """Copies in the base gang (``min(minAvailable, replicas)``); each further one is a gang."""


class Readiness(StrEnum):
    """What an earlier role must reach before an operator creates a later role's pods."""

    READY = "Ready"
    """Its pods are Ready (JobSet ``dependsOn`` Ready, LWS ``LeaderReady``, MPIJob
    ``WaitForWorkersReady``): the later stage's capacity is held for it meanwhile."""
    SCHEDULED = "Scheduled"
    """Its pods are bound to nodes (JobSet's pod webhook admits a Job's followers only once
    its leader pod has a node, under ``exclusive-topology``): held like ``Ready``."""
    COMPLETE = "Complete"
    """It has finished (JobSet ``dependsOn`` Complete, Trainer initializers): the later role
    is a gang of its own, admitted whole when its pods appear, so the GPUs of a trainer are
    not held idle while an initializer runs."""


@dataclass(frozen=True, slots=True)
class CreatedAfterSpec:
    """``createdAfter``: the role's pods exist only once other roles reach a status."""

    roles: tuple[str, ...] = ()
    roles_ref: PathRef | None = None
    previous: bool = False
    """The role made for the previous item of the same ``forEach`` (JobSet ``startupPolicy:
    InOrder``: each replicatedJob is created once the one before it is Ready)."""
    leader: bool = False
    """Each replica's pods other than its leader are created once the leader reaches
    ``status``: the role is split into its leaders and ``<role>/followers``."""
    status: Readiness | None = Readiness.READY
    """One status for every role named; ``None`` when ``status_ref`` reads one per role."""
    status_ref: PathRef | None = None
    """Statuses aligned with the roles found (JobSet ``dependsOn[*].status``)."""
    when: Condition | None = None


@dataclass(frozen=True, slots=True)
class RoleSpec:
    """One role, or one role per item of ``for_each``."""

    name: Name
    replicas: Count
    pods_per_replica: Count
    template: TemplateSpec
    for_each: PathRef | None = None
    joins: tuple[Join, ...] = ()
    when: Condition | None = None
    min_replicas: Count | None = None
    after: tuple[str, ...] = ()
    after_ref: PathRef | None = None
    in_gang: Condition | None = None
    """When set, the role's pods join gangs only where this holds (a Karta member filter)."""
    min_pods_per_replica: Count | None = None
    """Pods of one replica that must start together (Grove clique ``minAvailable``)."""
    sub_replicas: SubReplicaSpec | None = None
    created_after: tuple[CreatedAfterSpec, ...] = ()
    """When the role's pods are created only after other roles reach a status (a *stage*)."""


@dataclass(frozen=True, slots=True)
class GangSpec:
    policy: GangPolicy = GangPolicy.WORKLOAD
    roles: tuple[str, ...] = ()
    """Roles in gangs; empty means every role."""
    topology: tuple[TopologyRule, ...] = ()
    """Where each gang's domain label is read; the first rule that finds a key wins."""


class RoleMatch(StrEnum):
    """How a role label's value names a role."""

    EXACT = "exact"
    """The value is the role name (after ``role.map``)."""
    SUFFIX = "suffix"
    """The value is the role name or ends with ``-<role>`` (an object named
    ``<parent>-<index>-<role>``, as Grove names PodCliques); the longest name wins."""


@dataclass(frozen=True, slots=True)
class PodMatch:
    """How a pod is tied to its workload, role and replica."""

    owners: tuple[str, ...] = ()
    """Kinds between a pod and the workload on the controller chain (``Job``, ``StatefulSet``)."""
    workload_label: str | None = None
    """A pod label whose value names the workload, used when the owner chain is unknown."""
    role_labels: tuple[str, ...] = ()
    role_map: tuple[tuple[str, str], ...] = ()
    role_default: str | None = None
    role_match: RoleMatch = RoleMatch.EXACT
    replica_label: str | None = None
    sub_replica_label: str | None = None
    """A label holding a pod's sub-replica index (Grove's PodCliqueScalingGroup replica)."""
    subgroup_label: str | None = None
    """A label naming the subgroup a pod is in, for ``per: subgroup`` topology
    (LeaderWorkerSet's ``subgroup-index``)."""
    leader_key: str | None = None
    """A label (or else annotation) whose value ``leader_value`` marks a replica's leader
    pod; the others are its followers when a ``createdAfter`` rule splits the role."""
    leader_value: str = "0"


@dataclass(frozen=True, slots=True)
class StatusRule:
    phase: Phase
    when: Condition


@dataclass(frozen=True, slots=True)
class StatusSpec:
    conditions: PathRef | None = None
    phase_field: PathRef | None = None
    rules: tuple[StatusRule, ...] = ()
    default: Phase = Phase.UNDEFINED


@dataclass(frozen=True, slots=True)
class Descriptor:
    """A compiled, validated ``WorkloadDescriptor``."""

    name: str
    target: Target
    roles: tuple[RoleSpec, ...]
    gangs: GangSpec
    pods: PodMatch
    status: StatusSpec
    description: str = ""
    format: str = "muster"
    """``muster`` (a WorkloadDescriptor) or ``karta`` (read from a Workload Map ``Karta``)."""
    source: str = ""
    """Where it came from (a file, ``catalog`` or ``cluster``), for people reading output."""
    notes: tuple[str, ...] = ()
    """What a translated descriptor could not express exactly, in words."""


_OBJECT_ONLY = frozenset({OBJECT})
_ROLE_SCOPES = frozenset({OBJECT, ITEM})


def _path_ref(raw: object, at: str, scopes: frozenset[str], default_scope: str) -> PathRef:
    """A bare path string (in ``default_scope``) or ``{path, scope}``."""
    if isinstance(raw, str | list):
        return PathRef(paths=compile_paths(raw, at), scope=default_scope)
    mapping = expect_mapping(raw, at)
    check_fields(mapping, at, ("path", "scope"))
    if "scope" not in mapping:
        mapping = {**mapping, "scope": default_scope}
    return compile_ref(mapping, at, scopes)


def _target(raw: object, at: str) -> Target:
    spec = expect_mapping(raw, at)
    check_fields(spec, at, ("group", "kind", "versions", "plural", "shortNames"))
    group = spec.get("group", "")
    if not isinstance(group, str):
        raise DescriptorError(f"{at}.group", "expected a string ('' for the core group)")
    kind = expect_str(spec.get("kind"), f"{at}.kind")
    versions = expect_list(spec.get("versions"), f"{at}.versions")
    if not versions:
        raise DescriptorError(f"{at}.versions", "needs at least one served version")
    short = expect_list(spec.get("shortNames", []), f"{at}.shortNames")
    plural = spec.get("plural", kind.lower() + "s")
    return Target(
        group=group,
        kind=kind,
        versions=tuple(expect_str(v, f"{at}.versions[{i}]") for i, v in enumerate(versions)),
        plural=expect_str(plural, f"{at}.plural"),
        short_names=tuple(expect_str(s, f"{at}.shortNames[{i}]") for i, s in enumerate(short)),
    )


_TEMPLATE_FIELDS = ("podTemplate", "podSpec", "metadata", "containers", "resources",
                    "nodeSelector", "tolerations", "affinity", "resourceNames")


def _template(raw: object, at: str, scopes: frozenset[str]) -> TemplateSpec:
    spec = expect_mapping(raw, at)
    check_fields(spec, at, _TEMPLATE_FIELDS)
    if "podTemplate" in spec and ("podSpec" in spec or "metadata" in spec):
        raise DescriptorError(at, "podTemplate excludes podSpec and metadata; use one form")

    def ref(key: str) -> PathRef | None:
        return _path_ref(spec[key], f"{at}.{key}", scopes, ITEM) if key in spec else None

    containers = expect_list(spec.get("containers", []), f"{at}.containers")
    names = expect_mapping(spec.get("resourceNames", {}), f"{at}.resourceNames")
    return TemplateSpec(
        pod_template=ref("podTemplate"),
        pod_spec=ref("podSpec"),
        metadata=ref("metadata"),
        containers=tuple(_path_ref(c, f"{at}.containers[{i}]", scopes, ITEM)
                         for i, c in enumerate(containers)),
        resources=ref("resources"),
        node_selector=ref("nodeSelector"),
        tolerations=ref("tolerations"),
        affinity=ref("affinity"),
        resource_names=tuple(sorted(
            (str(k), expect_str(v, f"{at}.resourceNames.{k}")) for k, v in names.items())),
    )


_ROLE_FIELDS = ("name", "forEach", "join", "when", "replicas", "minReplicas", "podsPerReplica",
                "minPodsPerReplica", "subReplicas", "template", "after", "createdAfter")


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
        roles_ref = _path_ref(spec["roles"], f"{at}.roles", scopes, ITEM)
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
        status_ref = _path_ref(raw_status, f"{at}.status", scopes, ITEM)
    when = compile_condition(spec["when"], f"{at}.when", scopes) if "when" in spec else None
    if (previous or leader) and status is None:
        raise DescriptorError(f"{at}.status", f"{'previous' if previous else 'leader'}: true "
                              "takes one status, not a path")
    if leader and status is Readiness.COMPLETE:
        raise DescriptorError(f"{at}.status", "a leader's followers run beside it: Ready or "
                              "Scheduled, not Complete")
    return CreatedAfterSpec(roles=roles, roles_ref=roles_ref, previous=previous, leader=leader,
                            status=status, status_ref=status_ref, when=when)


def _role(raw: object, at: str) -> RoleSpec:
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
            source=_path_ref(jspec["in"], f"{jat}.in", _OBJECT_ONLY, OBJECT),
            match=PathRef(paths=compile_paths(jspec["match"], f"{jat}.match"), scope=ITEM),
            equals=_path_ref(jspec["equals"], f"{jat}.equals", _ROLE_SCOPES, ITEM),
        ))
    scopes = _ROLE_SCOPES | {j.alias for j in joins}
    after: tuple[str, ...] = ()
    after_ref = None
    if "after" in spec:
        if isinstance(spec["after"], list):
            after = tuple(expect_str(a, f"{at}.after[{i}]") for i, a in enumerate(spec["after"]))
        else:
            after_ref = _path_ref(spec["after"], f"{at}.after", scopes, ITEM)
    for_each = None
    if "forEach" in spec:
        for_each = _path_ref(spec["forEach"], f"{at}.forEach", _OBJECT_ONLY, OBJECT)
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
    )


def _topology_rule(raw: object, at: str) -> TopologyRule:
    """``{required: <key>}`` or ``{preferred: <key>}`` (a label key, or ``{path: ...}`` read
    on the object), with ``exclusive: true`` for a required domain no other gang may share;
    ``per: replica`` or ``per: subgroup`` (with ``subgroups``) for a domain per replica or
    per subgroup instead of one for the whole gang."""
    spec = expect_mapping(raw, at)
    check_fields(spec, at, ("required", "preferred", "exclusive", "per", "subgroups", "over",
                            "when"))
    chosen = [k for k in ("required", "preferred") if k in spec]
    if len(chosen) != 1:
        raise DescriptorError(at, "needs exactly one of required or preferred (a node label "
                              "key or {path: ...})")
    kind = chosen[0]
    exclusive = spec.get("exclusive", False)
    if not isinstance(exclusive, bool):
        raise DescriptorError(f"{at}.exclusive", "expected true or false")
    if exclusive and kind != "required":
        raise DescriptorError(f"{at}.exclusive", "only a required domain can be exclusive")
    per = spec.get("per", "gang")
    if per not in ("gang", "replica", "subgroup"):
        raise DescriptorError(f"{at}.per", f"expected gang, replica or subgroup, got {per!r}")
    if per != "gang" and not (exclusive and kind == "required"):
        raise DescriptorError(f"{at}.per", f"per: {per} keeps each {per} alone in its own "
                              "domain: it needs required and exclusive: true")
    if (per == "subgroup") != ("subgroups" in spec):
        raise DescriptorError(f"{at}.subgroups", "required with per: subgroup, and read only "
                              "with it: how the gang is cut into subgroups")
    slices = _slices(spec["subgroups"], f"{at}.subgroups") if per == "subgroup" else None
    over = (_path_ref(spec["over"], f"{at}.over", _OBJECT_ONLY, OBJECT)
            if "over" in spec else None)
    if over is not None and (per != "replica" or isinstance(spec[kind], str)):
        raise DescriptorError(f"{at}.over", "reads the key on each item: it needs per: replica "
                              "and a {path: ...} key")
    # With over, the key and when are read on each item (scope item by default).
    scopes, default = (_OBJECT_ONLY | {ITEM}, ITEM) if over is not None else (_OBJECT_ONLY,
                                                                                OBJECT)
    when = (compile_condition(spec["when"], f"{at}.when", scopes)
            if "when" in spec else None)
    value = spec[kind]
    if isinstance(value, str):
        why = bad_label_key(value)
        if why is not None:
            raise DescriptorError(f"{at}.{kind}", why)
        return TopologyRule(required=kind == "required", exclusive=exclusive, literal=value,
                            per_replica=per == "replica", when=when, slices=slices)
    ref = _path_ref(value, f"{at}.{kind}", scopes, default)
    return TopologyRule(required=kind == "required", exclusive=exclusive, ref=ref,
                        per_replica=per == "replica", when=when, slices=slices, over=over)


def _slices(raw: object, at: str) -> Slices:
    """``{size: <count>, leader: <role>, leaderExcluded: <condition>}``."""
    spec = expect_mapping(raw, at)
    check_fields(spec, at, ("size", "leader", "leaderExcluded"))
    for name in ("size", "leader"):
        if name not in spec:
            raise DescriptorError(f"{at}.{name}", "required")
    return Slices(size=compile_count(spec["size"], f"{at}.size", _OBJECT_ONLY),
                  leader=expect_str(spec["leader"], f"{at}.leader"),
                  leader_excluded=(compile_condition(spec["leaderExcluded"],
                                                     f"{at}.leaderExcluded", _OBJECT_ONLY)
                                   if "leaderExcluded" in spec else None))


def _gangs(raw: object, at: str) -> GangSpec:
    spec = expect_mapping(raw, at)
    check_fields(spec, at, ("policy", "roles", "topology"))
    policy = spec.get("policy", GangPolicy.WORKLOAD.value)
    if policy not in {p.value for p in GangPolicy}:
        raise DescriptorError(f"{at}.policy", f"unknown policy {policy!r}; expected one of "
                              f"{', '.join(p.value for p in GangPolicy)}")
    roles = expect_list(spec.get("roles", []), f"{at}.roles")
    rules = expect_list(spec.get("topology", []), f"{at}.topology")
    return GangSpec(policy=GangPolicy(policy),
                    roles=tuple(expect_str(r, f"{at}.roles[{i}]") for i, r in enumerate(roles)),
                    topology=tuple(_topology_rule(r, f"{at}.topology[{i}]")
                                   for i, r in enumerate(rules)))


def _pods(raw: object, at: str) -> PodMatch:
    spec = expect_mapping(raw, at)
    check_fields(spec, at, ("owners", "workloadLabel", "role", "replica", "subReplica",
                            "subgroup", "leader"))
    owners = expect_list(spec.get("owners", []), f"{at}.owners")
    role = expect_mapping(spec.get("role", {}), f"{at}.role")
    check_fields(role, f"{at}.role", ("labels", "map", "default", "match"))
    labels = expect_list(role.get("labels", []), f"{at}.role.labels")
    mapping = expect_mapping(role.get("map", {}), f"{at}.role.map")
    match = role.get("match", RoleMatch.EXACT.value)
    if match not in {m.value for m in RoleMatch}:
        raise DescriptorError(f"{at}.role.match", f"unknown match {match!r}; expected one of "
                              f"{', '.join(m.value for m in RoleMatch)}")
    replica = expect_mapping(spec.get("replica", {}), f"{at}.replica")
    check_fields(replica, f"{at}.replica", ("label",))
    sub = expect_mapping(spec.get("subReplica", {}), f"{at}.subReplica")
    check_fields(sub, f"{at}.subReplica", ("label",))
    subgroup = expect_mapping(spec.get("subgroup", {}), f"{at}.subgroup")
    check_fields(subgroup, f"{at}.subgroup", ("label",))
    leader = expect_mapping(spec.get("leader", {}), f"{at}.leader")
    check_fields(leader, f"{at}.leader", ("key", "value"))
    if leader and "key" not in leader:
        raise DescriptorError(f"{at}.leader.key", "required: the label or annotation")
    default = role.get("default")
    workload_label = spec.get("workloadLabel")
    return PodMatch(
        owners=tuple(expect_str(o, f"{at}.owners[{i}]") for i, o in enumerate(owners)),
        workload_label=(expect_str(workload_label, f"{at}.workloadLabel")
                        if workload_label is not None else None),
        role_labels=tuple(expect_str(v, f"{at}.role.labels[{i}]") for i, v in enumerate(labels)),
        role_map=tuple(sorted((str(k), expect_str(v, f"{at}.role.map.{k}"))
                              for k, v in mapping.items())),
        role_default=expect_str(default, f"{at}.role.default") if default is not None else None,
        role_match=RoleMatch(match),
        replica_label=(expect_str(replica["label"], f"{at}.replica.label")
                       if "label" in replica else None),
        sub_replica_label=(expect_str(sub["label"], f"{at}.subReplica.label")
                           if "label" in sub else None),
        subgroup_label=(expect_str(subgroup["label"], f"{at}.subgroup.label")
                        if "label" in subgroup else None),
        leader_key=expect_str(leader["key"], f"{at}.leader.key") if leader else None,
        leader_value=expect_str(leader.get("value", "0"), f"{at}.leader.value"),
    )


def _check_sub_replicas(roles: tuple[RoleSpec, ...], gangs: GangSpec, pods: PodMatch) -> None:
    """``subReplicas`` cuts gangs only under ``baseAndScaled``, whose pods must carry their
    replica and sub-replica indexes (without them a pod cannot tell its gang)."""
    cut = [i for i, r in enumerate(roles) if r.sub_replicas is not None]
    if gangs.policy is GangPolicy.BASE_AND_SCALED:
        if pods.replica_label is None:
            raise DescriptorError("spec.pods.replica.label", "required with gang policy "
                                  "baseAndScaled: it says which base gang a pod is in")
        if cut and pods.sub_replica_label is None:
            raise DescriptorError("spec.pods.subReplica.label", f"required: spec.roles[{cut[0]}]"
                                  ".subReplicas cuts replicas into gangs, so a pod must say "
                                  "which sub-replica it is")
    elif cut:
        raise DescriptorError(f"spec.roles[{cut[0]}].subReplicas", "cuts gangs only with "
                              "spec.gangs.policy baseAndScaled, not "
                              f"{gangs.policy.value}")
    elif pods.sub_replica_label is not None:
        raise DescriptorError("spec.pods.subReplica", "is read only with spec.gangs.policy "
                              "baseAndScaled")


def _check_subgroups(roles: tuple[RoleSpec, ...], gangs: GangSpec, pods: PodMatch) -> None:
    """A ``per: subgroup`` rule needs the pod label saying each pod's subgroup, and its
    leader must be a role."""
    names = {r.name.literal for r in roles}
    for i, rule in enumerate(gangs.topology):
        if rule.slices is None:
            continue
        if pods.subgroup_label is None:
            raise DescriptorError("spec.pods.subgroup.label", f"required: spec.gangs.topology"
                                  f"[{i}] keeps each subgroup to its own domain, so a pod must "
                                  "say which subgroup it is in")
        if None not in names and rule.slices.leader not in names:
            raise DescriptorError(f"spec.gangs.topology[{i}].subgroups.leader",
                                  f"no role named {rule.slices.leader!r}")


def _phase(raw: object, at: str) -> Phase:
    try:
        return Phase(str(raw))
    except ValueError:
        raise DescriptorError(at, f"unknown phase {raw!r}; expected one of "
                              f"{', '.join(p.value for p in Phase)}") from None


def _status(raw: object, at: str) -> StatusSpec:
    spec = expect_mapping(raw, at)
    check_fields(spec, at, ("conditions", "phase", "rules", "default"))
    rules = []
    for i, r in enumerate(expect_list(spec.get("rules", []), f"{at}.rules")):
        rat = f"{at}.rules[{i}]"
        rule = expect_mapping(r, rat)
        check_fields(rule, rat, ("phase", "when"))
        if "when" not in rule:
            raise DescriptorError(f"{rat}.when", "required")
        rules.append(StatusRule(phase=_phase(rule.get("phase"), f"{rat}.phase"),
                                when=compile_condition(rule["when"], f"{rat}.when",
                                                       _OBJECT_ONLY | {ITEM})))
    return StatusSpec(
        conditions=(_path_ref(spec["conditions"], f"{at}.conditions", _OBJECT_ONLY, OBJECT)
                    if "conditions" in spec else None),
        phase_field=(_path_ref(spec["phase"], f"{at}.phase", _OBJECT_ONLY, OBJECT)
                     if "phase" in spec else None),
        rules=tuple(rules),
        default=_phase(spec.get("default", Phase.UNDEFINED.value), f"{at}.default"),
    )


def compile_descriptor(raw: object) -> Descriptor:
    """Validate and compile one descriptor document; raises :class:`DescriptorError`."""
    doc = expect_mapping(raw, "")
    check_fields(doc, "", ("apiVersion", "kind", "metadata", "spec"))
    if doc.get("apiVersion") != API_VERSION:
        raise DescriptorError("apiVersion", f"expected {API_VERSION}, got "
                              f"{doc.get('apiVersion')!r}")
    if doc.get("kind") != KIND:
        raise DescriptorError("kind", f"expected {KIND}, got {doc.get('kind')!r}")
    metadata = expect_mapping(doc.get("metadata"), "metadata")
    name = expect_str(metadata.get("name"), "metadata.name")
    spec = expect_mapping(doc.get("spec"), "spec")
    check_fields(spec, "spec", ("description", "target", "namedConditions", "roles", "gangs",
                                "pods", "status"))
    spec = expand_named_conditions(spec)
    roles_raw = expect_list(spec.get("roles"), "spec.roles")
    if not roles_raw:
        raise DescriptorError("spec.roles", "needs at least one role")
    roles = tuple(_role(r, f"spec.roles[{i}]") for i, r in enumerate(roles_raw))
    literal = [r.name.literal for r in roles if r.name.literal is not None]
    for i, role_name in enumerate(literal):
        if role_name in literal[:i]:
            raise DescriptorError("spec.roles", f"role name {role_name!r} is used twice")
    gangs = _gangs(spec.get("gangs", {}), "spec.gangs")
    for i, gang_role in enumerate(gangs.roles):
        dynamic = any(r.name.literal is None for r in roles)
        if not dynamic and gang_role not in literal:
            raise DescriptorError(f"spec.gangs.roles[{i}]", f"no role named {gang_role!r}")
    description = spec.get("description", "")
    if not isinstance(description, str):
        raise DescriptorError("spec.description", "expected a string")
    target = _target(spec.get("target"), "spec.target")
    pods = _pods(spec.get("pods", {}), "spec.pods")
    _check_sub_replicas(roles, gangs, pods)
    _check_subgroups(roles, gangs, pods)
    return Descriptor(
        name=name,
        target=target,
        roles=roles,
        gangs=gangs,
        pods=pods,
        status=_status(spec.get("status", {}), "spec.status"),
        description=description,
    )
