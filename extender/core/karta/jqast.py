"""The part of jq that Karta paths use, parsed into a small tree for translation to JSONPath.

:func:`parse_jq` reads the forms the Workload Map catalog writes: paths (``.a.b``,
``.labels["x/y"]``, ``.[]``, ``.[0]``, ``?``), pipes, ``//``, arithmetic, comparisons,
``and``/``or``, ``if ... then ... else ... end``, literals and calls (``select(...)``,
``not``, ``tonumber``, ``to_entries``...). Anything else (``,``, object and array
construction, variables, reductions) raises :class:`JqUnsupported` saying what, so the caller
can report it instead of translating it wrongly. It never evaluates anything: evaluation stays
with the ``jq`` package (:mod:`karta_jq`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from extender.core.karta.errors import KartaError

__all__ = ["Alt", "BinOp", "Call", "Field", "If", "Index", "Iter", "JqUnsupported", "Lit",
           "Node", "Path", "Pipe", "Step", "parse_jq"]


class JqUnsupported(KartaError):
    """A jq program outside the subset :func:`parse_jq` reads; the message says what."""


@dataclass(frozen=True, slots=True)
class Field:
    name: str


@dataclass(frozen=True, slots=True)
class Iter:
    """``[]``; ``optional`` for ``[]?`` (no error on a non-iterable)."""

    optional: bool = False


@dataclass(frozen=True, slots=True)
class Index:
    index: int


Step = Field | Iter | Index


@dataclass(frozen=True, slots=True)
class Path:
    """``.`` followed by steps (``.spec.replicatedJobs[].name``)."""

    steps: tuple[Step, ...] = ()


@dataclass(frozen=True, slots=True)
class Lit:
    value: object


@dataclass(frozen=True, slots=True)
class Pipe:
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class Alt:
    """``left // right``: ``right`` when ``left`` is null, false or empty."""

    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class BinOp:
    op: str
    """``+ - * / % == != < <= > >= and or``."""
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class If:
    cond: Node
    then: Node
    orelse: Node


@dataclass(frozen=True, slots=True)
class Call:
    name: str
    args: tuple[Node, ...] = ()


Node = Path | Lit | Pipe | Alt | BinOp | If | Call

_TOKENS = re.compile(r"""
    \s+
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<number>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)
  | (?P<field>\.[A-Za-z_][A-Za-z0-9_]*)
  | (?P<word>\$?[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\?//|//|==|!=|<=|>=|\.\.|[.\[\](){}|,:;<>+\-*/%?])
""", re.VERBOSE)

