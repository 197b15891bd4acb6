"""Karta jq paths as JSONPath: the path, count and condition forms of a WorkloadDescriptor.

Used by :mod:`karta_native`. A parsed jq program (:mod:`karta_jqast`) becomes a JSONPath
string in a *scope* (``item`` for what a role reads per item of its ``forEach``, ``object``
for the rest), a count (``{path, default}``, ``product``, ``sum``, ``if``...) or a condition
(``equals``, ``greaterThan``, ``exists``, ``all``/``any``/``not``) keeping jq's meaning where a
value is missing (``null`` sorts first, ``null + n`` is ``n``, ``//`` takes the default).
Whatever has no such form raises :class:`Unsupported` with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.core.karta.jqast import (
    Alt,
    BinOp,
    Call,
    Field,
    If,
    Index,
    Iter,
    Lit,
    Node,
    Path,
    Pipe,
    Step,
)
from extender.core.karta.model import Component
from extender.core.workloads.expressions import DescriptorError

__all__ = ["ITEM", "OBJECT", "Expr", "Filter", "Keys", "Relative", "Scope", "Seg",
           "Unsupported", "chain", "describe", "first_iteration", "jsonpath_filter", "render",
           "scope_of", "segments", "zero_default"]

ITEM = "item"
OBJECT = "object"


class Unsupported(Exception):
    """This expression has no native form; the message says why."""


# ---------------------------------------------------------------- jq trees -> path steps


@dataclass(frozen=True, slots=True)
class Filter:
    """``[?(...)]``: an iteration narrowed by a ``select``."""

    text: str


@dataclass(frozen=True, slots=True)
class Keys:
    """``to_entries[] | .key``: the keys of a map (a role name from its map key)."""


Seg = Step | Filter | Keys


def segments(node: Node) -> list[Node]:
    if isinstance(node, Pipe):
        return segments(node.left) + segments(node.right)
    return [node]


def chain(node: Node, *, numeric: bool = False) -> tuple[Seg, ...]:
    """The steps of a path-like program: paths piped into paths, ``select`` after ``[]``,
    ``to_entries[] | .key``, and (for counts) a trailing ``tonumber``."""
    out: list[Seg] = []
    segs = segments(node)
    i = 0
    while i < len(segs):
        seg = segs[i]
        if isinstance(seg, Path):
            out.extend(seg.steps)
        elif isinstance(seg, Call) and seg.name == "select" and len(seg.args) == 1 \
                and out and isinstance(out[-1], Iter):
            out[-1] = Filter(jsonpath_filter(seg.args[0]))
        elif isinstance(seg, Call) and seg.name == "to_entries" and not seg.args:
            rest = segs[i + 1:i + 3]
            if (len(rest) == 2 and rest[0] == Path((Iter(),))
                    and rest[1] in (Path((Field("key"),)), Path((Field("value"),)))):
                out.append(Keys() if rest[1] == Path((Field("key"),)) else Iter())
                i += 3
                continue
            if len(rest) >= 1 and isinstance(rest[0], Path) and rest[0].steps[:1] == (
                    Iter(),) and rest[0].steps[1:2] in ((Field("key"),), (Field("value"),)):
                key = rest[0].steps[1] == Field("key")
                out.append(Keys() if key else Iter())
                out.extend(rest[0].steps[2:])
                i += 2
                continue
            raise Unsupported("'to_entries' other than 'to_entries[] | .key' or '.value'")
        elif isinstance(seg, Call) and seg.name == "tonumber" and numeric and i == len(segs) - 1:
            pass  # counts accept numeric strings already
        else:
            raise Unsupported(f"{describe(seg)} has no JSONPath form")
        i += 1
    return tuple(out)


def describe(node: Node) -> str:
    if isinstance(node, Call):
        return f"'{node.name}'"
    if isinstance(node, BinOp):
        return f"'{node.op}'"
    if isinstance(node, Alt):
        return "'//'"
    if isinstance(node, If):
        return "'if'"
    if isinstance(node, Lit):
        return f"the literal {node.value!r}"
    return "this step"


def jsonpath_filter(cond: Node) -> str:
    """A ``select`` condition as a jsonpath-ng filter body."""
    if isinstance(cond, BinOp) and cond.op == "and":
        parts = [p for p in (cond.left, cond.right) if not _is_type_object(p)]
        return " & ".join(jsonpath_filter(p) for p in parts)
    if isinstance(cond, Path) and all(isinstance(s, Field) for s in cond.steps) and cond.steps:
        return "@" + render(cond.steps)  # existence: what jq's truthiness means for objects
    if isinstance(cond, BinOp) and cond.op == "==" and isinstance(cond.left, Path) \
            and isinstance(cond.right, Lit) and isinstance(cond.right.value, str | int):
        value = cond.right.value
        literal = f"'{value}'" if isinstance(value, str) else str(value)
        return f"@{render(cond.left.steps)} == {literal}"
    raise Unsupported("this 'select' condition has no JSONPath filter form")


def _is_type_object(node: Node) -> bool:
    return (isinstance(node, BinOp) and node.op == "==" and node.left == Call("type")
            and node.right == Lit("object"))


_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def render(steps: tuple[Seg, ...]) -> str:
    out = ""
    for s in steps:
        if isinstance(s, Field):
            out += f".{s.name}" if _PLAIN.fullmatch(s.name) else f".'{s.name}'"
        elif isinstance(s, Iter | Keys):
            out += "[*]"
        elif isinstance(s, Index):
            out += f"[{s.index}]"
        else:
            out += f"[?({s.text})]"
    return out


# ---------------------------------------------------------------- a component's scope


@dataclass
class Scope:
    """Where a component's paths are read: the object, or the items of ``base``."""

    base: tuple[Seg, ...] | None = None
    keys: bool = False
    """The items are a map's entries named by key (``to_entries[] | .key``)."""

    @property
    def each(self) -> bool:
        return self.base is not None

    def ref(self, steps: tuple[Seg, ...]) -> tuple[str, str]:
        """``(jsonpath, scope)`` of a path inside this scope."""
        if self.base is not None and steps[:len(self.base)] == self.base and \
                len(steps) > len(self.base) and isinstance(steps[len(self.base)],
                                                          Iter | Keys):
            rest = steps[len(self.base) + 1:]
            if any(isinstance(s, Keys) for s in rest):
                raise Unsupported("a map key read below the role's items")
            return "$" + render(rest), ITEM
        if any(isinstance(s, Keys) for s in steps):
            raise Unsupported("a map key read outside the role's items")
        if self.base is not None and first_iteration(steps) is not None:
            raise Unsupported("it iterates a different list than the component's other paths "
                               f"({'$' + render(self.base)}[*])")
        return "$" + render(steps), OBJECT if self.base is not None else ITEM


