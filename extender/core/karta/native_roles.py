"""Translate one Karta component into a native ``WorkloadDescriptor`` role: its name,
counts (``//`` a default, ``*`` a product, ``if`` an ``if``), template paths and affinity,
read in the item's scope when the component iterates a list or map.

One component at a time: gangs, pod matching and status, which read the whole Karta, are
:mod:`~extender.core.karta.native`'s. What cannot be said natively is added to the
:class:`Notes`, naming the Karta field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

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
from extender.core.karta.model import Component
from extender.core.workloads.expressions import DescriptorError


@dataclass
class Notes:
    """What the translation could not say exactly, one ``field.path: what`` line each."""

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


def factors(count: Any) -> list[Any]:
    """A native count as the factors of its ``product`` (itself alone if it is none)."""
    if isinstance(count, dict) and set(count) == {"product"}:
        return [f for part in count["product"] for f in factors(part)]
    return [count]


def product(factors: list[Any]) -> Any:
    """The native count multiplying ``factors`` (1 for none)."""
    if not factors:
        return 1
    return factors[0] if len(factors) == 1 else {"product": factors}


@dataclass
class TranslatedRole:
    """A component translated: its native role document, and whether it is a role per item."""

    component: Component
    doc: dict[str, Any]
    dynamic: bool


def translate_role(c: Component, notes: Notes, *, in_replica_gang: bool) -> TranslatedRole:
    """``c`` as a native role; what it cannot say exactly goes to ``notes``."""
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
    return TranslatedRole(component=c, doc=doc, dynamic=dynamic)


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
              scope: Scope, notes: Notes) -> Any:
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
