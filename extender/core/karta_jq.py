"""jq paths for Workload Map (Karta) descriptors, behind the :class:`ValuePath` protocol.

Karta writes every path as a jq program (run upstream by gojq): ``.spec.replicatedJobs[].name``,
``.spec.replicas // 1``, ``.spec.services | to_entries[] | .key``. :class:`JqPath` compiles one
program once (cached by its text) with the ``jq`` package and returns every value it outputs.
jq is a pure function of its input, so it may live in the core.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jq
import orjson

from extender.core.expressions import WorkloadError
from extender.core.paths import PathError

__all__ = ["JqPath", "compile_jq", "jq_values"]


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    # libjq prints "jq: error: <what> at <top-level>, line 1, column N:" first; keep that.
    return lines[0].removeprefix("jq: error: ") if lines else type(err).__name__


def _as_json(obj: object) -> str:
    # YAML may hold dates and other non-JSON scalars; jq sees them as strings, as kubectl would.
    return orjson.dumps(obj, default=str).decode()


class JqPath:
    """A compiled jq program; ``find`` returns every non-null value it outputs.

    A runtime error (``null * 3``, ``.[]`` over a number) raises :class:`WorkloadError` naming
    the program when ``strict`` is set (counts and templates, where a silent empty would
    miscount) and selects nothing otherwise (status tests, where an error is "no match").
    """

    __slots__ = ("_program", "strict", "text")

    def __init__(self, text: str, *, strict: bool = True) -> None:
        self.text = text
        self.strict = strict
        try:
            self._program: Any = jq.compile(text)
        except ValueError as err:
            raise PathError(f"not a valid jq program {text!r}: {_first_line(err)}") from err

    def outputs(self, obj: object) -> list[object]:
        """Every output of the program on ``obj``, nulls included (positions matter for zips)."""
        try:
            found: list[object] = self._program.input_text(_as_json(obj)).all()
        except (ValueError, TypeError) as err:
            if self.strict:
                raise WorkloadError(f"{self.text}: jq error: {_first_line(err)}") from err
            return []
        return found

    def find(self, obj: object) -> list[object]:
        return [v for v in self.outputs(obj) if v is not None]

    def __repr__(self) -> str:
        return f"JqPath({self.text!r})"


@lru_cache(maxsize=4096)
def compile_jq(text: str, *, strict: bool = True) -> JqPath:
    """Compile (once; cached by text) a jq program; raises :class:`PathError` if malformed."""
    if not isinstance(text, str) or not text.strip():
        raise PathError("a jq path must be a non-empty string")
    return JqPath(text.strip(), strict=strict)


def jq_values(text: str, obj: object) -> list[object]:
    """Every output of ``text`` on ``obj`` (a convenience for tests and the CLI)."""
    return compile_jq(text).outputs(obj)