def first_iteration(steps: tuple[Seg, ...]) -> int | None:
    for i, s in enumerate(steps):
        if isinstance(s, Iter | Keys):
            return i
    return None


def _paths_in(node: Node) -> list[tuple[Seg, ...]]:
    """The path chains a program reads (best effort; only for finding the iterated list)."""
    if isinstance(node, Pipe | Path | Call) and not (isinstance(node, Call) and node.args):
        try:
            return [chain(node, numeric=True)]
        except Unsupported:
            pass
    out: list[tuple[Seg, ...]] = []
    if isinstance(node, Pipe):
        left = _paths_in(node.left)
        out.extend(left)
        out.extend(_paths_in(node.right) if not left else [])
        if left and isinstance(node.right, BinOp | Alt | If):
            # .spec.x[] | (.a // 1) * .b: the right side reads the items of the left.
            prefix = left[0]
            out.extend(prefix + p for p in _paths_in(node.right))
    elif isinstance(node, Alt | BinOp):
        out.extend(_paths_in(node.left) + _paths_in(node.right))
    elif isinstance(node, If):
        out.extend(_paths_in(node.cond) + _paths_in(node.then) + _paths_in(node.orelse))
    elif isinstance(node, Call):
        for arg in node.args:
            out.extend(_paths_in(arg))
    return out


