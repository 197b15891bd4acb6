"""``muster descriptors list|validate|import-karta``: the descriptor catalog and its files.

    muster descriptors list                         # packaged catalog (+ --descriptors DIR)
    muster descriptors list --context prod          # ... plus the cluster's WorkloadDescriptors
    muster descriptors validate descriptors/*.yaml  # exit 1 and FILE:DOC: field: problem
    muster descriptors import-karta karta/*.yaml    # Workload Map (Karta) -> Muster YAML
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from extender.cli.errors import EXIT_INPUT, EXIT_NO, EXIT_OK, CliError
from extender.cli.options import add_cluster_flags, add_descriptor_flags, add_output_flag
from extender.cli.render import console, emit_data, table
from extender.cli.workloads import (
    base_descriptors,
    cluster_error,
    compile_documents,
    connection,
    is_karta,
    karta_available,
    karta_to_native,
    numbered_documents,
    read_text,
    with_cluster_descriptors,
)
from extender.core.descriptor import DescriptorError
from extender.kube.client import KubeError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "descriptors", help="list, validate or import workload descriptors",
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
    karta = sub.add_parser("import-karta",
                           help="convert Workload Map (Karta) descriptors to Muster's format")
    karta.add_argument("files", nargs="+", metavar="FILE", help="Karta YAML files; - for stdin")
    karta.add_argument("-o", "--output-dir", metavar="DIR",
                       help="write one NAME.yaml per descriptor here instead of to stdout")
    karta.set_defaults(handler=run_import_karta)


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
    if unreadable:
        return EXIT_INPUT
    return EXIT_NO if broken else EXIT_OK


def run_import_karta(args: argparse.Namespace) -> int:
    if not karta_available():
        raise CliError("import-karta needs the Karta converter (extender.core.karta), which "
                       "this version of Muster lacks")
    out_dir = Path(args.output_dir) if args.output_dir else None
    if out_dir is not None and not out_dir.is_dir():
        raise CliError(f"-o {out_dir}: not a directory")
    converted: list[dict[str, Any]] = []
    failed = False
    for path in args.files:
        label = "<stdin>" if path == "-" else path
        for doc, data in numbered_documents(read_text(path), label):
            if not is_karta(data):
                print(f"{label}:{doc}: not a Karta (run.ai/v1alpha1) document; skipped",
                      file=sys.stderr)
                failed = True
                continue
            try:
                native, notes = karta_to_native(data)
            except DescriptorError as err:
                print(f"{label}:{doc}: {err}", file=sys.stderr)
                failed = True
                continue
            for note in notes:
                print(f"{label}:{doc}: note: {note}", file=sys.stderr)
            converted.append(native)
    for native in converted:
        text = yaml.safe_dump(native, sort_keys=False, default_flow_style=False)
        if out_dir is None:
            sys.stdout.write("---\n" + text)
            continue
        name = str((native.get("metadata") or {}).get("name") or "descriptor")
        target = out_dir / f"{name}.yaml"
        try:
            target.write_text(text, encoding="utf-8")
        except OSError as err:
            raise CliError(f"{target}: cannot write: {err.strerror or err}") from None
        print(f"wrote {target}", file=sys.stderr)
    return EXIT_NO if failed else EXIT_OK
