"""jq paths for Workload Map (Karta) descriptors, behind the :class:`ValuePath` protocol.

Karta writes every path as a jq program (run upstream by gojq): ``.spec.replicatedJobs[].name``,
``.spec.replicas // 1``, ``.spec.services | to_entries[] | .key``. :class:`JqPath` compiles one
program once (cached by its text) with the ``jq`` package and returns every value it outputs.
jq is a pure function of its input, so it may live in the core.

Evaluation is bounded. The ``jq`` package offers no step budget or timeout, and it holds the
GIL while a program runs, so a thread cannot stop it: ``[range(100000000)]|length`` would stall
the whole extender for a minute. :func:`unbounded_construct` therefore rejects, when a
descriptor is compiled, what can loop or generate without bound regardless of the workload
(``range``, ``repeat``, ``while``, ``until``, ``recurse``, user functions with ``def``,
``reduce``/``foreach``, ``combinations``, repeating a string literal) and what reads anything
but the workload (``input``, ``env``, ``now``, ``debug``, modules). What is left walks the
workload's own values, and :data:`MAX_OUTPUTS` caps how many values one program may output.
"""

from __future__ import annotations

import itertools
import re
from functools import lru_cache
from typing import Any

import jq
import orjson

from extender.core.workloads.expressions import WorkloadError
from extender.core.workloads.paths import PathError

__all__ = ["MAX_OUTPUTS", "JqPath", "compile_jq", "jq_values", "unbounded_construct"]

MAX_OUTPUTS = 10_000
"""Values one program may output on one object: far above any real path (a role per
replicatedJob, a container per pod), low enough that a runaway generator stops at once."""

#: Builtins and keywords that loop or generate independently of the input's size.
_UNBOUNDED = frozenset({"range", "repeat", "while", "until", "recurse", "recurse_down",
                        "def", "reduce", "foreach", "combinations"})
#: Builtins that read or write something other than the workload object.
_IMPURE = frozenset({"input", "inputs", "debug", "stderr", "input_filename",
                     "input_line_number", "env", "now", "localtime", "strflocaltime", "halt",
                     "halt_error", "import", "include", "get_search_list", "get_jq_origin",
                     "get_prog_origin", "$ENV", "$__loc__", "$__prog_args"})
_TOKEN = re.compile(r"""
    (?P<string>"(?:[^"\\]|\\.)*")      # a string literal
  | (?P<comment>\#[^\n]*)
  | (?P<field>\.\s*[A-Za-z_][A-Za-z0-9_]*) # .name is a field, not a function
  | (?P<word>\$?[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<other>.)
""", re.VERBOSE | re.DOTALL)


def unbounded_construct(text: str) -> str | None:
    """Why Muster will not evaluate the jq program ``text``, or ``None`` when it may.

    A string with an interpolation ``"\\(...)"`` is scanned as code too, so nothing hides
    in it (its literal words may then be refused as well: better too strict than a stall).
    """
    tokens = [(m.lastgroup, m.group()) for m in _TOKEN.finditer(text)]
    significant = [(k, v) for k, v in tokens if k != "comment" and not v.isspace()]
    for i, (kind, value) in enumerate(significant):
        if kind != "word":
            if kind == "string" and "\\(" in value:
                inner = unbounded_construct(value[1:-1].replace("\\(", " ("))
                if inner is not None:
                    return inner
            if kind == "string":
                before = significant[i - 1][1] if i else ""
                after = significant[i + 1][1] if i + 1 < len(significant) else ""
                if "*" in (before, after):
                    return (f"repeats the string {value} ('*' with a string makes it as long "
                            "as the number says)")
            continue
        following = significant[i + 1][1] if i + 1 < len(significant) else ""
        if following == ":" and value not in _UNBOUNDED | _IMPURE:
            continue  # an object key
        if value in _UNBOUNDED:
            return (f"uses '{value}', which can loop or generate values without bound; "
                    "a Karta path may only walk the workload object")
        if value in _IMPURE:
            return (f"uses '{value}', which reads or writes something other than the "
                    "workload object")
    return None


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
        why = unbounded_construct(text)
        if why is not None:
            raise PathError(f"jq program {text!r} {why}")
        try:
            self._program: Any = jq.compile(text)
        except ValueError as err:
            raise PathError(f"not a valid jq program {text!r}: {_first_line(err)}") from err

    def outputs(self, obj: object) -> list[object]:
        """Every output of the program on ``obj``, nulls included (positions matter for zips)."""
        try:
            found: list[object] = list(itertools.islice(
                iter(self._program.input_text(_as_json(obj))), MAX_OUTPUTS + 1))
        except (ValueError, TypeError) as err:
            if self.strict:
                raise WorkloadError(f"{self.text}: jq error: {_first_line(err)}") from err
            return []
        if len(found) > MAX_OUTPUTS:
            if self.strict:
                raise WorkloadError(f"{self.text}: outputs more than {MAX_OUTPUTS} values; "
                                    "Muster stops it there")
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
