"""``muster descriptors list|validate``: the descriptor catalog and its files.

    muster descriptors list                         # packaged catalog (+ --descriptors DIR)
    muster descriptors list --context prod          # ... plus the cluster's WorkloadDescriptors
    muster descriptors validate descriptors/*.yaml  # exit 1 and FILE:DOC: field: problem
    muster descriptors validate karta/*.yaml        # Workload Map (Karta) files too

Karta (run.ai/v1alpha1) documents are read wherever descriptors are: --descriptors, -f files
and validate; what a Karta cannot express exactly is printed as notes.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from extender.cli.errors import EXIT_INPUT, EXIT_NO, EXIT_OK, CliError
from extender.cli.options import add_cluster_flags, add_descriptor_flags, add_output_flag
from extender.cli.render import console, emit_data, table
from extender.cli.workloads import (
    base_descriptors,
    cluster_error,
    compile_documents,
    connection,
    numbered_documents,
    read_text,
    with_cluster_descriptors,
)
from extender.kube.client import KubeError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "descriptors", help="list or validate workload descriptors (Muster or Karta format)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = sub.add_parser("list", help="the descriptors in effect, with their source")
    add_descriptor_flags(listing)
    add_cluster_flags(listing)
    listing.add_argument("--cluster", action="store_true",
                         help="also read the cluster's WorkloadDescriptor objects (implied by "
                              "--kubeconfig or --context)")
    add_output_flag(listing)
    listing.set_defaults(handler=run_list)
    validate = sub.add_parser("validate", help="check descriptor files (Muster or Karta)")
    validate.add_argument("files", nargs="+", metavar="FILE", help="YAML files; - for stdin")
    validate.set_defaults(handler=run_validate)


def run_list(args: argparse.Namespace) -> int:
    descriptors = base_descriptors(args)
    if args.cluster or args.kubeconfig or args.context:
        conn = connection(args)
        try:
            descriptors, problems = with_cluster_descriptors(descriptors, conn)
        except KubeError as err:
            raise cluster_error(err) from None
        for problem in problems:
            print(f"warning: {problem}", file=sys.stderr)
    rows = []
    for d in descriptors.catalog.descriptors:
        origin = descriptors.origin(d.name)
        rows.append({"name": d.name, "kind": d.target.kind, "group": d.target.group,
                     "versions": list(d.target.versions), "plural": d.target.plural,
                     "shortNames": list(d.target.short_names),
                     "gangPolicy": str(d.gangs.policy), "format": origin.format,
                     "source": origin.source})
    if args.output != "table":
        emit_data({"descriptors": rows}, args.output)
        return EXIT_OK
    console().print(table(
        ("NAME", "KIND", "GROUP", "VERSIONS", "GANGS", "FORMAT", "SOURCE"),
        [(r["name"], r["kind"], r["group"] or "(core)", ",".join(r["versions"]),
          r["gangPolicy"], r["format"], r["source"]) for r in rows]))
    return EXIT_OK


def run_validate(args: argparse.Namespace) -> int:
    """Every problem of every file, as ``FILE:DOC: field.path: message``; an OK line per good
    descriptor. Exit 1 if a descriptor is broken, 2 if a file cannot be read at all."""
    broken = unreadable = False
    for path in args.files:
        label = "<stdin>" if path == "-" else path
        try:
            docs = list(numbered_documents(read_text(path), label))
        except CliError as err:
            print(str(err), file=sys.stderr)
            unreadable = True
            continue
        if not docs:
            print(f"{label}: no documents", file=sys.stderr)
            broken = True
            continue
        found, problems = compile_documents(docs, label, source="file")
        for problem in problems:
            print(str(problem))
        broken = broken or bool(problems)
        for descriptor, origin in found:
            t = descriptor.target
            print(f"{origin.where}: OK {descriptor.name} ({t.group_kind} "
                  f"{','.join(t.versions)}; gangs: {descriptor.gangs.policy}; "
                  f"format: {origin.format})")
            for note in descriptor.notes:
                print(f"{origin.where}: note: {note}")
    if unreadable:
        return EXIT_INPUT
    return EXIT_NO if broken else EXIT_OK
