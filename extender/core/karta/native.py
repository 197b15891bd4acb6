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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.core.karta.compile import PHASES, gang_plan, label_names, pod_match
from extender.core.karta.jqast import (
    BinOp,
    Call,
    JqUnsupported,
    Node,
    Path,
    Pipe,
    parse_jq,
)
from extender.core.karta.jsonpath import OBJECT, Expr, Scope, Unsupported
from extender.core.karta.model import Component, Karta, Matcher, StatusDef, read_karta
from extender.core.karta.native_roles import (
    Notes,
    TranslatedRole,
    factors,
    product,
    translate_role,
)
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


def _replica_factoring(roles: list[TranslatedRole], notes: Notes, karta: Karta) -> None:
    """Per-replica gangs: split each member's pod count into replicas x pods per replica.

    Muster reads the replica count of a Karta as the greatest common divisor of the members'
    pod counts. The translation takes the factor every member's count shares (the LWS
    ``.spec.replicas // 1``); the two agree when some member's count is that factor alone.
    """
    counts = [factors(r.doc["replicas"]) for r in roles]

    def shared(f: Any, r: TranslatedRole) -> bool:
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
        r.doc["replicas"] = product(common)
        if rest:
            r.doc["podsPerReplica"] = product(rest)
    if not exact:
        notes.add("spec.optimizationInstructions.gangScheduling", "per-replica gangs: the "
                  f"replica count is the shared factor of the members' counts; Muster's reading "
                  f"of {karta.name} takes their greatest common divisor, which is larger when "
                  "the remaining factors share one too")


def _gangs(karta: Karta, roles: list[TranslatedRole], notes: Notes) -> dict[str, Any]:
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


def _status(root: Component, notes: Notes) -> dict[str, Any]:
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


def _pods(karta: Karta, workload_label: str | None, notes: Notes) -> dict[str, Any]:
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
    notes = Notes()
    policy, members, workload_label, _ = gang_plan(karta)
    pod_bearing = [c for c in karta.components if c.has_pods]
    if not pod_bearing:
        raise DescriptorError("spec.structureDefinition", "no component has a specDefinition, "
                              "so the workload has no pods to schedule")
    roles = [translate_role(c, notes, in_replica_gang=policy is GangPolicy.REPLICA
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
