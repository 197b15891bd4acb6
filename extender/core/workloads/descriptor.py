"""Compile a ``WorkloadDescriptor`` document, checking it whole.

:func:`compile_descriptor` turns one parsed document (``apiVersion: muster.dev/v1alpha1``,
``kind: WorkloadDescriptor``) into a frozen :class:`Descriptor`, or raises
:class:`DescriptorError` whose ``path`` names the offending field, e.g.
``spec.roles[1].replicas.path``. Every path is compiled here or in
:mod:`~extender.core.workloads.descriptor_roles` (each role), once. The values it builds are
:mod:`~extender.core.workloads.descriptor_spec`'s, re-exported here. The format is documented
field by field in ``docs/descriptors.md``.
"""

from __future__ import annotations

from extender.core.model.values import Phase
from extender.core.workloads.descriptor_roles import OBJECT_ONLY, compile_role, path_ref
from extender.core.workloads.descriptor_spec import (
    API_VERSION,
    KIND,
    CreatedAfterSpec,
    Descriptor,
    GangPolicy,
    GangSpec,
    Join,
    PodMatch,
    Readiness,
    RoleMatch,
    RoleSpec,
    StatusRule,
    StatusSpec,
    SubReplicaSpec,
    Target,
    TemplateSpec,
)
from extender.core.workloads.expressions import (
    ITEM,
    OBJECT,
    DescriptorError,
    check_fields,
    compile_condition,
    compile_count,
    expect_list,
    expect_mapping,
    expect_str,
)
from extender.core.workloads.named import expand_named_conditions
from extender.core.workloads.topology import Slices, TopologyRule, bad_label_key

__all__ = [
    "API_VERSION",
    "KIND",
    "CreatedAfterSpec",
    "Descriptor",
    "DescriptorError",
    "GangPolicy",
    "GangSpec",
    "Join",
    "PodMatch",
    "Readiness",
    "RoleMatch",
    "RoleSpec",
    "StatusRule",
    "StatusSpec",
    "SubReplicaSpec",
    "Target",
    "TemplateSpec",
    "compile_descriptor",
]


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
    over = (path_ref(spec["over"], f"{at}.over", OBJECT_ONLY, OBJECT)
            if "over" in spec else None)
    if over is not None and (per != "replica" or isinstance(spec[kind], str)):
        raise DescriptorError(f"{at}.over", "reads the key on each item: it needs per: replica "
                              "and a {path: ...} key")
    # With over, the key and when are read on each item (scope item by default).
    scopes, default = (OBJECT_ONLY | {ITEM}, ITEM) if over is not None else (OBJECT_ONLY,
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
    ref = path_ref(value, f"{at}.{kind}", scopes, default)
    return TopologyRule(required=kind == "required", exclusive=exclusive, ref=ref,
                        per_replica=per == "replica", when=when, slices=slices, over=over)


def _slices(raw: object, at: str) -> Slices:
    """``{size: <count>, leader: <role>, leaderExcluded: <condition>}``."""
    spec = expect_mapping(raw, at)
    check_fields(spec, at, ("size", "leader", "leaderExcluded"))
    for name in ("size", "leader"):
        if name not in spec:
            raise DescriptorError(f"{at}.{name}", "required")
    return Slices(size=compile_count(spec["size"], f"{at}.size", OBJECT_ONLY),
                  leader=expect_str(spec["leader"], f"{at}.leader"),
                  leader_excluded=(compile_condition(spec["leaderExcluded"],
                                                     f"{at}.leaderExcluded", OBJECT_ONLY)
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


def _check_gang_groups(roles: tuple[RoleSpec, ...], gangs: GangSpec) -> None:
    """``gangGroup`` cuts gangs per replica of each group: only under policy ``replica``."""
    grouped = [i for i, r in enumerate(roles) if r.gang_group]
    if grouped and gangs.policy is not GangPolicy.REPLICA:
        raise DescriptorError(f"spec.roles[{grouped[0]}].gangGroup", "cuts gangs only with "
                              f"spec.gangs.policy replica, not {gangs.policy.value}")


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
                                                       OBJECT_ONLY | {ITEM})))
    return StatusSpec(
        conditions=(path_ref(spec["conditions"], f"{at}.conditions", OBJECT_ONLY, OBJECT)
                    if "conditions" in spec else None),
        phase_field=(path_ref(spec["phase"], f"{at}.phase", OBJECT_ONLY, OBJECT)
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
    roles = tuple(compile_role(r, f"spec.roles[{i}]") for i, r in enumerate(roles_raw))
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
    _check_gang_groups(roles, gangs)
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
