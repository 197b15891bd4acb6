"""What a TAB offers on a ``muster`` (or ``kubectl muster``) command line: sub-commands and
flags from the command's own parser, kinds from the descriptor catalog, and namespaces,
contexts and object names from the cluster of the context the line names (else the current
one), as ``kubectl``'s dynamic completion offers them.

:func:`complete` decides what the word being typed is and filters what it is offered; it asks
the cluster only through a :class:`Lookup`, so it is tested on given lists. :class:`Cluster`
is the lookup that asks the API server, briefly, and offers nothing where it cannot ask.
The answer is printed as Cobra's ``__complete`` prints it (one candidate a line, then
``:DIRECTIVE``), which kubectl reads from a plugin's ``kubectl_complete-muster``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

NO_FILES = 4
"""Cobra's ``ShellCompDirectiveNoFileComp``: offer these words only, never file names."""
FILES = 0
"""Cobra's ``ShellCompDirectiveDefault``: nothing to offer, the shell completes file names."""
FILE_FLAGS = frozenset({"filename", "kubeconfig", "descriptors", "snapshot",
                        "certificate_authority", "client_certificate", "client_key", "dir"})
"""Flags (by ``dest``) whose value is a path: the shell completes them."""
TYPED = frozenset({"get", "describe"})
"""Commands whose positional words are ``TYPE[/NAME] [NAME]``."""


class Lookup(Protocol):
    """What :func:`complete` may ask the cluster (``options``: the flags on the line so far,
    ``kubeconfig``, ``context``, ``namespace``, ``all_namespaces``)."""

    def kinds(self) -> list[str]: ...

    def namespaces(self, options: argparse.Namespace) -> list[str]: ...

    def contexts(self, options: argparse.Namespace) -> list[str]: ...

    def names(self, options: argparse.Namespace, type_name: str) -> list[str]: ...


@dataclass(frozen=True)
class Answer:
    words: list[str]
    directive: int = NO_FILES

    def text(self) -> str:
        """As Cobra's ``__complete`` prints it."""
        return "".join(f"{w}\n" for w in self.words) + f":{self.directive}\n"


@dataclass
class _Line:
    """The words before the one being typed, read against the innermost parser they reach."""

    parser: argparse.ArgumentParser
    path: list[str] = field(default_factory=list)
    positionals: list[str] = field(default_factory=list)
    pending: argparse.Action | None = None
    """The flag the word being typed is the value of."""


def complete(parser: argparse.ArgumentParser, words: Sequence[str], lookup: Lookup) -> Answer:
    """The candidates for the last of ``words`` (the arguments after ``muster``; ``""``: a new
    word, nothing typed yet)."""
    *before, typed = words or [""]
    line = _read(parser, before)
    options = _options(line.parser, before)
    if line.pending is not None:
        return _value(line.pending, typed, options, lookup)
    if typed.startswith("-"):
        return _starting(typed, [s for a in line.parser._actions for s in a.option_strings
                                 if a.help != argparse.SUPPRESS])
    commands = _subcommands(line.parser)
    if commands is not None:
        return _starting(typed, sorted(c for c in commands if not c.startswith("_")))
    if line.path and line.path[-1] in TYPED:
        return _target(line.positionals, typed, options, lookup)
    positional = [a for a in line.parser._actions if not a.option_strings and a.dest != "help"]
    choices = [str(c) for a in positional[len(line.positionals):][:1] for c in a.choices or ()]
    return _starting(typed, choices) if choices else Answer([], FILES)


def _read(parser: argparse.ArgumentParser, before: Sequence[str]) -> _Line:
    line = _Line(parser)
    for word in before:
        if line.pending is not None:
            line.pending = None
            continue
        action = _flag(line.parser, word)
        if action is not None:
            takes_value = action.nargs != 0 and "=" not in word
            line.pending = action if takes_value else None
            continue
        commands = _subcommands(line.parser)
        if commands is not None and word in commands:
            line.parser = commands[word]
            line.path.append(word)
            line.positionals = []
        elif not word.startswith("-"):
            line.positionals.append(word)
    return line


def _options(parser: argparse.ArgumentParser, before: Sequence[str]) -> argparse.Namespace:
    """The cluster flags given so far (``-n ml``, ``--context=prod``, ``-A``)."""
    options = argparse.Namespace(kubeconfig=None, context=None, namespace=None,
                                 all_namespaces=False, as_user=None, as_group=[])
    for i, word in enumerate(before):
        action = _flag(parser, word)
        if action is None or not hasattr(options, action.dest):
            continue
        if action.nargs == 0:
            setattr(options, action.dest, True)
        elif "=" in word:
            setattr(options, action.dest, word.partition("=")[2])
        elif i + 1 < len(before):
            value = before[i + 1]
            setattr(options, action.dest, [value] if action.dest == "as_group" else value)
    return options


def _flag(parser: argparse.ArgumentParser, word: str) -> argparse.Action | None:
    if not word.startswith("-"):
        return None
    return parser._option_string_actions.get(word.partition("=")[0])


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser] | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return None


def _value(action: argparse.Action, typed: str, options: argparse.Namespace,
           lookup: Lookup) -> Answer:
    if action.dest == "namespace":
        return _starting(typed, _quiet(lambda: lookup.namespaces(options)))
    if action.dest == "context":
        return _starting(typed, _quiet(lambda: lookup.contexts(options)))
    if action.choices:
        return _starting(typed, [str(c) for c in action.choices])
    return Answer([], FILES if action.dest in FILE_FLAGS else NO_FILES)


def _target(positionals: Sequence[str], typed: str, options: argparse.Namespace,
            lookup: Lookup) -> Answer:
    """``TYPE``, ``TYPE/NAME`` or, after a ``TYPE``, ``NAME``."""
    if not positionals:
        type_name, slash, partial = typed.partition("/")
        if not slash:
            return _starting(typed, lookup.kinds())
        names = _quiet(lambda: lookup.names(options, type_name))
        return Answer([f"{type_name}/{n}" for n in names if n.startswith(partial)])
    if len(positionals) == 1 and "/" not in positionals[0]:
        return _starting(typed, _quiet(lambda: lookup.names(options, positionals[0])))
    return Answer([])


def _starting(typed: str, words: Sequence[str]) -> Answer:
    return Answer([w for w in dict.fromkeys(words) if w.startswith(typed)])


def _quiet(ask: Callable[[], list[str]]) -> list[str]:
    """What the lookup answers; nothing when it cannot (a TAB never prints an error)."""
    try:
        return sorted(ask())
    except Exception:  # any failure to ask: no candidates, as kubectl offers none offline
        return []