def scope_of(c: Component, trees: Mapping[str, Node]) -> Scope:
    bases: dict[tuple[Seg, ...], bool] = {}
    for tree in trees.values():
        for steps in _paths_in(tree):
            at = first_iteration(steps)
            if at is not None:
                bases.setdefault(steps[:at], False)
                if isinstance(steps[at], Keys):
                    bases[steps[:at]] = True
    if len(bases) > 1:
        raise DescriptorError(c.at, "its paths iterate over different lists ("
                              + ", ".join("$" + render(b) + "[*]" for b in bases)
                              + "); a native role iterates over one")
    if not bases:
        return Scope()
    [(base, keys)] = bases.items()
    return Scope(base=base, keys=keys)


# ---------------------------------------------------------------- counts and conditions


@dataclass(frozen=True, slots=True)
class Relative:
    """A program read against the role's item (what follows ``.spec.x[] |``)."""

    node: Node


def _strip(node: Node, scope: Scope) -> Node | Relative:
    """``.spec.x[] | EXPR`` -> EXPR read per item (the iteration is the role's forEach)."""
    if isinstance(node, Pipe) and scope.base is not None and isinstance(node.left, Path):
        left = node.left.steps
        if left[:len(scope.base)] == scope.base and len(left) == len(scope.base) + 1:
            return Relative(node.right)
    return node


