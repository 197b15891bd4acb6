"""Read Workload Map (Karta) descriptors into Muster's compiled :class:`Descriptor`.

:func:`compile_karta` validates a ``run.ai/v1alpha1 Karta`` (see :mod:`karta_model`) and builds
a descriptor whose roles are the pod-bearing components, one role per *instance*: a component
whose jq paths output several values (``.spec.replicatedJobs[].name``) has one instance per
value, paired by position as upstream zips them. A role's pods are its component's scale
(``replicasPath``; without one, ``minReplicasPath`` when above 0, else 1), its elastic minimum
``minReplicasPath`` when above 0. Gangs come from ``optimizationInstructions.gangScheduling``:
the ``groupByKeyPaths`` of ``podGroups`` are pod labels, so they are read for what they group
by: a component-instance label cuts one gang per role, a replica label one gang per replica
index, any other label (the workload's name) one gang for the workload. Member ``filters`` run
on each role's pod template. ``podGroup`` (v0.2) makes one gang of its ``subGroups``.
Status mappings become status rules in upstream's evaluation order; both enum variants
(``initializing`` and ``pending``/``progressing``) are read.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from extender.core.karta.jq import JqPath, compile_jq
from extender.core.karta.model import (
    Component,
    Karta,
    Matcher,
    StatusDef,
    is_karta_document,
    read_karta,
)
from extender.core.model.values import Phase
from extender.core.workloads.descriptor import (
    Descriptor,
    GangPolicy,
    GangSpec,
    PodMatch,
    RoleSpec,
    StatusRule,
    StatusSpec,
    Target,
    TemplateSpec,
    compile_descriptor,
)
from extender.core.workloads.expressions import (
    ITEM,
    OBJECT,
    Condition,
    Count,
    DescriptorError,
    Name,
    PathRef,
    WorkloadError,
)
from extender.core.workloads.paths import compile_path
from extender.core.workloads.topology import TopologyRule, bad_label_key

__all__ = ["PHASES", "KartaInstances", "as_count", "compile_any", "compile_karta",
           "descriptor_of", "gang_plan", "instances", "label_names", "pod_match"]

#: Status mapping keys -> Muster phases. Muster has no Suspending/Resuming/Pending/Progressing
#: phase; each maps to the phase a scheduler treats alike.
PHASES = {
    "initializing": Phase.INITIALIZING, "pending": Phase.INITIALIZING,
    "progressing": Phase.INITIALIZING, "resuming": Phase.INITIALIZING,
    "running": Phase.RUNNING, "completed": Phase.COMPLETED, "failed": Phase.FAILED,
    "degraded": Phase.DEGRADED, "suspended": Phase.SUSPENDED, "suspending": Phase.SUSPENDED,
}

_LABEL = re.compile(r"""labels\s*\[\s*"([^"]+)"\s*\]|labels\.([A-Za-z_][A-Za-z0-9_]*)""")


def label_names(path: JqPath | None) -> tuple[str, ...]:
    """The pod label keys a jq selector reads (``.metadata.labels["ray.io/group"]``)."""
    if path is None:
        return ()
    return tuple(a or b for a, b in _LABEL.findall(path.text))


