"""Workload Map (Karta) documents parsed and validated into frozen values.

:func:`read_karta` checks a ``run.ai/v1alpha1 Karta`` the way upstream's validator does (unique
component names, a root with a full kind and a status definition, ``ownerRef`` naming an
existing component without cycles, one pod-spec form, ``instanceIdPath`` together with
``componentInstanceSelector``, gang members naming components, every jq program parsing) and
raises :class:`DescriptorError` whose ``path`` names the field, e.g.
``spec.structureDefinition.childComponents[0].scaleDefinition.replicasPath``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.core.karta.jq import JqPath, compile_jq
from extender.core.workloads.expressions import (
    DescriptorError,
    check_fields,
    expect_list,
    expect_mapping,
    expect_str,
)
from extender.core.workloads.paths import PathError

__all__ = [
    "API_VERSION",
    "FRAGMENT_FIELDS",
    "KIND",
    "STATUS_KEYS",
    "Component",
    "GangMemberDef",
    "Karta",
    "Matcher",
    "PodGroupDef",
    "StatusDef",
    "SubGroupDef",
    "is_karta_document",
    "read_karta",
]

API_VERSION = "run.ai/v1alpha1"
KIND = "Karta"

#: Status mapping keys of both enum variants (workload-map: Initializing...; the karta
#: branch: Pending/Progressing), in upstream's evaluation order of ``Entries()``.
STATUS_KEYS = ("resuming", "suspending", "suspended", "running", "failed", "completed",
               "initializing", "pending", "progressing", "degraded")

FRAGMENT_FIELDS = ("schedulerNamePath", "labelsPath", "annotationsPath", "resourcesPath",
                   "resourceClaimsPath", "podAffinityPath", "nodeAffinityPath", "containersPath",
                   "containerPath", "priorityClassNamePath", "imagePath")


@dataclass(frozen=True, slots=True)
class Matcher:
    """One entry of a status mapping; its parts are ANDed."""

    by_phase: str | None = None
    by_conditions: tuple[tuple[str, str | None, str | None], ...] = ()
    """``(type, status, reason)``; ``None`` leaves that field untested."""
    by_expression: tuple[JqPath, str] | None = None


@dataclass(frozen=True, slots=True)
class StatusDef:
    conditions: JqPath | None = None
    type_field: str = "type"
    status_field: str = "status"
    reason_field: str = "reason"
    phase: JqPath | None = None
    mappings: tuple[tuple[str, tuple[Matcher, ...]], ...] = ()
    """``(key, matchers)`` in the order of :data:`STATUS_KEYS`; matchers are ORed."""


@dataclass(frozen=True, slots=True)
class Component:
    name: str
    at: str
    """Its field path in the document, for messages."""
    kind: tuple[str, str, str] | None = None
    owner: str | None = None
    template: JqPath | None = None
    pod_spec: JqPath | None = None
    metadata: JqPath | None = None
    fragments: tuple[tuple[str, JqPath], ...] = ()
    replicas: JqPath | None = None
    min_replicas: JqPath | None = None
    max_replicas: JqPath | None = None
    instance_id: JqPath | None = None
    type_key: JqPath | None = None
    type_value: str | None = None
    match_labels: tuple[tuple[str, str], ...] = ()
    instance_selector: JqPath | None = None
    replica_key: JqPath | None = None
    status: StatusDef | None = None

    @property
    def has_pods(self) -> bool:
        return (self.template is not None or self.pod_spec is not None
                or self.metadata is not None or bool(self.fragments))


@dataclass(frozen=True, slots=True)
class GangMemberDef:
    component: str
    group_by: tuple[JqPath, ...] = ()
    filters: tuple[JqPath, ...] = ()


@dataclass(frozen=True, slots=True)
class PodGroupDef:
    """The alpha ``podGroups`` entry."""

    name: str
    members: tuple[GangMemberDef, ...]


@dataclass(frozen=True, slots=True)
class SubGroupDef:
    component: str
    topology: tuple[str, str, str] | None = None


@dataclass(frozen=True, slots=True)
class Karta:
    """A validated Karta: its component tree (root first) and gang instructions."""

    name: str
    components: tuple[Component, ...]
    additional_kinds: tuple[tuple[str, str, str], ...] = ()
    pod_groups: tuple[PodGroupDef, ...] = ()
    pod_group: PodGroupDef | None = None
    """The v0.2 ``podGroup``; its ``members`` are the ``subGroups`` (no keys, no filters)."""
    sub_groups: tuple[SubGroupDef, ...] = ()
    topology: tuple[str, str, str] | None = None

    @property
    def root(self) -> Component:
        return self.components[0]

    def component(self, name: str) -> Component:
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(name)

    def children(self, name: str) -> tuple[Component, ...]:
        return tuple(c for c in self.components if c.owner == name)

    def subtree(self, name: str) -> tuple[Component, ...]:
        """``name`` and every component below it, in document order."""
        out = [self.component(name)]
        for child in self.children(name):
            out.extend(self.subtree(child.name))
        return tuple(out)

    def ancestors(self, name: str) -> tuple[Component, ...]:
        out: list[Component] = []
        owner = self.component(name).owner
        while owner is not None:
            parent = self.component(owner)
            out.append(parent)
            owner = parent.owner
        return tuple(out)


def _jq(raw: object, at: str, *, strict: bool = True) -> JqPath:
    if not isinstance(raw, str | int | float) or isinstance(raw, bool) or str(raw).strip() == "":
        raise DescriptorError(at, "expected a jq program (a non-empty string)")
    try:
        return compile_jq(str(raw), strict=strict)
    except PathError as err:
        raise DescriptorError(at, str(err)) from err


def _opt_jq(spec: Mapping[str, Any], key: str, at: str, *, strict: bool = True) -> JqPath | None:
    return _jq(spec[key], f"{at}.{key}", strict=strict) if key in spec else None


def _gvk(raw: object, at: str) -> tuple[str, str, str]:
    spec = expect_mapping(raw, at)
    check_fields(spec, at, ("group", "version", "kind"))
    group = spec.get("group", "")
    if not isinstance(group, str):
        raise DescriptorError(f"{at}.group", "expected a string ('' for the core group)")
    return (group, expect_str(spec.get("version"), f"{at}.version"),
            expect_str(spec.get("kind"), f"{at}.kind"))


def _status(raw: object, at: str) -> StatusDef:
    spec = expect_mapping(raw, at)
    check_fields(spec, at, ("conditionsDefinition", "phaseDefinition", "statusMappings"))
    cond = expect_mapping(spec.get("conditionsDefinition", {}), f"{at}.conditionsDefinition")
    cat = f"{at}.conditionsDefinition"
    check_fields(cond, cat, ("path", "typeFieldName", "statusFieldName", "messageFieldName",
                             "reasonFieldName"))
    if cond and "path" not in cond:
        raise DescriptorError(f"{cat}.path", "required")
    names = {k: expect_str(cond.get(k, d), f"{cat}.{k}") for k, d in (
        ("typeFieldName", "type"), ("statusFieldName", "status"), ("reasonFieldName", "reason"))}
    phase = expect_mapping(spec.get("phaseDefinition", {}), f"{at}.phaseDefinition")
    check_fields(phase, f"{at}.phaseDefinition", ("path",))
    if phase and "path" not in phase:
        raise DescriptorError(f"{at}.phaseDefinition.path", "required")
    raw_maps = expect_mapping(spec.get("statusMappings", {}), f"{at}.statusMappings")
    check_fields(raw_maps, f"{at}.statusMappings", STATUS_KEYS)
    mappings = []
    for key in STATUS_KEYS:
        if key not in raw_maps:
            continue
        mat = f"{at}.statusMappings.{key}"
        mappings.append((key, tuple(_matcher(m, f"{mat}[{i}]")
                                    for i, m in enumerate(expect_list(raw_maps[key], mat)))))
    return StatusDef(
        conditions=_opt_jq(cond, "path", cat, strict=False),
        type_field=names["typeFieldName"], status_field=names["statusFieldName"],
        reason_field=names["reasonFieldName"],
        phase=_opt_jq(phase, "path", f"{at}.phaseDefinition", strict=False),
        mappings=tuple(mappings))


def _matcher(raw: object, at: str) -> Matcher:
    spec = expect_mapping(raw, at)
    check_fields(spec, at, ("byPhase", "byConditions", "byExpression"))
    if not spec:
        raise DescriptorError(at, "a matcher needs byPhase, byConditions or byExpression")
    conds = []
    for i, c in enumerate(expect_list(spec.get("byConditions", []), f"{at}.byConditions")):
        cat = f"{at}.byConditions[{i}]"
        cm = expect_mapping(c, cat)
        check_fields(cm, cat, ("type", "status", "reason"))
        status, reason = cm.get("status"), cm.get("reason")
        conds.append((expect_str(cm.get("type"), f"{cat}.type"),
                      None if status is None else expect_str(status, f"{cat}.status"),
                      None if reason is None else expect_str(reason, f"{cat}.reason")))
    expression = None
    if "byExpression" in spec:
        eat = f"{at}.byExpression"
        em = expect_mapping(spec["byExpression"], eat)
        check_fields(em, eat, ("expression", "expectedResult"))
        if "expectedResult" not in em:
            raise DescriptorError(f"{eat}.expectedResult", "required")
        expression = (_jq(em.get("expression"), f"{eat}.expression", strict=False),
                      str(em["expectedResult"]).lower() if isinstance(em["expectedResult"], bool)
                      else str(em["expectedResult"]))
    by_phase = spec.get("byPhase")
    return Matcher(by_phase=None if by_phase is None else expect_str(by_phase, f"{at}.byPhase"),
                   by_conditions=tuple(conds), by_expression=expression)


_COMPONENT_FIELDS = ("name", "kind", "ownerRef", "specDefinition", "scaleDefinition",
                     "statusDefinition", "suspendDefinition", "instanceIdPath", "podSelector")


def _component(raw: object, at: str) -> Component:
    spec = expect_mapping(raw, at)
    check_fields(spec, at, _COMPONENT_FIELDS)
    name = expect_str(spec.get("name"), f"{at}.name")
    sdef = expect_mapping(spec.get("specDefinition", {}), f"{at}.specDefinition")
    sat = f"{at}.specDefinition"
    check_fields(sdef, sat, ("podTemplateSpecPath", "podSpecPath", "metadataPath",
                             "fragmentedPodSpecDefinition"))
    forms = [k for k in ("podTemplateSpecPath", "podSpecPath", "fragmentedPodSpecDefinition")
             if k in sdef]
    if len(forms) > 1:
        raise DescriptorError(sat, f"at most one of podTemplateSpecPath, podSpecPath, "
                              f"fragmentedPodSpecDefinition; got {', '.join(forms)}")
    if "metadataPath" in sdef and "podSpecPath" not in sdef:
        raise DescriptorError(f"{sat}.metadataPath", "metadataPath goes with podSpecPath")
    frag = expect_mapping(sdef.get("fragmentedPodSpecDefinition", {}),
                          f"{sat}.fragmentedPodSpecDefinition")
    fat = f"{sat}.fragmentedPodSpecDefinition"
    check_fields(frag, fat, FRAGMENT_FIELDS)
    scale = expect_mapping(spec.get("scaleDefinition", {}), f"{at}.scaleDefinition")
    cat = f"{at}.scaleDefinition"
    check_fields(scale, cat, ("replicasPath", "minReplicasPath", "maxReplicasPath"))
    sel = expect_mapping(spec.get("podSelector", {}), f"{at}.podSelector")
    pat = f"{at}.podSelector"
    check_fields(sel, pat, ("componentTypeSelector", "componentInstanceSelector",
                            "replicaSelector"))
    ctype = expect_mapping(sel.get("componentTypeSelector", {}), f"{pat}.componentTypeSelector")
    tat = f"{pat}.componentTypeSelector"
    check_fields(ctype, tat, ("keyPath", "value", "matchLabels"))
    if ctype and "keyPath" not in ctype and "matchLabels" not in ctype:
        raise DescriptorError(tat, "needs keyPath or matchLabels")
    if "value" in ctype and "keyPath" not in ctype:
        raise DescriptorError(f"{tat}.value", "value needs keyPath")
    labels = expect_mapping(ctype.get("matchLabels", {}), f"{tat}.matchLabels")
    inst = expect_mapping(sel.get("componentInstanceSelector", {}),
                          f"{pat}.componentInstanceSelector")
    check_fields(inst, f"{pat}.componentInstanceSelector", ("idPath",))
    rep = expect_mapping(sel.get("replicaSelector", {}), f"{pat}.replicaSelector")
    check_fields(rep, f"{pat}.replicaSelector", ("keyPath",))
    if ("instanceIdPath" in spec) != bool(inst):
        raise DescriptorError(f"{at}.instanceIdPath", "instanceIdPath and "
                              "podSelector.componentInstanceSelector must appear together")
    owner = spec.get("ownerRef")
    value = ctype.get("value")
    return Component(
        name=name, at=at,
        kind=_gvk(spec["kind"], f"{at}.kind") if "kind" in spec else None,
        owner=None if owner is None else expect_str(owner, f"{at}.ownerRef"),
        template=_opt_jq(sdef, "podTemplateSpecPath", sat),
        pod_spec=_opt_jq(sdef, "podSpecPath", sat),
        metadata=_opt_jq(sdef, "metadataPath", sat),
        fragments=tuple((k, _jq(frag[k], f"{fat}.{k}")) for k in FRAGMENT_FIELDS if k in frag),
        replicas=_opt_jq(scale, "replicasPath", cat),
        min_replicas=_opt_jq(scale, "minReplicasPath", cat),
        max_replicas=_opt_jq(scale, "maxReplicasPath", cat),
        instance_id=_opt_jq(spec, "instanceIdPath", at),
        type_key=_opt_jq(ctype, "keyPath", tat, strict=False),
        type_value=None if value is None else str(value),
        match_labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
        instance_selector=_opt_jq(inst, "idPath", f"{pat}.componentInstanceSelector",
                                  strict=False),
        replica_key=_opt_jq(rep, "keyPath", f"{pat}.replicaSelector", strict=False),
        status=(_status(spec["statusDefinition"], f"{at}.statusDefinition")
                if "statusDefinition" in spec else None),
    )


def _check_tree(components: list[Component], at: str) -> None:
    names = [c.name for c in components]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise DescriptorError(f"{components[i].at}.name", f"component name {name!r} is "
                                  "used twice")
    for c in components[1:]:
        if c.owner is None:
            raise DescriptorError(f"{c.at}.ownerRef", "a child component needs ownerRef (the "
                                  "name of its parent component)")
        if c.owner not in names:
            raise DescriptorError(f"{c.at}.ownerRef", f"no component named {c.owner!r}; known: "
                                  f"{', '.join(names)}")
        seen = {c.name}
        owner: str | None = c.owner
        while owner is not None:
            if owner in seen:
                raise DescriptorError(f"{c.at}.ownerRef", f"ownerRef cycle through {owner!r}")
            seen.add(owner)
            owner = next(x.owner for x in components if x.name == owner)
    del at


def _topology(raw: object, at: str) -> tuple[str, str, str]:
    spec = expect_mapping(raw, at)
    keys = ("topologyName", "requiredTopologyLevel", "preferredTopologyLevel")
    check_fields(spec, at, keys)
    a, b, c = (expect_str(spec.get(k), f"{at}.{k}") for k in keys)
    return a, b, c


def _gangs(raw: object, at: str, names: list[str],
           ) -> tuple[tuple[PodGroupDef, ...], PodGroupDef | None, tuple[SubGroupDef, ...],
                      tuple[str, str, str] | None]:
    spec = expect_mapping(raw, at)
    check_fields(spec, at, ("podGroups", "podGroup"))

    def known(name: object, where: str) -> str:
        text = expect_str(name, where)
        if text not in names:
            raise DescriptorError(where, f"no component named {text!r}; known: "
                                  f"{', '.join(names)}")
        return text

    groups = []
    for i, g in enumerate(expect_list(spec.get("podGroups", []), f"{at}.podGroups")):
        gat = f"{at}.podGroups[{i}]"
        gm = expect_mapping(g, gat)
        check_fields(gm, gat, ("name", "members"))
        members = []
        for j, m in enumerate(expect_list(gm.get("members"), f"{gat}.members")):
            mat = f"{gat}.members[{j}]"
            mm = expect_mapping(m, mat)
            check_fields(mm, mat, ("componentName", "groupByKeyPaths", "filters"))
            keys = expect_list(mm.get("groupByKeyPaths", []), f"{mat}.groupByKeyPaths")
            filters = expect_list(mm.get("filters", []), f"{mat}.filters")
            members.append(GangMemberDef(
                component=known(mm.get("componentName"), f"{mat}.componentName"),
                group_by=tuple(_jq(k, f"{mat}.groupByKeyPaths[{n}]", strict=False)
                               for n, k in enumerate(keys)),
                filters=tuple(_jq(f, f"{mat}.filters[{n}]", strict=False)
                              for n, f in enumerate(filters))))
        if not members:
            raise DescriptorError(f"{gat}.members", "needs at least one member")
        groups.append(PodGroupDef(name=expect_str(gm.get("name"), f"{gat}.name"),
                                  members=tuple(members)))
    group = None
    subs: list[SubGroupDef] = []
    topology = None
    if "podGroup" in spec:
        pat = f"{at}.podGroup"
        pm = expect_mapping(spec["podGroup"], pat)
        check_fields(pm, pat, ("name", "subGroups", "topology"))
        for i, s in enumerate(expect_list(pm.get("subGroups", []), f"{pat}.subGroups")):
            sat = f"{pat}.subGroups[{i}]"
            sm = expect_mapping(s, sat)
            check_fields(sm, sat, ("componentName", "topology"))
            subs.append(SubGroupDef(
                component=known(sm.get("componentName"), f"{sat}.componentName"),
                topology=_topology(sm["topology"], f"{sat}.topology") if "topology" in sm
                else None))
        topology = _topology(pm["topology"], f"{pat}.topology") if "topology" in pm else None
        group = PodGroupDef(name=expect_str(pm.get("name"), f"{pat}.name"),
                            members=tuple(GangMemberDef(component=s.component) for s in subs))
    return tuple(groups), group, tuple(subs), topology


def read_karta(raw: object) -> Karta:
    """Validate one Karta document; raises :class:`DescriptorError` naming the field."""
    doc = expect_mapping(raw, "")
    check_fields(doc, "", ("apiVersion", "kind", "metadata", "spec", "status"))
    if doc.get("apiVersion") != API_VERSION:
        raise DescriptorError("apiVersion", f"expected {API_VERSION}, got "
                              f"{doc.get('apiVersion')!r}")
    if doc.get("kind") != KIND:
        raise DescriptorError("kind", f"expected {KIND}, got {doc.get('kind')!r}")
    name = expect_str(expect_mapping(doc.get("metadata"), "metadata").get("name"),
                      "metadata.name")
    spec = expect_mapping(doc.get("spec"), "spec")
    check_fields(spec, "spec", ("structureDefinition", "optimizationInstructions"))
    sat = "spec.structureDefinition"
    structure = expect_mapping(spec.get("structureDefinition"), sat)
    check_fields(structure, sat, ("rootComponent", "childComponents", "additionalChildKinds"))
    root = _component(structure.get("rootComponent"), f"{sat}.rootComponent")
    if root.kind is None:
        raise DescriptorError(f"{root.at}.kind", "the root component needs a kind "
                              "{group, version, kind}")
    if root.kind[0] == "" and root.kind[2] != "Pod":
        raise DescriptorError(f"{root.at}.kind.group", "only Pod may have the core group")
    if root.owner is not None:
        raise DescriptorError(f"{root.at}.ownerRef", "the root component has no ownerRef")
    if root.status is None:
        raise DescriptorError(f"{root.at}.statusDefinition", "the root component needs a "
                              "statusDefinition")
    children = [_component(c, f"{sat}.childComponents[{i}]") for i, c in
                enumerate(expect_list(structure.get("childComponents", []),
                                      f"{sat}.childComponents"))]
    components = [root, *children]
    _check_tree(components, sat)
    extra = tuple(_gvk(k, f"{sat}.additionalChildKinds[{i}]") for i, k in enumerate(
        expect_list(structure.get("additionalChildKinds", []), f"{sat}.additionalChildKinds")))
    oat = "spec.optimizationInstructions"
    opt = expect_mapping(spec.get("optimizationInstructions", {}), oat)
    check_fields(opt, oat, ("gangScheduling",))
    groups, group, subs, topology = _gangs(opt.get("gangScheduling", {}),
                                           f"{oat}.gangScheduling",
                                           [c.name for c in components])
    return Karta(name=name, components=tuple(components), additional_kinds=extra,
                 pod_groups=groups, pod_group=group, sub_groups=subs, topology=topology)


def is_karta_document(raw: Mapping[str, Any]) -> bool:
    """Whether a parsed document claims to be a Karta (to pick it from a YAML stream)."""
    return raw.get("kind") == KIND and str(raw.get("apiVersion", "")).startswith("run.ai/")
