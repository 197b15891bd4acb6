"""Entry point of the ``muster`` command: one sub-command per module in :data:`COMMANDS`.

Each command module exposes ``register(subparsers)`` which adds its parser and sets
``handler`` (a function ``args -> int`` exit code). Exit codes are documented in
``docs/cli.md``: 0 success, 1 the answer is "no" (does not fit, invalid descriptor), 2 usage or
input error, 3 cluster unreachable.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from extender import __version__
from extender.cli.errors import EXIT_INPUT, CliError

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
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="muster",
        description="Gang scheduling for AI workloads with the stock kube-scheduler.",
    )
    parser.add_argument("--version", action="version", version=f"muster {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"extender.cli.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_INPUT
    try:
        code: int = handler(args)
    except CliError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
