"""The small expression language of descriptors: counts, names and conditions.

A *count* is an integer literal, a path (with a default), or ``sum``/``product``/``min``/``max``/
``quotient`` over counts, ``if``/``then``/``else``, or ``each``/``count``: a count summed over the
items a path selects, each read as the ``item`` scope (a per-item default, such as a Milvus
deployment group whose unset ``replicas`` is the Deployment's 1). A *condition* tests values
found by paths, status conditions, or combines conditions with ``all``/``any``/``not``. Each is
compiled once from descriptor data (errors carry the field path) and evaluated against a
:class:`Scope`: the whole object, the current role item, and any joined items.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from extender.core.workloads.errors import DescriptionError
from extender.core.workloads.paths import PathError, ValuePath, compile_path

OBJECT = "object"
ITEM = "item"


class DescriptorError(DescriptionError):
    """A descriptor that does not compile; ``path`` names the field, e.g. ``spec.roles[1]``."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


class WorkloadError(DescriptionError):
    """A workload object that its descriptor cannot read (a value of the wrong type)."""


@dataclass(frozen=True, slots=True)
class Scope:
    """What paths are evaluated against: ``object``, ``item`` and named joins."""

    values: Mapping[str, object]
    conditions: tuple[Mapping[str, Any], ...] = ()
    phase: str | None = None

    def get(self, name: str) -> object:
        return self.values.get(name)


# ---------------------------------------------------------------- compile helpers


