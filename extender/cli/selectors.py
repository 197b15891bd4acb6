"""Label selectors as kubectl's ``-l/--selector`` reads them (apimachinery's ``labels.Parse``).

    app=train,tier!=cache         equality and inequality (``=``, ``==``, ``!=``)
    env in (prod, staging)        set membership (``in``, ``notin``)
    gpu, !spot                    the key exists, the key is absent
    rank>2                        integer comparison (``>``, ``<``), as apimachinery allows

Requirements are ANDed. ``!=`` and ``notin`` also match objects without the key, as in
Kubernetes. File mode filters with :meth:`Selector.matches`; live mode also sends the text to
the API server, which filters the same way, after it parsed here so that a typo is one line
naming it instead of a 400 from the server.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from extender.cli.errors import CliError

_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_KEY = re.compile(rf"(?:[a-z0-9](?:[-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}")
_VALUE = re.compile(rf"(?:{_NAME})?")
_TOKEN = re.compile(r"\s*(==|!=|=|!|\(|\)|,|>|<|[^\s=!(),<>]+)")
_LIMIT = 16_384
"""Characters accepted in one selector: far above any real one, bounded work on hostile input."""


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str
    """``in``, ``notin``, ``exists``, ``!``, ``gt`` or ``lt`` (``=``/``==`` are ``in``,
    ``!=`` is ``notin``, each with one value)."""
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        has = self.key in labels
        value = labels.get(self.key)
        if self.op == "in":
            return has and value in self.values
        if self.op == "notin":
            return not has or value not in self.values
        if self.op == "exists":
            return has
        if self.op == "!":
            return not has
        try:
            number = int(value or "")
        except ValueError:
            return False
        bound = int(self.values[0])
        return number > bound if self.op == "gt" else number < bound


@dataclass(frozen=True, slots=True)
class Selector:
    text: str
    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


def parse_selector(text: str) -> Selector:
    """The selector ``text``, or a :class:`CliError` naming what is wrong and where."""
    if len(text) > _LIMIT:
        raise _bad(text, f"longer than {_LIMIT} characters")
    tokens = _tokens(text)
    requirements: list[Requirement] = []
    i = 0
    while i < len(tokens):
        requirement, i = _requirement(text, tokens, i)
        requirements.append(requirement)
        if i < len(tokens):
            if tokens[i] != ",":
                raise _bad(text, f"expected ',' between requirements, found {tokens[i]!r}")
            i += 1
            if i == len(tokens):
                raise _bad(text, "a requirement is missing after the last ','")
    return Selector(text=text, requirements=tuple(requirements))


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None:  # pragma: no cover - every non-space character starts a token
            raise _bad(text, f"unexpected {text[pos]!r}")
        out.append(match.group(1))
        pos = match.end()
    return out


def _requirement(text: str, tokens: list[str], i: int) -> tuple[Requirement, int]:
    if tokens[i] == "!":
        key = _key(text, tokens, i + 1)
        return Requirement(key, "!"), i + 2
    key = _key(text, tokens, i)
    i += 1
    if i == len(tokens) or tokens[i] == ",":
        return Requirement(key, "exists"), i
    op = tokens[i]
    if op in ("=", "==", "!="):
        value = tokens[i + 1] if i + 1 < len(tokens) and tokens[i + 1] != "," else ""
        consumed = 2 if value else 1
        return (Requirement(key, "notin" if op == "!=" else "in", (_value(text, value),)),
                i + consumed)
    if op in (">", "<"):
        value = tokens[i + 1] if i + 1 < len(tokens) else ""
        if not re.fullmatch(r"-?\d{1,18}", value):
            raise _bad(text, f"{key}{op}: expected an integer, found {value!r}")
        return Requirement(key, "gt" if op == ">" else "lt", (value,)), i + 2
    if op in ("in", "notin"):
        return _set(text, tokens, key, op, i + 1)
    raise _bad(text, f"after {key!r} expected =, ==, !=, in, notin, > or <, found {op!r}")


def _set(text: str, tokens: list[str], key: str, op: str,
         i: int) -> tuple[Requirement, int]:
    if i >= len(tokens) or tokens[i] != "(":
        raise _bad(text, f"{key} {op}: expected '(' and a list of values")
    values: list[str] = []
    i += 1
    while True:
        if i >= len(tokens):
            raise _bad(text, f"{key} {op} (...: missing ')'")
        token = tokens[i]
        if token == ")" and not values:
            raise _bad(text, f"{key} {op} (): the set of values is empty")
        if token in (",", ")"):  # an empty value between commas is the empty string
            values.append("")
        else:
            values.append(_value(text, token))
            i += 1
            if i >= len(tokens):
                raise _bad(text, f"{key} {op} (...: missing ')'")
            token = tokens[i]
        if token == ")":
            return Requirement(key, op, tuple(values)), i + 1
        if token != ",":
            raise _bad(text, f"{key} {op} (...: expected ',' or ')', found {token!r}")
        i += 1


def _key(text: str, tokens: list[str], i: int) -> str:
    key = tokens[i] if i < len(tokens) else ""
    if not _KEY.fullmatch(key) or len(key.rpartition("/")[2]) > 63:
        raise _bad(text, f"{key!r} is not a valid label key" if key else "a key is missing")
    return key


def _value(text: str, value: str) -> str:
    if not _VALUE.fullmatch(value) or len(value) > 63:
        raise _bad(text, f"{value!r} is not a valid label value (at most 63 characters: "
                         "letters, digits, '-', '_', '.', starting and ending alphanumeric)")
    return value


def _bad(text: str, why: str) -> CliError:
    shown = text if len(text) <= 200 else text[:200] + "..."
    return CliError(f"--selector {shown!r}: {why}")
