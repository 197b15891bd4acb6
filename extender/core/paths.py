"""Value paths: where a descriptor finds a value inside a workload object.

A :class:`ValuePath` is anything with ``find(obj) -> list[object]``. Muster descriptors use
JSONPath (jsonpath-ng, extended syntax with filters); a jq implementation can satisfy the same
protocol later for NVIDIA Workload-Map (Karta) descriptors without touching the resolver.

Paths are compiled once and cached by their text. Plain paths made only of field names and
list indexes (most of them) are turned into a tuple of keys and walked directly, because
jsonpath-ng's general matcher costs tens of microseconds per call and a resolve reads dozens
of paths; anything else (wildcards, slices, filters) goes through jsonpath-ng.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, Protocol, runtime_checkable

from jsonpath_ng import Child, Fields, Index, Root, This
from jsonpath_ng.exceptions import JsonPathLexerError, JsonPathParserError
from jsonpath_ng.ext.parser import parse as _parse_jsonpath


class PathError(ValueError):
    """A path expression that does not compile."""


@runtime_checkable
class ValuePath(Protocol):
    """A compiled path: every value it selects in ``obj``, in document order."""

    @property
    def text(self) -> str: ...

    def find(self, obj: object) -> list[object]: ...


def _flatten(node: Any) -> list[str | int] | None:
    """The key tuple of a plain path (``$.a.b[0].c``), or ``None`` if it needs jsonpath-ng."""
    if isinstance(node, Root | This):
        return []
    if isinstance(node, Child):
        left = _flatten(node.left)
        right = _flatten(node.right)
        if left is None or right is None:
            return None
        return left + right
    if isinstance(node, Fields) and len(node.fields) == 1 and node.fields[0] != "*":
        return [str(node.fields[0])]
    if isinstance(node, Index) and len(node.indices) == 1:
        return [int(node.indices[0])]
    return None


class JsonPath:
    """A JSONPath expression compiled with jsonpath-ng (see :func:`compile_path`)."""

    __slots__ = ("_expr", "_keys", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        try:
            self._expr = _parse_jsonpath(text)
        except (JsonPathLexerError, JsonPathParserError, Exception) as err:
            # jsonpath-ng raises bare Exceptions from its lexer for some inputs; any failure
            # here is a malformed path as far as a descriptor author is concerned.
            message = str(err).split("\n", 1)[0]
            raise PathError(f"not a valid JSONPath {text!r}: {message}") from err
        keys = _flatten(self._expr)
        self._keys: tuple[str | int, ...] | None = tuple(keys) if keys is not None else None

    def find(self, obj: object) -> list[object]:
        if self._keys is not None:
            value: object = obj
            for key in self._keys:
                if isinstance(key, str):
                    if not isinstance(value, Mapping) or key not in value:
                        return []
                    value = value[key]
                else:
                    if not isinstance(value, Sequence) or isinstance(value, str):
                        return []
                    if not -len(value) <= key < len(value):
                        return []
                    value = value[key]
            return [] if value is None else [value]
        try:
            return [m.value for m in self._expr.find(obj) if m.value is not None]
        except Exception:
            return []

    def find_with_keys(self, obj: object) -> list[tuple[str, object]]:
        """Each selected value with the last step of its location (a map key or list index)."""
        if self._keys is not None:
            found = self.find(obj)
            last = str(self._keys[-1]) if self._keys else ""
            return [(last, v) for v in found]
        try:
            matches = self._expr.find(obj)
        except Exception:
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