class Expr:
    """Counts and conditions of one component, in its scope."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    def path(self, node: Node, *, relative: bool, numeric: bool = False) -> dict[str, Any]:
        steps = chain(node, numeric=numeric)
        if relative:
            if first_iteration(steps) is not None:
                raise Unsupported("it iterates again inside the role's items")
            return {"path": "$" + render(steps)}
        jsonpath, scope = self.scope.ref(steps)
        out: dict[str, Any] = {"path": jsonpath}
        if scope == OBJECT:
            out["scope"] = OBJECT
        return out

    def count(self, node: Node | Relative, *, relative: bool = False) -> Any:
        if isinstance(node, Relative):
            return self.count(node.node, relative=True)
        if isinstance(node, Lit):
            value = node.value
            if isinstance(value, bool) or value is None:
                raise Unsupported(f"the literal {value!r} is not a count")
            if isinstance(value, str):
                try:
                    return int(value.strip())
                except ValueError:
                    raise Unsupported(f"the literal {value!r} is not a count") from None
            if isinstance(value, float) and not value.is_integer():
                raise Unsupported(f"the literal {value!r} is not a count")
            return int(value)  # type: ignore[call-overload]
        if isinstance(node, Pipe) and isinstance(node.left, Path) and self.scope.base and \
                not relative:
            stripped = _strip(node, self.scope)
            if isinstance(stripped, Relative):
                return self.count(stripped)
        if isinstance(node, Pipe) and node.right == Call("tonumber"):
            return self.count(node.left, relative=relative)
        if isinstance(node, Path | Pipe):
            return self.path(node, relative=relative, numeric=True)
        if isinstance(node, Alt):
            first = self.count(node.left, relative=relative)
            if not (isinstance(first, dict) and set(first) <= {"path", "scope"}):
                raise Unsupported("'//' after something other than a path")
            second = self.count(node.right, relative=relative)
            if isinstance(second, dict) and set(second) <= {"path", "scope"} and \
                    second.get("scope") == first.get("scope"):
                paths = first["path"] if isinstance(first["path"], list) else [first["path"]]
                return {**first, "path": [*paths, second["path"]]}
            if isinstance(second, dict) and "path" in second and "default" in second and \
                    second.get("scope") == first.get("scope") and set(second) <= {
                        "path", "scope", "default"}:
                paths = second["path"] if isinstance(second["path"], list) else [
                    second["path"]]
                return {**second, "path": [first["path"], *paths]}
            return {**first, "default": second}
        if isinstance(node, BinOp) and node.op in ("*", "+", "-"):
            left = self.count(node.left, relative=relative)
            right = self.count(node.right, relative=relative)
            if node.op == "*":
                return {"product": [left, right]}
            if node.op == "+":  # jq: null + n is n
                return {"sum": [zero_default(left), zero_default(right)]}
            negated = -right if isinstance(right, int) else {"product": [right, -1]}
            return {"sum": [left, negated]}
        if isinstance(node, If):
            return {"if": self.cond(node.cond, relative=relative),
                    "then": self.count(node.then, relative=relative),
                    "else": self.count(node.orelse, relative=relative)}
        raise Unsupported(f"{describe(node)} has no count form")

    def cond(self, node: Node, *, relative: bool = False) -> dict[str, Any]:
        if isinstance(node, BinOp) and node.op in ("and", "or"):
            key = "all" if node.op == "and" else "any"
            return {key: [self.cond(node.left, relative=relative),
                          self.cond(node.right, relative=relative)]}
        if isinstance(node, Pipe) and node.right == Call("not"):
            return {"not": self.cond(node.left, relative=relative)}
        if isinstance(node, BinOp) and node.op in ("==", "!=", "<", "<=", ">", ">="):
            left, right, op = node.left, node.right, node.op
            if isinstance(left, Lit) and not isinstance(right, Lit):
                left, right = right, left
                op = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(op, op)
            if not isinstance(right, Lit):
                raise Unsupported("a comparison of two paths has no condition form")
            return self.compare(left, op, right.value, relative=relative)
        if isinstance(node, Path | Pipe):  # truthiness: neither null nor false
            ref = self.path(node, relative=relative)
            return {"all": [{**ref, "exists": True}, {**ref, "notEquals": False}]}
        raise Unsupported(f"{describe(node)} has no condition form")

    def compare(self, left: Node, op: str, value: object, *, relative: bool) -> dict[str, Any]:
        default: tuple[object] | None = None
        if isinstance(left, Alt) and isinstance(left.right, Lit):
            default = (left.right.value,)
            left = left.left
        ref = self.path(left, relative=relative)
        test = _test(ref, op, value)
        if default is None:
            return test
        if _holds(default[0], op, value):
            return {"any": [{**ref, "exists": False}, test]}
        return {"all": [{**ref, "exists": True}, test]}


def zero_default(count: Any) -> Any:
    if isinstance(count, dict) and "path" in count and "default" not in count:
        return {**count, "default": 0}
    return count


def _test(ref: dict[str, Any], op: str, value: object) -> dict[str, Any]:
    """A path test with jq's meaning when the value is missing (null sorts first)."""
    if value is None:
        if op not in ("==", "!="):
            raise Unsupported("ordering against null has no condition form")
        return {**ref, "exists": op == "!="}
    if op in ("==", "!="):
        return {**ref, ("equals" if op == "==" else "notEquals"): value}
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Unsupported(f"'{op}' against {value!r} has no condition form")
    greater = {**ref, "greaterThan": value}
    at_least = {"any": [greater, {**ref, "equals": value}]}
    return {">": greater, ">=": at_least, "<": {"not": at_least},
            "<=": {"not": greater}}[op]


def _holds(left: object, op: str, right: object) -> bool:
    """``left op right`` for literals, in jq's order (null < false < true < numbers)."""
    def rank(v: object) -> tuple[int, Any]:
        if v is None:
            return (0, 0)
        if isinstance(v, bool):
            return (1, int(v))
        if isinstance(v, int | float):
            return (2, v)
        return (3, str(v))

    a, b = rank(left), rank(right)
    return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b,
            ">=": a >= b}[op]
