"""Translate a Workload Map (Karta) descriptor into an equivalent native ``WorkloadDescriptor``.

:func:`karta_to_native` reads a Karta the way
:func:`~extender.core.karta.compile.compile_karta` does and writes the same reading in the
native format, with JSONPath instead of jq:

* each pod-bearing component is a role; one that iterates a list or map (``.spec.x[]``,
  ``.spec.x | to_entries[] | .key``) is a role per item (``forEach``), its other paths read
  in the item's scope, values that do not iterate in the object's;
* ``replicasPath`` and friends become counts (``//`` a default, ``*`` a product, ``if`` an
  ``if``), with Muster's Karta rules kept: no ``replicasPath`` means ``minReplicasPath`` when
  above 0, else 1; a component the object does not hold (no template, no replicas) is left out;
* gangs, pod matching and status are Muster's reading of the Karta (policy from the
  ``groupByKeyPaths``, labels from the selectors, status mappings in upstream's order).

What the native format cannot say, or only approximately, is returned as notes naming the
Karta field (jq with no JSONPath form, member filters, topology, ``byExpression``, fragments
with no native field...). A path the translation needs and cannot express (a template or a
count) raises :class:`~extender.core.workloads.expressions.DescriptorError` naming its field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.core.karta.compile import PHASES, gang_plan, label_names, pod_match
from extender.core.karta.jq import JqPath
from extender.core.karta.jqast import (
    Alt,
    BinOp,
    Call,
    Field,
    If,
    JqUnsupported,
    Lit,
    Node,
    Path,
    Pipe,
    parse_jq,
)
from extender.core.karta.jsonpath import (
    ITEM,
    OBJECT,
    Expr,
    Filter,
    Scope,
    Seg,
    Unsupported,
    chain,
    render,
    scope_of,
    zero_default,
)
from extender.core.karta.model import Component, Karta, Matcher, StatusDef, read_karta
from extender.core.workloads.descriptor_spec import API_VERSION, KIND, GangPolicy
from extender.core.workloads.expressions import DescriptorError

__all__ = ["Translation", "karta_to_native", "translate"]


@dataclass(frozen=True)
class Translation:
    name: str
    document: dict[str, Any]
    """The native ``WorkloadDescriptor`` document."""
    notes: tuple[str, ...] = ()
    """``field.path: what`` for each part that is not translated exactly."""


# ---------------------------------------------------------------- the document


@dataclass
class _Notes:
    lines: list[str] = field(default_factory=list)

    def add(self, at: str, message: str) -> None:
        text = f"{at}: {message}" if at else message
        if text not in self.lines:
            self.lines.append(text)


def _tree(path: JqPath | None, at: str) -> Node | None:
    if path is None:
        return None
    try:
        return parse_jq(path.text)
    except JqUnsupported as err:
        raise _UnsupportedAt(at, f"the jq program {path.text!r} uses {err}") from err


class _UnsupportedAt(Exception):
    def __init__(self, at: str, message: str) -> None:
        super().__init__(message)
        self.at = at
        self.message = message


_FRAGMENT_DROPPED = {
    "schedulerNamePath": "schedulerName", "priorityClassNamePath": "priorityClassName",
    "resourceClaimsPath": "resourceClaims", "labelsPath": "labels",
    "annotationsPath": "annotations",
}


def _fields(c: Component) -> dict[str, tuple[str, JqPath]]:
    """Scheduling paths of a component: key -> (Karta field path, program)."""
    sat, cat = f"{c.at}.specDefinition", f"{c.at}.scaleDefinition"
    out: dict[str, tuple[str, JqPath]] = {}
    for key, path, at in (("template", c.template, f"{sat}.podTemplateSpecPath"),
                          ("podSpec", c.pod_spec, f"{sat}.podSpecPath"),
                          ("metadata", c.metadata, f"{sat}.metadataPath"),
                          ("replicas", c.replicas, f"{cat}.replicasPath"),
                          ("min", c.min_replicas, f"{cat}.minReplicasPath"),
                          ("id", c.instance_id, f"{c.at}.instanceIdPath")):
        if path is not None:
            out[key] = (at, path)
    for key, path in c.fragments:
        if key != "imagePath":  # Muster never needs the image, in either format
            out[key] = (f"{sat}.fragmentedPodSpecDefinition.{key}", path)
    return out


def _nullable(node: Node) -> bool:
    """Whether jq may give null (the component is then absent from the object)."""
    if isinstance(node, Alt):
        return _nullable(node.right)
    if isinstance(node, Lit):
        return node.value is None
    if isinstance(node, If):
        return _nullable(node.then) or _nullable(node.orelse)
    if isinstance(node, BinOp):
        return False  # arithmetic on null fails, or (for +) gives the other side
    return not (isinstance(node, Pipe) and node.right == Call("tonumber"))


def _factors(count: Any) -> list[Any]:
    if isinstance(count, dict) and set(count) == {"product"}:
        return [f for part in count["product"] for f in _factors(part)]
    return [count]


def _product(factors: list[Any]) -> Any:
    if not factors:
        return 1
    return factors[0] if len(factors) == 1 else {"product": factors}


@dataclass
class _Role:
    component: Component
    doc: dict[str, Any]
    dynamic: bool


def _role(c: Component, notes: _Notes, *, in_replica_gang: bool) -> _Role:
    fields = _fields(c)
    trees: dict[str, Node] = {}
    for key, (at, path) in fields.items():
        try:
            tree = _tree(path, at)
        except _UnsupportedAt as err:
            if key in ("template", "podSpec", "metadata", "replicas", "id", "containersPath",
                       "containerPath"):
                raise DescriptorError(err.at, f"cannot translate: {err.message}") from None
            notes.add(err.at, f"not translated: {err.message}")
            continue
        if tree is not None:
            trees[key] = tree
    scope = scope_of(c, trees)
    expr = Expr(scope)
    doc: dict[str, Any] = {}
    if scope.base is not None:
        doc["forEach"] = "$" + render(scope.base) + "[*]"
        if any(isinstance(s, Filter) for s in scope.base):
            raise DescriptorError(c.at, "cannot translate: a role iterating a filtered list")
        notes.add(f"{c.at}", f"jq's '[]' fails when {'$' + render(scope.base)} is absent "
                  "(the Karta then does not resolve); the translation's forEach selects no "
                  "items and leaves the role out")

    def ref(key: str) -> Any:
        at, _ = fields[key]
        try:
            steps = chain(trees[key])
            jsonpath, where = scope.ref(steps)
        except Unsupported as err:
            raise DescriptorError(at, f"cannot translate: {fields[key][1].text!r}: {err}"
                                  ) from None
        return jsonpath if where == ITEM else {"path": jsonpath, "scope": OBJECT}

    def count(key: str, *, essential: bool = True) -> Any:
        at, path = fields[key]
        try:
            return expr.count(trees[key])
        except Unsupported as err:
            if essential:
                raise DescriptorError(at, f"cannot translate: {path.text!r}: {err}") from None
            notes.add(at, f"not translated: {path.text!r}: {err}")
            return None

    # The name: a literal, the item's map key, or its instance id.
    dynamic = scope.base is not None or "id" in trees
    if scope.keys:
        doc["name"] = {"key": True}
    elif "id" in trees:
        target = ref("id")
        doc["name"] = {**(target if isinstance(target, dict) else {"path": target}),
                       "default": c.name}
    elif scope.base is not None:
        doc["name"] = {"key": True}
        notes.add(c.at, f"several instances without instanceIdPath: roles are named by "
                  f"position (0, 1, ...) instead of {c.name}-0, {c.name}-1, ...")
    else:
        doc["name"] = c.name

    # Template.
    template: dict[str, Any] = {}
    for key, native in (("template", "podTemplate"), ("podSpec", "podSpec"),
                        ("metadata", "metadata")):
        if key in trees:
            template[native] = ref(key)
    containers = [ref(k) for k in ("containersPath", "containerPath") if k in trees]
    if containers:
        template["containers"] = containers
    if "resourcesPath" in trees:
        template["resources"] = ref("resourcesPath")
    affinity = _affinity(c, fields, trees, scope, notes)
    if affinity is not None:
        template["affinity"] = affinity
    for key, native in _FRAGMENT_DROPPED.items():
        if key in fields:
            notes.add(fields[key][0], f"not translated: a WorkloadDescriptor template has no "
                      f"{native} field (the Karta sets it on the pod; Muster's counts do not "
                      "use it)")
    doc["template"] = template

    # Counts, with Muster's Karta rules.
    if "replicas" in trees:
        replicas = count("replicas")
        if _nullable(trees["replicas"]) and isinstance(replicas, dict) and \
                "default" not in replicas and "path" in replicas:
            replicas = {**replicas, "default": 0}
    elif "min" in trees:
        minimum = count("min", essential=False)
        replicas = 1 if minimum is None else {"max": [1, zero_default(minimum)
                                                      if not isinstance(minimum, dict) else
                                                      {**minimum, "default": 1}
                                                      if set(minimum) <= {"path", "scope"}
                                                      else minimum]}
    else:
        replicas = 1
    doc["replicas"] = replicas
    if "replicas" in trees and "min" in trees and not in_replica_gang:
        minimum = count("min", essential=False)
        gt0 = _greater_than_zero(minimum)
        if minimum is not None and gt0 is None:
            notes.add(fields["min"][0], "not translated: the elastic minimum is not a path; "
                      "the gang needs every replica")
        elif minimum is not None and gt0 is not None:
            doc["minReplicas"] = {"if": gt0, "then": minimum, "else": replicas}
    when = _presence(fields, trees, expr, ref)
    if when is not None:
        doc["when"] = when
    return _Role(component=c, doc=doc, dynamic=dynamic)


def _greater_than_zero(count: Any) -> dict[str, Any] | None:
    if isinstance(count, dict) and set(count) <= {"path", "scope"}:
        return {**count, "greaterThan": 0}
    return None


def _presence(fields: Mapping[str, tuple[str, JqPath]], trees: Mapping[str, Node], expr: Expr,
              ref: Callable[[str], Any]) -> dict[str, Any] | None:
    """Muster leaves a component out when it has neither a template nor a replica count."""
    if "replicas" in trees and not _nullable(trees["replicas"]):
        return None
    tests: list[dict[str, Any]] = []
    for key in trees:
        if key in ("min", "id", "replicas"):
            continue
        target = ref(key)
        tests.append({**(target if isinstance(target, dict) else {"path": target}),
                      "exists": True})
    if "replicas" in trees:
        try:
            replicas = expr.count(trees["replicas"])
        except Unsupported:
            return None
        if isinstance(replicas, dict) and set(replicas) <= {"path", "scope"}:
            tests.append({**replicas, "exists": True})
        else:
            return None
    if not tests:
        return None
    del fields
    return tests[0] if len(tests) == 1 else {"any": tests}


def _affinity(c: Component, fields: Mapping[str, tuple[str, JqPath]], trees: Mapping[str, Node],
              scope: Scope, notes: _Notes) -> Any:
    keys = [k for k in ("podAffinityPath", "nodeAffinityPath") if k in trees]
    if not keys:
        return None
    parents: set[tuple[Seg, ...] | None] = set()
    for key in keys:
        steps = chain(trees[key]) if isinstance(trees[key], Path | Pipe) else ()
        want = Field("podAffinity" if key == "podAffinityPath" else "nodeAffinity")
        if not steps or steps[-1] != want:
            parents.add(None)
        else:
            parents.add(steps[:-1])
    if len(parents) != 1 or None in parents:
        for key in keys:
            notes.add(fields[key][0], "not translated: a WorkloadDescriptor takes the whole "
                      "affinity from one path, and this one is not '<affinity>.podAffinity' / "
                      "'<affinity>.nodeAffinity'")
        return None
    [parent] = parents
    assert parent is not None
    try:
        jsonpath, where = scope.ref(parent)
    except Unsupported as err:
        notes.add(fields[keys[0]][0], f"not translated: {err}")
        return None
    notes.add(fields[keys[0]][0], f"podAffinityPath/nodeAffinityPath become 'affinity: "
              f"{jsonpath}', which also carries podAntiAffinity (the Karta leaves it out)")
    del c
    return jsonpath if where == ITEM else {"path": jsonpath, "scope": OBJECT}


def _replica_factoring(roles: list[_Role], notes: _Notes, karta: Karta) -> None:
    """Per-replica gangs: split each member's pod count into replicas x pods per replica.

    Muster reads the replica count of a Karta as the greatest common divisor of the members'
    pod counts. The translation takes the factor every member's count shares (the LWS
    ``.spec.replicas // 1``); the two agree when some member's count is that factor alone.
    """
    counts = [_factors(r.doc["replicas"]) for r in roles]

    def shared(f: Any, r: _Role) -> bool:
        # A factor read per item differs between the roles one component generates.
        return "forEach" not in r.doc or not isinstance(f, dict) or f.get("scope") == OBJECT

    common = [f for f in counts[0] if shared(f, roles[0])
              and all(f in fs and shared(f, r) for r, fs in zip(roles[1:], counts[1:],
                                                                strict=True))]
    if not common:
        notes.add("spec.optimizationInstructions.gangScheduling", "per-replica gangs: the "
                  "members' counts share no factor, so each member's pods are one replica "
                  "(Muster's reading of the Karta takes the greatest common divisor)")
        for r in roles:
            r.doc["podsPerReplica"] = r.doc.pop("replicas")
            r.doc["replicas"] = 1
        return
    exact = any(len(fs) == len(common) and "forEach" not in r.doc
                for r, fs in zip(roles, counts, strict=True))
    for r, fs in zip(roles, counts, strict=True):
        rest = list(fs)
        for f in common:
            rest.remove(f)
        r.doc["replicas"] = _product(common)
        if rest:
            r.doc["podsPerReplica"] = _product(rest)
    if not exact:
        notes.add("spec.optimizationInstructions.gangScheduling", "per-replica gangs: the "
                  f"replica count is the shared factor of the members' counts; Muster's reading "
                  f"of {karta.name} takes their greatest common divisor, which is larger when "
                  "the remaining factors share one too")


def _gangs(karta: Karta, roles: list[_Role], notes: _Notes) -> dict[str, Any]:
    policy, members, _, plan_notes = gang_plan(karta)
    gat = "spec.optimizationInstructions.gangScheduling"
    for note in plan_notes:
        notes.add(gat, note)
    for i, group in enumerate(karta.pod_groups):
        for j, m in enumerate(group.members):
            mat = f"{gat}.podGroups[{i}].members[{j}]"
            for n, f in enumerate(m.filters):
                notes.add(f"{mat}.filters[{n}]", f"not translated: member filter {f.text!r} "
                          "(jq on the pod) has no native form; the role stays in its gang")
            for n, key in enumerate(m.group_by):
                labels = label_names(key)
                plain = [f'.metadata.labels["{label}"]' for label in labels]
                if key.text not in plain:
                    what = (f"label {', '.join(labels)}" if labels else "no pod label (so one "
                            "gang for the workload)")
                    notes.add(f"{mat}.groupByKeyPaths[{n}]", f"{key.text!r} is read as "
                              f"grouping by {what}; the rest of the jq is not kept")
    if policy is GangPolicy.NONE:
        return {"policy": "none"}
    out: dict[str, Any] = {"policy": str(policy)}
    inside = [r for r in roles if r.component.name in members]
    if len(inside) < len(roles):
        if any(r.dynamic for r in inside):
            notes.add(gat, "the gang members have generated role names, so the translation "
                      "cannot list them in gangs.roles; every role joins the gangs")
        else:
            out["roles"] = [r.doc["name"] for r in inside]
    return out


def _status(root: Component, notes: _Notes) -> dict[str, Any]:
    status = root.status
    assert status is not None
    sat = f"{root.at}.statusDefinition"
    expr = Expr(Scope())
    out: dict[str, Any] = {}
    if status.conditions is not None:
        try:
            out["conditions"] = expr.path(parse_jq(status.conditions.text), relative=False)[
                "path"]
        except (JqUnsupported, Unsupported) as err:
            notes.add(f"{sat}.conditionsDefinition.path", f"not translated: {err}")
    if status.phase is not None:
        try:
            out["phase"] = expr.path(parse_jq(status.phase.text), relative=False)["path"]
        except (JqUnsupported, Unsupported) as err:
            notes.add(f"{sat}.phaseDefinition.path", f"not translated: {err}")
    rules = []
    for key, matchers in status.mappings:
        for i, m in enumerate(matchers):
            at = f"{sat}.statusMappings.{key}[{i}]"
            try:
                rules.append({"phase": PHASES[key].value,
                              "when": _matcher(status, m, expr, out)})
            except Unsupported as err:
                notes.add(at, f"not translated, so this status mapping is left out: {err}")
    out["rules"] = rules
    out["default"] = "Undefined"
    return out


def _matcher(status: StatusDef, m: Matcher, expr: Expr, out: Mapping[str, Any]
             ) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if m.by_phase is not None:
        if "phase" not in out:
            raise Unsupported("byPhase without a translated phase path")
        parts.append({"phase": m.by_phase})
    if m.by_conditions:
        if "conditions" not in out:
            raise Unsupported("byConditions without a translated conditions path")
        if (status.type_field, status.status_field, status.reason_field) != (
                "type", "status", "reason"):
            raise Unsupported("conditions with their own field names (a WorkloadDescriptor "
                               "reads type, status and reason)")
        for ctype, cstatus, reason in m.by_conditions:
            if cstatus is None:
                options = [{"condition": ctype, "status": s} for s in ("True", "False",
                                                                        "Unknown")]
                if reason is not None:
                    options = [{**o, "reason": reason} for o in options]
                parts.append({"any": options})
                continue
            if cstatus not in ("True", "False", "Unknown"):
                raise Unsupported(f"condition status {cstatus!r} (a WorkloadDescriptor tests "
                                   "True, False or Unknown)")
            test: dict[str, Any] = {"condition": ctype, "status": cstatus}
            if reason is not None:
                test["reason"] = reason
            parts.append(test)
    if m.by_expression is not None:
        program, expected = m.by_expression
        try:
            tree = parse_jq(program.text)
        except JqUnsupported as err:
            raise Unsupported(f"byExpression {program.text!r} uses {err}") from None
        try:
            if expected == "true":
                parts.append(expr.cond(tree))
            elif expected == "false" and _boolean(tree):
                parts.append({"not": expr.cond(tree)})
            elif isinstance(tree, Path | Pipe):
                parts.append({**expr.path(tree, relative=False), "equals": expected})
            else:
                raise Unsupported(f"expectedResult {expected!r}")
        except Unsupported as err:
            raise Unsupported(f"byExpression {program.text!r}: {err}") from None
    return parts[0] if len(parts) == 1 else {"all": parts}


def _boolean(node: Node) -> bool:
    return (isinstance(node, BinOp) and node.op in ("and", "or", "==", "!=", "<", "<=", ">",
                                                      ">=")) or (
        isinstance(node, Pipe) and node.right == Call("not"))


def _pods(karta: Karta, workload_label: str | None, notes: _Notes) -> dict[str, Any]:
    extra: list[str] = []
    match = pod_match(karta, workload_label, extra)
    for note in extra:
        notes.add("spec.structureDefinition", note)
    out: dict[str, Any] = {}
    if match.owners:
        out["owners"] = list(match.owners)
    if match.workload_label:
        out["workloadLabel"] = match.workload_label
    role: dict[str, Any] = {}
    if match.role_labels:
        role["labels"] = list(match.role_labels)
    if match.role_map:
        role["map"] = dict(match.role_map)
    if match.role_default:
        role["default"] = match.role_default
    if role:
        out["role"] = role
    if match.replica_label:
        out["replica"] = {"label": match.replica_label}
    return out


def translate(karta: Karta) -> Translation:
    """The native descriptor equivalent to Muster's reading of ``karta``, with notes."""
    notes = _Notes()
    policy, members, workload_label, _ = gang_plan(karta)
    pod_bearing = [c for c in karta.components if c.has_pods]
    if not pod_bearing:
        raise DescriptorError("spec.structureDefinition", "no component has a specDefinition, "
                              "so the workload has no pods to schedule")
    roles = [_role(c, notes, in_replica_gang=policy is GangPolicy.REPLICA
                   and c.name in members) for c in pod_bearing]
    if policy is GangPolicy.REPLICA:
        _replica_factoring([r for r in roles if r.component.name in members], notes, karta)
    if karta.pod_group is not None:
        notes.add("spec.optimizationInstructions.gangScheduling.podGroup", "read as one gang "
                  "of its subgroups' components; subgroup minimums are not kept")
    assert karta.root.kind is not None
    group, version, kind = karta.root.kind
    gangs = _gangs(karta, roles, notes)
    spec: dict[str, Any] = {
        "description": f"Translated from the Workload Map (Karta) descriptor {karta.name} by "
                       "muster descriptors import-karta.",
        "target": {"group": group, "kind": kind, "versions": [version],
                   "plural": kind.lower() + "s"},
        "roles": [r.doc for r in roles],
        "gangs": gangs,
        "pods": _pods(karta, workload_label, notes),
        "status": _status(karta.root, notes),
    }
    document = {"apiVersion": API_VERSION, "kind": KIND,
                "metadata": {"name": karta.name,
                             "annotations": {"muster.dev/translated-from": f"Karta/{karta.name}"}},
                "spec": spec}
    return Translation(name=karta.name, document=document, notes=tuple(notes.lines))


def karta_to_native(raw: object) -> Translation:
    """Validate a Karta document and translate it; raises :class:`DescriptorError`."""
    return translate(read_karta(raw))
