"""``muster descriptors list|validate|import-karta``: the descriptor catalog and its files.

    muster descriptors list                         # packaged catalog (+ --descriptors DIR)
    muster descriptors list --context prod          # ... plus the cluster's descriptors
    muster descriptors validate descriptors/*.yaml  # exit 1 and FILE:DOC: field: problem
    muster descriptors validate karta/*.yaml        # Workload Map (Karta) files too
    muster descriptors import-karta karta/*.yaml -o descriptors/   # Karta -> WorkloadDescriptor
    muster descriptors match-condition --context prod   # the webhook's may-join-a-gang CEL

Karta (run.ai/v1alpha1) documents are read wherever descriptors are: --descriptors, -f files,
validate, and the cluster's Karta objects; what a Karta cannot express exactly is printed as
notes. import-karta writes the equivalent native descriptors (JSONPath instead of jq) and says,
per descriptor, what could not be translated exactly, naming the Karta field.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from extender.cli.errors import EXIT_ERROR, EXIT_NO, EXIT_OK, CliError
from extender.cli.options import add_cluster_flags, add_descriptor_flags, add_output_flag
from extender.cli.render import console, emit_data, table
from extender.cli.workloads import (
    Descriptors,
    base_descriptors,
    compile_documents,
    connect_with_descriptors,
    numbered_documents,
    read_text,
)
from extender.core.karta.model import is_karta_document
from extender.core.karta.native import Translation, karta_to_native
from extender.core.workloads.admission import may_join_a_gang
from extender.core.workloads.expressions import DescriptorError


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
    importing = sub.add_parser(
        "import-karta", help="translate Karta files into native WorkloadDescriptors",
        description="Write the WorkloadDescriptor equivalent to each Workload Map (Karta) "
                    "document, and print what could not be translated exactly (notes name "
                    "the Karta field). Exit 1 if a document does not translate, 2 if a file "
                    "cannot be read.")
    importing.add_argument("files", nargs="+", metavar="FILE", help="Karta YAML; - for stdin")
    importing.add_argument("-o", "--output-dir", metavar="DIR",
                           help="write DIR/NAME.yaml per descriptor (default: all to stdout)")
    importing.set_defaults(handler=run_import)
    condition = sub.add_parser(
        "match-condition", help="the admission webhook's may-join-a-gang matchCondition",
        description="Print the CEL expression for the may-join-a-gang matchCondition of "
                    "the gate webhook (manifests/webhook.yaml) or the gate policy "
                    "(manifests/gate-policy/) that fits the catalog in effect: pods it is "
                    "false for cannot be in any gang, and the API server neither calls Muster "
                    "for them nor gates them. Nothing is printed (exit 1) when every pod may "
                    "be (a descriptor of bare Pods has gangs): then drop the condition.")
    add_descriptor_flags(condition)
    add_cluster_flags(condition)
    condition.add_argument("--cluster", action="store_true",
                           help="also read the cluster's WorkloadDescriptor objects (implied "
                                "by --kubeconfig or --context)")
    condition.set_defaults(handler=run_match_condition)


def _in_effect(args: argparse.Namespace) -> Descriptors:
    """The packaged and ``--descriptors`` catalog, plus the cluster's when asked."""
    descriptors = base_descriptors(args)
    if args.cluster or args.kubeconfig or args.context:
        _, descriptors = connect_with_descriptors(args, descriptors)
    return descriptors


def run_match_condition(args: argparse.Namespace) -> int:
    expression = may_join_a_gang(_in_effect(args).catalog)
    if expression is None:
        print("every pod may be in a gang (a Pod descriptor has gangs): no condition",
              file=sys.stderr)
        return EXIT_NO
    print(expression)
    return EXIT_OK


def run_list(args: argparse.Namespace) -> int:
    descriptors = _in_effect(args)
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
        return EXIT_ERROR
    return EXIT_NO if broken else EXIT_OK


class _PlainDumper(yaml.SafeDumper):
    """No ``&id001`` anchors: a count used twice is written twice, as a person would."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _rendered(translation: Translation, where: str) -> str:
    lines = [f"# Translated from Karta {translation.name} ({where}) by muster descriptors "
             "import-karta."]
    if translation.notes:
        lines.append("# Not translated exactly:")
        lines.extend(f"#   {note}" for note in translation.notes)
    body = yaml.dump(translation.document, Dumper=_PlainDumper, sort_keys=False,
                     default_flow_style=False, width=100)
    return "\n".join(lines) + "\n" + body


def run_import(args: argparse.Namespace) -> int:
    """Each Karta -> a native descriptor on stdout (``---`` between) or in ``-o DIR``; notes
    and problems as ``FILE:DOC: ...`` lines (stderr when the YAML goes to stdout)."""
    out_dir = Path(args.output_dir) if args.output_dir else None
    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        raise CliError(f"{out_dir}: exists and is not a directory")
    talk = sys.stdout if out_dir is not None else sys.stderr
    broken = unreadable = False
    written: dict[str, str] = {}
    documents: list[str] = []
    for path in args.files:
        label = "<stdin>" if path == "-" else path
        try:
            docs = list(numbered_documents(read_text(path), label))
        except CliError as err:
            print(str(err), file=sys.stderr)
            unreadable = True
            continue
        for doc, data in docs:
            where = f"{label}:{doc}"
            if not isinstance(data, dict) or not is_karta_document(data):
                kind = data.get("kind") if isinstance(data, dict) else type(data).__name__
                print(f"{where}: not a Karta (run.ai/v1alpha1 Karta), got {kind}",
                      file=sys.stderr)
                broken = True
                continue
            try:
                translation = karta_to_native(data)
            except DescriptorError as err:
                print(f"{where}: {err}", file=sys.stderr)
                broken = True
                continue
            for note in translation.notes:
                print(f"{where}: note: {note}", file=talk)
            text = _rendered(translation, where)
            if out_dir is None:
                documents.append(text)
                continue
            if translation.name in written:
                print(f"{where}: a descriptor named {translation.name} was already written "
                      f"from {written[translation.name]}; not overwritten", file=sys.stderr)
                broken = True
                continue
            target = out_dir / f"{translation.name}.yaml"
            try:
                out_dir.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
            except OSError as err:
                raise CliError(f"cannot write {target}: {err.strerror or err}") from None
            written[translation.name] = where
            print(f"{where}: wrote {target}", file=talk)
    if documents:
        sys.stdout.write("---\n".join(documents))
    if unreadable:
        return EXIT_ERROR
    return EXIT_NO if broken else EXIT_OK