_COMPARE = ("==", "!=", "<", "<=", ">", ">=")


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _TOKENS.match(text, pos)
        if m is None:
            raise JqUnsupported(f"cannot read {text[pos:pos + 10]!r}")
        pos = m.end()
        if m.lastgroup is not None:
            out.append((m.lastgroup, m.group()))
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.pos = 0

    def peek(self, ahead: int = 0) -> str:
        i = self.pos + ahead
        return self.tokens[i][1] if i < len(self.tokens) else ""

    def kind(self) -> str:
        return self.tokens[self.pos][0] if self.pos < len(self.tokens) else ""

    def take(self, expected: str | None = None) -> str:
        value = self.peek()
        if expected is not None and value != expected:
            raise JqUnsupported(f"expected {expected!r}, found {value or 'the end'!r}")
        self.pos += 1
        return value

    def parse(self) -> Node:
        node = self.pipe()
        if self.pos != len(self.tokens):
            raise JqUnsupported(f"{self.peek()!r} is not read by the translation")
        return node

    def pipe(self) -> Node:
        left = self.alt()
        if self.peek() == "|":
            self.take()
            return Pipe(left, self.pipe())
        if self.peek() == ",":
            raise JqUnsupported("',' (several outputs)")
        return left

    def alt(self) -> Node:
        left = self.or_()
        if self.peek() == "//":
            self.take()
            return Alt(left, self.alt())
        return left

    def or_(self) -> Node:
        left = self.and_()
        while self.peek() == "or":
            self.take()
            left = BinOp("or", left, self.and_())
        return left

    def and_(self) -> Node:
        left = self.compare()
        while self.peek() == "and":
            self.take()
            left = BinOp("and", left, self.compare())
        return left

    def compare(self) -> Node:
        left = self.add()
        if self.peek() in _COMPARE:
            op = self.take()
            return BinOp(op, left, self.add())
        return left

    def add(self) -> Node:
        left = self.mul()
        while self.peek() in ("+", "-"):
            op = self.take()
            left = BinOp(op, left, self.mul())
        return left

    def mul(self) -> Node:
        left = self.postfix()
        while self.peek() in ("*", "/", "%"):
            op = self.take()
            left = BinOp(op, left, self.postfix())
        return left

    def postfix(self) -> Node:
        node = self.primary()
        while True:
            steps: list[Step] = []
            if self.kind() == "field":
                steps.append(Field(self.take()[1:]))
            elif self.peek() == "." and self.peek(1) == "[":
                self.take()
                continue
            elif self.peek() == "." and self.pos + 1 < len(self.tokens) and \
                    self.tokens[self.pos + 1][0] == "string":
                self.take()
                steps.append(Field(json.loads(self.take())))
            elif self.peek() == "[":
                steps.append(self.bracket())
            elif self.peek() == "?":
                self.take()
                node = _optional(node)
                continue
            else:
                return node
            node = _extend(node, tuple(steps))

    def bracket(self) -> Step:
        self.take("[")
        if self.peek() == "]":
            self.take()
            if self.peek() == "?":
                self.take()
                return Iter(optional=True)
            return Iter()
        kind, value = self.tokens[self.pos] if self.pos < len(self.tokens) else ("", "")
        self.pos += 1
        step: Step
        if kind == "string":
            step = Field(json.loads(value))
        elif kind == "number" and value.isdigit():
            step = Index(int(value))
        else:
            raise JqUnsupported(f"'[{value} ...]' (only a field name or an index)")
        self.take("]")
        return step

    def primary(self) -> Node:
        kind, value = self.tokens[self.pos] if self.pos < len(self.tokens) else ("", "")
        if kind == "field":
            self.pos += 1
            return Path((Field(value[1:]),))
        if value == ".":
            self.pos += 1
            if self.kind() == "string":
                return Path((Field(json.loads(self.take())),))
            return Path()
        if value == "..":
            raise JqUnsupported("'..' (recursive descent)")
        if kind == "number":
            self.pos += 1
            number = float(value)
            return Lit(int(number) if number.is_integer() and "." not in value else number)
        if value == "-" and self.tokens[self.pos + 1:self.pos + 2] and \
                self.tokens[self.pos + 1][0] == "number":
            self.pos += 1
            literal = self.primary()
            assert isinstance(literal, Lit) and isinstance(literal.value, int | float)
            return Lit(-literal.value)
        if kind == "string":
            self.pos += 1
            if "\\(" in value:
                raise JqUnsupported("a string with an interpolation")
            return Lit(json.loads(value))
        if value == "(":
            self.pos += 1
            inner = self.pipe()
            self.take(")")
            return inner
        if value == "if":
            self.pos += 1
            return self.conditional()
        if kind == "word" and value in ("true", "false", "null"):
            self.pos += 1
            return Lit({"true": True, "false": False, "null": None}[value])
        if kind == "word" and not value.startswith("$") and value not in _KEYWORDS:
            self.pos += 1
            args: list[Node] = []
            if self.peek() == "(":
                self.take()
                args.append(self.pipe())
                while self.peek() == ";":
                    self.take()
                    args.append(self.pipe())
                self.take(")")
            return Call(value, tuple(args))
        if value == "[":
            raise JqUnsupported("'[...]' (collecting values into an array)")
        if value == "{":
            raise JqUnsupported("'{...}' (building an object)")
        if value.startswith("$"):
            raise JqUnsupported(f"the variable {value}")
        raise JqUnsupported(f"{value or 'the end'!r}")

    def conditional(self) -> Node:
        cond = self.pipe()
        self.take("then")
        then = self.pipe()
        if self.peek() == "elif":
            self.take()
            return If(cond, then, self.conditional())
        self.take("else")
        orelse = self.pipe()
        self.take("end")
        return If(cond, then, orelse)


_KEYWORDS = frozenset({"if", "then", "elif", "else", "end", "and", "or", "as", "def",
                       "reduce", "foreach", "try", "catch", "label", "import", "include"})


def _extend(node: Node, steps: tuple[Step, ...]) -> Node:
    if isinstance(node, Path):
        return Path(node.steps + steps)
    return Pipe(node, Path(steps))


def _optional(node: Node) -> Node:
    """``X?``: only ``.[]?`` is read (``[]`` that does not fail on null)."""
    if isinstance(node, Call) and node.name in ("tonumber", "tostring"):
        return node  # 'tonumber?': a count that is not a number is an error anyway
    if isinstance(node, Path) and node.steps and isinstance(node.steps[-1], Iter):
        return Path((*node.steps[:-1], Iter(optional=True)))
    if isinstance(node, Pipe) and isinstance(node.right, Path):
        return Pipe(node.left, _optional(node.right))
    if isinstance(node, Pipe) and isinstance(node.right, Call) and node.right.name in (
            "tonumber", "tostring"):
        return node  # 'tonumber?': a count that is not a number is an error anyway
    raise JqUnsupported("'?' after anything but '[]'")


def parse_jq(text: str) -> Node:
    """The tree of a jq program; raises :class:`JqUnsupported` for what it does not read."""
    return _Parser(text).parse()