def expect_mapping(raw: object, at: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise DescriptorError(at, f"expected an object, got {type_name(raw)}")
    return raw


def expect_list(raw: object, at: str) -> list[Any]:
    if not isinstance(raw, list):
        raise DescriptorError(at, f"expected a list, got {type_name(raw)}")
    return raw


def expect_str(raw: object, at: str) -> str:
    if not isinstance(raw, str) or not raw:
        raise DescriptorError(at, f"expected a non-empty string, got {type_name(raw)}")
    return raw


def check_fields(raw: Mapping[str, Any], at: str, allowed: Sequence[str]) -> None:
    for key in raw:
        if key not in allowed:
            where = f"{at}.{key}" if at else str(key)
            raise DescriptorError(where, f"unknown field; expected one of {', '.join(allowed)}")


def type_name(raw: object) -> str:
    if raw is None:
        return "nothing"
    if isinstance(raw, bool):
        return "a boolean"
    if isinstance(raw, int | float):
        return f"the number {raw!r}"
    if isinstance(raw, str):
        return f"the string {raw!r}"
    if isinstance(raw, list):
        return "a list"
    if isinstance(raw, Mapping):
        return "an object"
    return type(raw).__name__


def compile_paths(raw: object, at: str) -> tuple[ValuePath, ...]:
    """One path or a list of alternatives (the first that selects anything wins)."""
    texts = raw if isinstance(raw, list) else [raw]
    if not texts:
        raise DescriptorError(at, "expected a path or a non-empty list of paths")
    out = []
    for i, text in enumerate(texts):
        where = f"{at}[{i}]" if isinstance(raw, list) else at
        if not isinstance(text, str):
            raise DescriptorError(where, f"expected a JSONPath string, got {type_name(text)}")
        try:
            out.append(compile_path(text))
        except PathError as err:
            raise DescriptorError(where, str(err)) from err
    return tuple(out)


@dataclass(frozen=True, slots=True)
class PathRef:
    """Paths (alternatives) evaluated in one scope."""

    paths: tuple[ValuePath, ...]
    scope: str = ITEM

    def find(self, scope: Scope) -> list[object]:
        target = scope.get(self.scope)
        if target is None:
            return []
        for path in self.paths:
            found = path.find(target)
            if found:
                return found
        return []

    @property
    def text(self) -> str:
        return " | ".join(p.text for p in self.paths)


def compile_ref(raw: Mapping[str, Any], at: str, scopes: frozenset[str]) -> PathRef:
    scope = raw.get("scope", ITEM)
    if scope not in scopes:
        raise DescriptorError(f"{at}.scope", f"unknown scope {scope!r}; known: "
                              f"{', '.join(sorted(scopes))}")
    return PathRef(paths=compile_paths(raw.get("path"), f"{at}.path"), scope=str(scope))


# ---------------------------------------------------------------- counts


#: Every count an object holds (replicas, sizes, minimums) is an int32 to the API server.
INT32_MAX = 2**31 - 1


def _as_int(value: object, where: str) -> int:
    number = _read_int(value, where)
    if abs(number) > INT32_MAX:
        shown = str(number) if abs(number) < 10**18 else f"{number:.3e}"
        raise WorkloadError(f"{where}: {shown} is beyond int32 ({INT32_MAX}), which the API "
                            "server refuses for a count")
    return number


def _read_int(value: object, where: str) -> int:
    if isinstance(value, bool):
        raise WorkloadError(f"{where}: expected an integer, got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and len(value) < 64:
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise WorkloadError(f"{where}: expected an integer, got {type_name(value)}")


@dataclass(frozen=True, slots=True)
class Count:
    """An integer-valued expression (see the module docstring for the forms)."""

    literal: int | None = None
    ref: PathRef | None = None
    default: Count | None = None
    op: str | None = None
    args: tuple[Count, ...] = ()
    condition: Condition | None = None
    each: PathRef | None = None

    def evaluate(self, scope: Scope) -> int:
        if self.literal is not None:
            return self.literal
        if self.each is not None:
            # One evaluation per selected item: work is bounded by the object's own size.
            return sum(self.args[0].evaluate(Scope(values={**scope.values, ITEM: item},
                                                   conditions=scope.conditions,
                                                   phase=scope.phase))
                       for item in self.each.find(scope))
        if self.ref is not None:
            found = self.ref.find(scope)
            if not found:
                if self.default is None:
                    raise WorkloadError(f"{self.ref.text}: required value is missing")
                return self.default.evaluate(scope)
            # Several values (a wildcard such as groups[*].replicas) add up.
            return sum(_as_int(v, self.ref.text) for v in found)
        if self.condition is not None:
            branch = self.args[0] if self.condition.holds(scope) else self.args[1]
            return branch.evaluate(scope)
        values = [a.evaluate(scope) for a in self.args]
        if self.op == "sum":
            return sum(values)
        if self.op == "product":
            out = 1
            for v in values:
                out *= v
            return out
        if self.op == "min":
            return min(values)
        if self.op == "max":
            return max(values)
        # quotient: integer division rounding up, as operators size groups to hold all ranks
        numerator, denominator = values
        if denominator <= 0:
            raise WorkloadError("quotient: the divisor must be positive")
        return -(-numerator // denominator)


_COUNT_OPS = ("sum", "product", "min", "max", "quotient")


def compile_count(raw: object, at: str, scopes: frozenset[str]) -> Count:
    if isinstance(raw, bool):
        raise DescriptorError(at, "expected an integer or a count expression, got a boolean")
    if isinstance(raw, int):
        return Count(literal=raw)
    if not isinstance(raw, Mapping):
        raise DescriptorError(at, f"expected an integer or a count expression, got "
                              f"{type_name(raw)}")
    if "path" in raw:
        check_fields(raw, at, ("path", "scope", "default"))
        default = (compile_count(raw["default"], f"{at}.default", scopes)
                   if "default" in raw else None)
        return Count(ref=compile_ref(raw, at, scopes), default=default)
    if "each" in raw:
        check_fields(raw, at, ("each", "count"))
        if "count" not in raw:
            raise DescriptorError(f"{at}.count", "required with 'each'")
        each = expect_mapping(raw["each"], f"{at}.each")
        check_fields(each, f"{at}.each", ("path", "scope"))
        return Count(each=compile_ref(each, f"{at}.each", scopes),
                     args=(compile_count(raw["count"], f"{at}.count", scopes),))
    if "if" in raw:
        check_fields(raw, at, ("if", "then", "else"))
        for key in ("then", "else"):
            if key not in raw:
                raise DescriptorError(f"{at}.{key}", "required with 'if'")
        return Count(
            condition=compile_condition(raw["if"], f"{at}.if", scopes),
            args=(compile_count(raw["then"], f"{at}.then", scopes),
                  compile_count(raw["else"], f"{at}.else", scopes)),
        )
    ops = [k for k in raw if k in _COUNT_OPS]
    if len(ops) != 1 or len(raw) != 1:
        raise DescriptorError(at, "a count is an integer, or an object with exactly one of "
                              "path, if, each, " + ", ".join(_COUNT_OPS))
    op = ops[0]
    items = expect_list(raw[op], f"{at}.{op}")
    if not items or (op == "quotient" and len(items) != 2):
        need = "exactly two counts" if op == "quotient" else "at least one count"
        raise DescriptorError(f"{at}.{op}", f"needs {need}")
    args = tuple(compile_count(a, f"{at}.{op}[{i}]", scopes) for i, a in enumerate(items))
    return Count(op=op, args=args)


# ---------------------------------------------------------------- names


@dataclass(frozen=True, slots=True)
class Name:
    """A literal name, a path to a string, or the item's key in its list or map."""

    literal: str | None = None
    ref: PathRef | None = None
    from_key: bool = False
    default: str | None = None

    def evaluate(self, scope: Scope, *, key: str) -> str:
        if self.literal is not None:
            return self.literal
        if self.from_key:
            return key
        assert self.ref is not None
        found = self.ref.find(scope)
        if found and isinstance(found[0], str | int) and not isinstance(found[0], bool):
            return str(found[0])
        if self.default is not None:
            return self.default
        raise WorkloadError(f"{self.ref.text}: a role name is required")


def compile_name(raw: object, at: str, scopes: frozenset[str]) -> Name:
    if isinstance(raw, str) and raw:
        return Name(literal=raw)
    mapping = expect_mapping(raw, at)
    if "key" in mapping:
        check_fields(mapping, at, ("key",))
        if mapping["key"] is not True:
            raise DescriptorError(f"{at}.key", "must be true")
        return Name(from_key=True)
    check_fields(mapping, at, ("path", "scope", "default"))
    default = mapping.get("default")
    if default is not None and not isinstance(default, str):
        raise DescriptorError(f"{at}.default", "expected a string")
    return Name(ref=compile_ref(mapping, at, scopes), default=default)


# ---------------------------------------------------------------- conditions

_TESTS = ("equals", "notEquals", "in", "exists", "matches", "greaterThan", "equalsPath")


@dataclass(frozen=True, slots=True)
class Condition:
    """A test; ``all``/``any``/``not`` combine tests (see :func:`compile_condition`)."""

    kind: str
    ref: PathRef | None = None
    expected: object = None
    pattern: re.Pattern[str] | None = None
    other: PathRef | None = None
    parts: tuple[Condition, ...] = ()
    condition_type: str = ""
    condition_status: str = "True"
    condition_reason: str | None = None

    def holds(self, scope: Scope) -> bool:
        kind = self.kind
        if kind == "all":
            return all(p.holds(scope) for p in self.parts)
        if kind == "any":
            return any(p.holds(scope) for p in self.parts)
        if kind == "not":
            return not self.parts[0].holds(scope)
        if kind == "condition":
            for c in scope.conditions:
                if c.get("type") == self.condition_type:
                    if str(c.get("status")) != self.condition_status:
                        return False
                    return self.condition_reason is None or c.get("reason") == \
                        self.condition_reason
            return False
        if kind == "phase":
            expected = self.expected if isinstance(self.expected, tuple) else ()
            return scope.phase is not None and scope.phase.lower() in expected
        assert self.ref is not None
        found = self.ref.find(scope)
        value = found[0] if found else None
        if kind == "exists":
            return (value is not None) == bool(self.expected)
        if kind == "equals":
            return _same(value, self.expected)
        if kind == "notEquals":
            return not _same(value, self.expected)
        if kind == "in":
            options = self.expected if isinstance(self.expected, tuple) else ()
            return any(_same(value, o) for o in options)
        if kind == "matches":
            assert self.pattern is not None
            return isinstance(value, str) and self.pattern.search(value) is not None
        if kind == "greaterThan":
            # Any selected value counts: "some replicatedJob has active pods".
            limit = self.expected if isinstance(self.expected, int | float) else 0
            return any(isinstance(v, int | float) and not isinstance(v, bool) and v > limit
                       for v in found)
        # equalsPath
        assert self.other is not None
        other = self.other.find(scope)
        return value is not None and bool(other) and _same(value, other[0])


def _same(value: object, expected: object) -> bool:
    if value is None or expected is None:
        return value is expected
    if isinstance(value, bool) or isinstance(expected, bool):
        return value is expected or str(value).lower() == str(expected).lower()
    if isinstance(value, int | float) and isinstance(expected, int | float):
        return value == expected
    return str(value) == str(expected)


def compile_condition(raw: object, at: str, scopes: frozenset[str]) -> Condition:
    mapping = expect_mapping(raw, at)
    for combinator in ("all", "any"):
        if combinator in mapping:
            check_fields(mapping, at, (combinator,))
            items = expect_list(mapping[combinator], f"{at}.{combinator}")
            if not items:
                raise DescriptorError(f"{at}.{combinator}", "needs at least one condition")
            return Condition(kind=combinator, parts=tuple(
                compile_condition(c, f"{at}.{combinator}[{i}]", scopes)
                for i, c in enumerate(items)))
    if "not" in mapping:
        check_fields(mapping, at, ("not",))
        return Condition(kind="not", parts=(compile_condition(mapping["not"], f"{at}.not",
                                                              scopes),))
    if "condition" in mapping:
        check_fields(mapping, at, ("condition", "status", "reason"))
        status = mapping.get("status", "True")
        if status not in ("True", "False", "Unknown"):
            raise DescriptorError(f"{at}.status", "must be True, False or Unknown")
        reason = mapping.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise DescriptorError(f"{at}.reason", "expected a string")
        return Condition(kind="condition",
                         condition_type=expect_str(mapping["condition"], f"{at}.condition"),
                         condition_status=status, condition_reason=reason)
    if "phase" in mapping:
        check_fields(mapping, at, ("phase",))
        values = mapping["phase"]
        values = values if isinstance(values, list) else [values]
        return Condition(kind="phase", expected=tuple(
            expect_str(v, f"{at}.phase").lower() for v in values))
    if "path" not in mapping:
        raise DescriptorError(at, "a condition needs one of path, condition, phase, all, any, "
                              "not")
    check_fields(mapping, at, ("path", "scope", *_TESTS))
    tests = [t for t in _TESTS if t in mapping]
    if len(tests) != 1:
        raise DescriptorError(at, f"a path condition needs exactly one of {', '.join(_TESTS)}")
    test = tests[0]
    ref = compile_ref(mapping, at, scopes)
    value = mapping[test]
    if test == "exists" and not isinstance(value, bool):
        raise DescriptorError(f"{at}.exists", "must be true or false")
    if test == "in":
        return Condition(kind="in", ref=ref,
                         expected=tuple(expect_list(value, f"{at}.in")))
    if test == "matches":
        try:
            pattern = re.compile(expect_str(value, f"{at}.matches"))
        except re.error as err:
            raise DescriptorError(f"{at}.matches", f"not a regular expression: {err}") from err
        return Condition(kind="matches", ref=ref, pattern=pattern)
    if test == "greaterThan" and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise DescriptorError(f"{at}.greaterThan", "expected a number")
    if test == "equalsPath":
        other = PathRef(paths=compile_paths(value, f"{at}.equalsPath"), scope=ref.scope)
        return Condition(kind="equalsPath", ref=ref, other=other)
    return Condition(kind=test, ref=ref, expected=value)
