"""Value paths: where a descriptor finds a value inside a workload object.

A :class:`ValuePath` is anything with ``find(obj) -> list[object]``. Muster descriptors use
JSONPath (jsonpath-ng, extended syntax with filters); a jq implementation can satisfy the same
protocol later for NVIDIA Workload-Map (Karta) descriptors without touching the resolver.

Paths are compiled once and cached by their text. Simple paths made only of field names, list
indexes and ``[*]``/``.*`` wildcards (nearly all of them) are turned into steps and walked
directly, because jsonpath-ng's general matcher costs tens of microseconds per call and a
resolve reads dozens of paths; anything else (slices, filters, descendants) goes through
jsonpath-ng.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, Protocol, runtime_checkable

from jsonpath_ng import Child, Fields, Index, Root, This
from jsonpath_ng.exceptions import JsonPathLexerError, JsonPathParserError
from jsonpath_ng.ext.parser import parse as _parse_jsonpath
from jsonpath_ng.jsonpath import Slice

from extender.core.workloads.errors import DescriptionError


class PathError(DescriptionError):
    """A path expression that does not compile."""


@runtime_checkable
class ValuePath(Protocol):
    """A compiled path: every value it selects in ``obj``, in document order."""

    @property
    def text(self) -> str: ...

    def find(self, obj: object) -> list[object]: ...


class _Wild:
    """The ``[*]``/``.*`` step: every element of a list, every value of a map."""

    def __repr__(self) -> str:
        return "*"


WILD = _Wild()
Step = str | int | _Wild


def _flatten(node: Any) -> list[Step] | None:
    """The steps of a simple path (``$.a[*].b[0]``), or ``None`` if it needs jsonpath-ng."""
    if isinstance(node, Root | This):
        return []
    if isinstance(node, Child):
        left = _flatten(node.left)
        right = _flatten(node.right)
        if left is None or right is None:
            return None
        return left + right
    if isinstance(node, Fields) and len(node.fields) == 1:
        return [WILD] if node.fields[0] == "*" else [str(node.fields[0])]
    if type(node).__name__ == "Wildcard" or (
            isinstance(node, Slice) and node.start is None and node.end is None
            and node.step is None):
        return [WILD]
    if isinstance(node, Index) and len(node.indices) == 1:
        return [int(node.indices[0])]
    return None


class JsonPath:
    """A JSONPath expression compiled with jsonpath-ng (see :func:`compile_path`)."""

    __slots__ = ("_expr", "_plain", "_steps", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        try:
            self._expr = _parse_jsonpath(text)
        except (JsonPathLexerError, JsonPathParserError, Exception) as err:
            # jsonpath-ng raises bare Exceptions from its lexer for some inputs; any failure
            # here is a malformed path as far as a descriptor author is concerned.
            message = str(err).split("\n", 1)[0]
            raise PathError(f"not a valid JSONPath {text!r}: {message}") from err
        steps = _flatten(self._expr)
        self._steps: tuple[Step, ...] | None = tuple(steps) if steps is not None else None
        # Field names only (the common case): a plain dictionary walk, no lists built.
        self._plain: tuple[str, ...] | None = (
            tuple(s for s in steps if isinstance(s, str))
            if steps is not None and all(isinstance(s, str) for s in steps) else None)

    def _walk(self, obj: object, steps: tuple[Step, ...]) -> list[tuple[str, object]]:
        level: list[tuple[str, object]] = [("", obj)]
        for step in steps:
            nxt: list[tuple[str, object]] = []
            for _, value in level:
                if isinstance(step, _Wild):
                    if isinstance(value, Mapping):
                        nxt.extend((str(k), v) for k, v in value.items())
                    elif isinstance(value, list):
                        nxt.extend((str(i), v) for i, v in enumerate(value))
                elif isinstance(step, str):
                    if isinstance(value, Mapping) and step in value:
                        nxt.append((step, value[step]))
                elif (isinstance(value, Sequence) and not isinstance(value, str)
                      and -len(value) <= step < len(value)):
                    nxt.append((str(step), value[step]))
            if not nxt:
                return []
            level = nxt
        return [(k, v) for k, v in level if v is not None]

    def find(self, obj: object) -> list[object]:
        if self._plain is not None:
            value: object = obj
            for key in self._plain:
                if type(value) is dict or isinstance(value, Mapping):
                    value = value.get(key)
                else:
                    return []
            return [] if value is None else [value]
        if self._steps is not None:
            return [v for _, v in self._walk(obj, self._steps)]
        try:
            return [m.value for m in self._expr.find(obj) if m.value is not None]
        except Exception:  # a filter on odd data must select nothing, not crash
            return []

    def find_with_keys(self, obj: object) -> list[tuple[str, object]]:
        """Each selected value with the last step of its location (a map key or list index)."""
        if self._steps is not None:
            return self._walk(obj, self._steps)
        try:
            matches = self._expr.find(obj)
        except Exception:  # as in find()
            return []
        out: list[tuple[str, object]] = []
        for m in matches:
            if m.value is None:
                continue
            step = m.path
            if isinstance(step, Fields):
                key = str(step.fields[0])
            elif isinstance(step, Index):
                key = str(step.indices[0])
            else:
                key = str(step)
            out.append((key, m.value))
        return out

    def __repr__(self) -> str:
        return f"JsonPath({self.text!r})"


@lru_cache(maxsize=2048)
def compile_path(text: str) -> JsonPath:
    """Compile (once; cached by text) a JSONPath such as ``$.spec.replicatedJobs[*]``.

    Field names with dots or slashes are quoted: ``$.metadata.labels.'ray.io/group'``.
    Raises :class:`PathError` for a malformed path.
    """
    if not isinstance(text, str) or not text.strip():
        raise PathError("a path must be a non-empty string")
    return JsonPath(text.strip())


def first(path: ValuePath, obj: object) -> object | None:
    """The first value ``path`` selects in ``obj``, or ``None``."""
    found = path.find(obj)
    return found[0] if found else None
