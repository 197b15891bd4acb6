"""Flags shared by commands, spelled as kubectl spells them."""

from __future__ import annotations

import argparse

OUTPUTS = ("table", "json", "yaml")


def add_cluster_flags(parser: argparse.ArgumentParser) -> None:
    """``--kubeconfig`` and ``--context``, for commands that may read a live cluster."""
    parser.add_argument("--kubeconfig", metavar="PATH",
                        help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
    parser.add_argument("--context", metavar="NAME", help="kubeconfig context to use")
    parser.add_argument("--request-timeout", type=float, default=10.0, metavar="SECONDS",
                        help="give up on an API request after this long (default 10)")


def add_namespace_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--namespace", metavar="NS",
                        help="namespace (default: the context's, else 'default')")
    parser.add_argument("-A", "--all-namespaces", action="store_true",
                        help="every namespace")


def add_output_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", choices=OUTPUTS, default="table",
                        help="output format (default: table)")


def add_descriptor_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--descriptors", action="append", default=[], metavar="DIR",
                        help="also load descriptors (Muster or Karta format) from this file or "
                             "directory; repeatable")
    parser.add_argument("--no-builtin", action="store_true",
                        help="leave the packaged descriptor catalog out")
