"""Entry point of the ``muster`` command: one sub-command per module in :data:`COMMANDS`.

Each command module exposes ``register(subparsers)`` which adds its parser and sets
``handler`` (a function ``args -> int`` exit code). Exit codes are kubectl's (see
:mod:`extender.cli.errors` and ``docs/cli.md``): 0 success, 1 any error or the answer "no",
2 for ``fit`` when there is no answer.

``kubectl-muster`` is the same command under the name kubectl looks for on PATH, so
``kubectl muster describe jobset/x`` runs ``muster describe jobset/x``; ``muster __complete
WORD...`` (kubectl's plugins answer a TAB through ``kubectl_complete-muster``) prints the
candidates for the last word (:mod:`extender.cli.candidates`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from extender import __version__
from extender.cli.errors import EXIT_ERROR, EXIT_OK, CliError
from extender.cli.options import Parser

#: Sub-command modules, in help order.
COMMANDS: tuple[str, ...] = (
    "serve",
    "sandbox",
    "simulate",
    "demo",
    "describe",
    "get",
    "descriptors_cmd",
    "fit",
    "record",
    "forecast",
    "completion",
)


def build_parser(prog: str = "muster") -> argparse.ArgumentParser:
    parser = Parser(
        prog=prog,
        description="Gang scheduling for AI workloads with the stock kube-scheduler.",
    )
    parser.add_argument("--version", action="version", version=f"muster {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"extender.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None, *, prog: str = "muster") -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["__complete"]:  # a TAB in the shell: candidates, never an error
        from extender.cli.completion import answer  # noqa: PLC0415 - only a TAB needs it

        return answer(words[1:], prog)
    parser = build_parser(prog)
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # named by the sub-command it was given to, as kubectl does
            word = "flag" if extra[0].startswith("-") else "argument"
            _chosen(parser, args).error(f"unknown {word}: {' '.join(extra)}")
    except SystemExit as done:  # --help, --version, or an argument error already printed
        return done.code if isinstance(done.code, int) else EXIT_ERROR
    handler = getattr(args, "handler", None)
    if handler is None:  # bare `muster`, as bare `kubectl`: the help, and success
        parser.print_help(sys.stdout)
        return EXIT_OK
    try:
        code: int = handler(args)
    except CliError as err:
        print(f"error: {err}", file=sys.stderr)
        return getattr(args, "error_exit", None) or err.exit_code
    except KeyboardInterrupt:
        return 130
    return code


def _chosen(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost sub-command parser ``args`` went through (``muster descriptors list``)."""
    while True:
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not actions:
            return parser
        chosen = getattr(args, actions[0].dest or "", None)
        if chosen is None or chosen not in actions[0].choices:
            return parser
        parser = actions[0].choices[chosen]


def kubectl_plugin() -> None:
    """The ``kubectl-muster`` console script: kubectl runs it for ``kubectl muster ...``, with
    the arguments after ``muster``; usage and errors then name ``kubectl muster``."""
    sys.exit(main(prog="kubectl muster"))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
