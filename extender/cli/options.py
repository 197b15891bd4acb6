"""Flags shared by commands, spelled as kubectl spells them, and the parser every command
uses: argument errors as kubectl prints them (one line, then where to read the usage)."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any, NoReturn

from extender.cli.errors import EXIT_ERROR
from extender.core.model.durations import DurationError, parse_seconds

OUTPUTS = ("table", "json", "yaml")
DYNAMIC_FUNCTION = "_muster_dynamic"
"""The shell function of ``muster completion``'s scripts that asks ``muster __complete``."""


class Parser(argparse.ArgumentParser):
    """argparse, answering bad arguments as kubectl does: ``error: MESSAGE`` and
    ``See 'muster get --help' for usage.``, exit 1 (argparse prints the whole usage and
    exits 2). Sub-command parsers are of this class too (argparse makes them so)."""

    def __init__(self, *args: Any, error_exit: int = EXIT_ERROR, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.error_exit = error_exit
        """``fit`` answers yes/no with 0/1, so its argument errors exit 2 as its other errors."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {message}\nSee '{self.prog} --help' for usage.\n")
        sys.exit(self.error_exit)


def duration(text: str) -> float:
    """A positive duration flag in seconds: a Go duration (``5s``, ``500ms``, ``1m30s``) or a
    bare number of seconds, as kubectl's ``--request-timeout`` takes it."""
    try:
        seconds = parse_seconds(text)
    except DurationError as err:
        raise argparse.ArgumentTypeError(
            f"{err}: expected a duration such as 5s, 500ms or 1m30s, or a number of seconds"
        ) from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive duration, got {text!r}")
    return seconds


def add_cluster_flags(parser: argparse.ArgumentParser) -> None:
    """``--kubeconfig`` and ``--context``, for commands that may read a live cluster."""
    parser.add_argument("--kubeconfig", metavar="PATH",
                        help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
    asked_live(parser.add_argument("--context", metavar="NAME",
                                   help="kubeconfig context to use"))
    parser.add_argument("--request-timeout", type=duration, default=10.0, metavar="DURATION",
                        help="give up on an API request after this long: 5s, 1m, or seconds "
                             "(default 10s)")
    add_impersonation_flags(parser)


def add_impersonation_flags(parser: argparse.ArgumentParser) -> None:
    """``--as`` and ``--as-group``: ask the API server as another user, as kubectl does
    (the kubeconfig's user needs RBAC to ``impersonate``)."""
    parser.add_argument("--as", dest="as_user", metavar="USER",
                        help="the user to impersonate for the operation")
    parser.add_argument("--as-group", action="append", default=[], metavar="GROUP",
                        help="a group to impersonate for the operation (one)")


def add_namespace_flags(parser: argparse.ArgumentParser) -> None:
    asked_live(parser.add_argument("-n", "--namespace", metavar="NS",
                                   help="namespace (default: the context's, else 'default')"))
    parser.add_argument("-A", "--all-namespaces", action="store_true",
                        help="every namespace")


def add_output_flag(parser: argparse.ArgumentParser, extra: tuple[str, ...] = ()) -> None:
    parser.add_argument("-o", "--output", choices=(*OUTPUTS, *extra), default="table",
                        help="output format (default: table)")


def add_descriptor_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--descriptors", action="append", default=[], metavar="DIR",
                        help="also load descriptors (Muster or Karta format) from this file or "
                             "directory; repeatable")
    parser.add_argument("--no-builtin", action="store_true",
                        help="leave the packaged descriptor catalog out")


def asked_live(action: argparse.Action) -> argparse.Action:
    """Mark ``action`` as completed by ``muster __complete`` in ``muster completion``'s
    scripts (kinds, names, namespaces, contexts), not from a fixed list."""
    action.complete = {"bash": DYNAMIC_FUNCTION, "zsh": DYNAMIC_FUNCTION}  # type: ignore[attr-defined]
    return action