def as_count(value: object, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise WorkloadError(f"{where}: expected an integer, got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise WorkloadError(f"{where}: expected an integer, got {value!r}")


def _column(path: JqPath | None, obj: object) -> list[object] | None:
    return None if path is None else path.outputs(obj)


def _at(column: list[object] | None, i: int) -> object:
    if not column:
        return None
    if len(column) == 1:
        return column[0]  # one value shared by every instance (a scalar path)
    return column[i] if i < len(column) else None


class KartaInstances:
    """The instances of one pod-bearing component, as a ``ValuePath`` over the workload.

    ``find`` returns one mapping per instance: ``name``, ``podTemplate``, ``resources``,
    ``replicas``, ``perReplica``, ``minReplicas`` and ``gang``; roles read them with item
    paths. ``replica_peers`` are the gang's components when gangs are cut per replica index.
    A Karta never states how many replicas there are (the index is a pod label), so it is
    taken as the greatest common divisor of the peers' pod counts: an LWS of ``R`` groups has
    ``R`` leaders and ``R x (size - 1)`` workers, so ``R``; a one-replica Grove set gets 1.
    """

    __slots__ = ("component", "filters", "in_gang", "replica_peers", "text")

    def __init__(self, component: Component, *, in_gang: bool, filters: tuple[JqPath, ...],
                 replica_peers: tuple[Component, ...] = ()) -> None:
        self.component = component
        self.in_gang = in_gang
        self.filters = filters
        self.replica_peers = replica_peers
        self.text = f"instances of component {component.name!r} ({component.at})"

    def find(self, obj: object) -> list[object]:
        return [v for _, v in self.find_with_keys(obj)]

    def find_with_keys(self, obj: object) -> list[tuple[str, object]]:
        rows = instances(self.component, obj)
        groups = 0
        if self.replica_peers:
            counts = [r["pods"] for peer in self.replica_peers for r in instances(peer, obj)]
            groups = math.gcd(*(c for c in counts if c > 0))
        out: list[tuple[str, object]] = []
        for row in rows:
            pods = row["pods"]
            if groups:
                row["replicas"], row["perReplica"] = groups, -(-pods // groups)
                row["minReplicas"] = groups
            else:
                row["replicas"], row["perReplica"] = pods, 1
            pod = row["podTemplate"]
            row["gang"] = self.in_gang and all(
                (f.find(pod) or [False])[0] is True for f in self.filters)
            out.append((str(row["name"]), row))
        return out


def _pod_template(c: Component, cols: Mapping[str, list[object] | None],
                  i: int) -> dict[str, Any]:
    whole = _at(cols["template"], i)
    if isinstance(whole, Mapping):
        return dict(whole)
    if c.pod_spec is not None:
        inner = _at(cols["podSpec"], i)
        meta = _at(cols["metadata"], i)
        return {"metadata": dict(meta) if isinstance(meta, Mapping) else {},
                "spec": dict(inner) if isinstance(inner, Mapping) else {}}
    frag = {k: _at(cols[k], i) for k, _ in c.fragments}
    spec: dict[str, Any] = {}
    containers: list[Any] = []
    listed = frag.get("containersPath")
    if isinstance(listed, list):
        containers.extend(x for x in listed if isinstance(x, Mapping))
    one = frag.get("containerPath")
    if isinstance(one, Mapping):
        containers.append(dict(one))
    spec["containers"] = containers
    for key, field in (("schedulerNamePath", "schedulerName"),
                       ("priorityClassNamePath", "priorityClassName"),
                       ("resourceClaimsPath", "resourceClaims")):
        if frag.get(key) is not None:
            spec[field] = frag[key]
    affinity = {name: frag[key] for key, name in (("podAffinityPath", "podAffinity"),
                                                  ("nodeAffinityPath", "nodeAffinity"))
                if isinstance(frag.get(key), Mapping)}
    if affinity:
        spec["affinity"] = affinity
    meta = {name: dict(v) for key, name in (("labelsPath", "labels"),
                                             ("annotationsPath", "annotations"))
            if isinstance(v := frag.get(key), Mapping)}
    return {"metadata": meta, "spec": spec}


def instances(c: Component, obj: object) -> list[dict[str, Any]]:
    """Every instance of a pod-bearing component in ``obj``, zipped by position."""
    cols: dict[str, list[object] | None] = {
        "template": _column(c.template, obj), "podSpec": _column(c.pod_spec, obj),
        "metadata": _column(c.metadata, obj), "replicas": _column(c.replicas, obj),
        "min": _column(c.min_replicas, obj),
        **{k: _column(p, obj) for k, p in c.fragments},
    }
    ids = _column(c.instance_id, obj)
    count = len(ids) if ids is not None else max((len(v) for v in cols.values() if v), default=1)
    out = []
    for i in range(count):
        defined = [_at(cols[k], i) for k in ("template", "podSpec", "metadata",
                                             *(k for k, _ in c.fragments))]
        replicas = as_count(_at(cols["replicas"], i), c.replicas.text if c.replicas else "")
        if all(v is None for v in defined) and replicas is None:
            continue  # the object does not hold this component (a KServe transformer unset)
        minimum = as_count(_at(cols["min"], i), c.min_replicas.text if c.min_replicas else "")
        if c.replicas is None:
            pods = minimum if minimum is not None and minimum > 0 else 1
        else:
            pods = max(0, replicas or 0)
        name = (str(ids[i]) if ids is not None and ids[i] is not None
                else c.name if count == 1 else f"{c.name}-{i}")
        resources = _at(cols.get("resourcesPath"), i)
        out.append({
            "name": name, "pods": pods,
            "minReplicas": min(pods, minimum) if minimum is not None and minimum > 0 else pods,
            "podTemplate": _pod_template(c, cols, i),
            "resources": dict(resources) if isinstance(resources, Mapping) else None,
        })
    return out


# ---------------------------------------------------------------- gangs


def gang_plan(karta: Karta) -> tuple[GangPolicy, dict[str, tuple[JqPath, ...]], str | None,
                                     list[str]]:
    """How the Karta's gang instructions cut a workload: the policy, the pod-bearing
    components in gangs (with their member filters), the workload label, and notes."""
    notes: list[str] = []
    members: dict[str, tuple[JqPath, ...]] = {}
    if karta.pod_group is not None and not karta.pod_groups:
        subs = karta.sub_groups or ()
        roots = [s.component for s in subs] or [karta.root.name]
        for name in roots:
            for c in karta.subtree(name):
                if c.has_pods:
                    members[c.name] = ()
        if karta.topology is not None:
            notes.append(f"podGroup topology: the gang keeps to one {karta.topology[1]} domain "
                         f"(requiredTopologyLevel, a node label of KAI Topology "
                         f"{karta.topology[0]}); the finer preferredTopologyLevel "
                         f"{karta.topology[2]} is not weighed")
        if any(s.topology for s in subs):
            notes.append("subGroups topology is per subgroup; Muster keeps a whole gang to "
                         "one domain or none, so it keeps to none for them")
        return GangPolicy.WORKLOAD, members, None, notes
    if not karta.pod_groups:
        return GangPolicy.NONE, members, None, notes
    if karta.pod_group is not None:
        notes.append("both podGroups and podGroup are set; podGroups is read, as upstream's "
                     "summary does")
    if len(karta.pod_groups) > 1:
        notes.append(f"{len(karta.pod_groups)} podGroups: Muster cuts gangs by the first "
                     "group's keys and puts every member in them")
    instance_labels: set[str] = set()
    replica_labels: set[str] = set()
    keys: list[str] = []
    for group in karta.pod_groups:
        for m in group.members:
            tree = karta.subtree(m.component) + karta.ancestors(m.component)
            for c in tree:
                instance_labels.update(label_names(c.instance_selector))
                replica_labels.update(label_names(c.replica_key))
            for c in karta.subtree(m.component):
                if c.has_pods:
                    members[c.name] = members.get(c.name, ()) + m.filters
            if group is karta.pod_groups[0]:
                keys.extend(k for path in m.group_by for k in label_names(path))
    by_instance = any(k in instance_labels for k in keys)
    by_replica = any(k in replica_labels for k in keys)
    workload_label = next((k for k in keys if k not in instance_labels | replica_labels), None)
    if by_instance and by_replica:
        notes.append("gangs keyed by both instance and replica labels are cut per instance")
    if by_instance:
        return GangPolicy.ROLE, members, workload_label, notes
    if by_replica:
        return GangPolicy.REPLICA, members, workload_label, notes
    return GangPolicy.WORKLOAD, members, workload_label, notes


# ---------------------------------------------------------------- status


def _lit(text: str) -> str:
    return json.dumps(text)


def _conditions_program(status: StatusDef, conds: tuple[tuple[str, str | None, str | None],
                                                        ...]) -> str:
    assert status.conditions is not None
    tests = []
    for ctype, cstatus, reason in conds:
        parts = [f".[{_lit(status.type_field)}] == {_lit(ctype)}"]
        if cstatus is not None:
            parts.append(f"(.[{_lit(status.status_field)}] | tostring) == {_lit(cstatus)}")
        if reason is not None:
            parts.append(f".[{_lit(status.reason_field)}] == {_lit(reason)}")
        tests.append(f"($c | any(.[]; {' and '.join(parts)}))")
    return f"[({status.conditions.text})[]? | objects] as $c | {' and '.join(tests)}"


def _is_true(program: str) -> Condition:
    return Condition(kind="equals", ref=PathRef((compile_jq(program, strict=False),), OBJECT),
                     expected=True)


def _matcher(status: StatusDef, m: Matcher, at: str) -> Condition:
    parts: list[Condition] = []
    if m.by_phase is not None:
        if status.phase is None:
            raise DescriptorError(f"{at}.byPhase", "byPhase needs "
                                  "statusDefinition.phaseDefinition.path")
        parts.append(Condition(kind="phase", expected=(m.by_phase.lower(),)))
    if m.by_conditions:
        if status.conditions is None:
            raise DescriptorError(f"{at}.byConditions", "byConditions needs "
                                  "statusDefinition.conditionsDefinition.path")
        parts.append(_is_true(_conditions_program(status, m.by_conditions)))
    if m.by_expression is not None:
        expr, expected = m.by_expression
        parts.append(_is_true(f"[({expr.text}) | tostring][0] == {_lit(expected)}"))
    return parts[0] if len(parts) == 1 else Condition(kind="all", parts=tuple(parts))


def _status(root: Component) -> StatusSpec:
    status = root.status
    assert status is not None
    rules: list[StatusRule] = []
    for key, matchers in status.mappings:
        at = f"{root.at}.statusDefinition.statusMappings.{key}"
        rules.extend(StatusRule(phase=PHASES[key], when=_matcher(status, m, f"{at}[{i}]"))
                     for i, m in enumerate(matchers))
    return StatusSpec(
        phase_field=(PathRef((status.phase,), OBJECT) if status.phase is not None else None),
        rules=tuple(rules))


# ---------------------------------------------------------------- pods


def pod_match(karta: Karta, workload_label: str | None, notes: list[str]) -> PodMatch:
    """How pods are tied to the workload, role and replica, from the Karta's selectors."""
    root_kind = karta.root.kind
    owners = sorted({c.kind[2] for c in karta.components[1:] if c.kind and c.kind != root_kind
                     and c.kind[2] != "Pod"} | {k[2] for k in karta.additional_kinds})
    role_labels: list[str] = []
    mapping: dict[str, str] = {}
    clashes: set[str] = set()
    presence: list[str] = []
    for c in karta.components:
        if not c.has_pods:
            continue
        for label in label_names(c.instance_selector):
            if label not in role_labels:
                role_labels.insert(0, label)
        pairs = [(k, c.type_value) for k in label_names(c.type_key)] + list(c.match_labels)
        if c.type_key is not None and c.type_value is None:
            presence.append(c.name)
        for label, value in pairs:
            if value is None:
                continue
            if label not in role_labels:
                role_labels.append(label)
            if value in mapping and mapping[value] != c.name:
                clashes.add(value)
            mapping[value] = c.name
    for value in clashes:
        del mapping[value]
        notes.append(f"selector value {value!r} names two components; pods with it get no role")
    replica = next((label for c in karta.components for label in label_names(c.replica_key)),
                   None)
    return PodMatch(owners=tuple(owners), workload_label=workload_label,
                    role_labels=tuple(role_labels),
                    role_map=tuple(sorted(mapping.items())),
                    role_default=presence[0] if len(presence) == 1 else None,
                    replica_label=replica)


# ---------------------------------------------------------------- the descriptor

_ITEM = {key: PathRef((compile_path(f"$.{key}"),), ITEM)
         for key in ("name", "replicas", "perReplica", "minReplicas", "podTemplate",
                     "resources", "gang")}


def _role(c: Component, source: KartaInstances) -> RoleSpec:
    return RoleSpec(
        name=Name(ref=_ITEM["name"]),
        for_each=PathRef((source,), OBJECT),
        replicas=Count(ref=_ITEM["replicas"]),
        pods_per_replica=Count(ref=_ITEM["perReplica"]),
        min_replicas=Count(ref=_ITEM["minReplicas"]),
        template=TemplateSpec(pod_template=_ITEM["podTemplate"], resources=_ITEM["resources"]),
        in_gang=Condition(kind="equals", ref=_ITEM["gang"], expected=True),
    )


def compile_karta(raw: object, *, source: str = "") -> Descriptor:
    """Validate a Karta document and read it as a :class:`Descriptor` (``format="karta"``).

    Raises :class:`DescriptorError` naming the field (``spec.structureDefinition...``).
    """
    karta = read_karta(raw)
    return descriptor_of(karta, source=source)


def _topology_rules(karta: Karta, policy: GangPolicy) -> tuple[TopologyRule, ...]:
    """KAI's podGroup topology as a required domain: its level is a node label key."""
    if karta.topology is None or karta.pod_groups or policy is GangPolicy.NONE:
        return ()
    level = karta.topology[1]
    why = bad_label_key(level)
    if why is not None:
        raise DescriptorError("spec.optimizationInstructions.gangScheduling.podGroup.topology"
                              ".requiredTopologyLevel", why)
    return (TopologyRule(required=True, literal=level),)


def descriptor_of(karta: Karta, *, source: str = "") -> Descriptor:
    policy, members, workload_label, notes = gang_plan(karta)
    pod_bearing = [c for c in karta.components if c.has_pods]
    if not pod_bearing:
        raise DescriptorError("spec.structureDefinition", "no component has a specDefinition, "
                              "so the workload has no pods to schedule")
    peers = tuple(c for c in pod_bearing if c.name in members) \
        if policy is GangPolicy.REPLICA else ()
    roles = tuple(_role(c, KartaInstances(c, in_gang=c.name in members,
                                          filters=members.get(c.name, ()),
                                          replica_peers=peers if c.name in members else ()))
                  for c in pod_bearing)
    pods = pod_match(karta, workload_label, notes)
    assert karta.root.kind is not None
    group, version, kind = karta.root.kind
    return Descriptor(
        name=karta.name,
        target=Target(group=group, kind=kind, versions=(version,), plural=kind.lower() + "s"),
        roles=roles,
        gangs=GangSpec(policy=policy, topology=_topology_rules(karta, policy)),
        pods=pods,
        status=_status(karta.root),
        description=f"Workload Map descriptor {karta.name}, read from a Karta",
        format="karta",
        source=source,
        notes=tuple(notes),
    )


def compile_any(doc: object, *, source: str = "") -> Descriptor:
    """A WorkloadDescriptor or a Karta document -> a descriptor (its ``format`` says which).

    Raises :class:`DescriptorError` naming the field.
    """
    if isinstance(doc, Mapping) and is_karta_document(doc):
        return compile_karta(dict(doc), source=source)
    return compile_descriptor(doc)
