"""``muster get``: one row per workload with its phase, pods ready/desired, gangs and GPUs.

    muster get jobsets -n ml
    muster get lws -A -o json
    muster get --all-types -A          # every kind the catalog describes and the cluster serves
    muster get -f workloads.yaml       # file mode, no cluster
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from extender.cli.errors import EXIT_ERROR, EXIT_OK, CliError
from extender.cli.livefind import find_all
from extender.cli.options import (
    add_cluster_flags,
    add_descriptor_flags,
    add_namespace_flags,
    add_output_flag,
)
from extender.cli.render import console, emit_data, table
from extender.cli.views import pod_ready
from extender.cli.workloads import (
    Descriptors,
    Found,
    base_descriptors,
    cluster_error,
    connection,
    with_cluster_descriptors,
    workloads_in_file,
)
from extender.core.catalog import UnknownKind
from extender.kube.client import KubeError
from extender.kube.reader import context_namespace


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "get", help="list workloads: phase, pods ready/desired, gangs, GPUs",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("type", nargs="?", metavar="TYPE",
                   help="kind, plural, short name or kind.group, any case")
    p.add_argument("--all-types", action="store_true",
                   help="every kind the catalog describes (and the cluster serves)")
    p.add_argument("-f", "--filename", metavar="FILE",
                   help="list the workloads of a YAML file (- for stdin); no cluster")
    add_namespace_flags(p)
    add_cluster_flags(p)
    add_output_flag(p)
    add_descriptor_flags(p)
    p.set_defaults(handler=run)


def row(found: Found) -> dict[str, Any]:
    tree = found.tree
    return {
        "kind": tree.ref.kind,
        "apiVersion": tree.ref.api_version,
        "name": tree.ref.name,
        "namespace": tree.ref.namespace,
        "descriptor": tree.descriptor,
        "phase": str(tree.phase),
        "pods": tree.pods,
        "readyPods": sum(1 for p in found.pods if pod_ready(p.raw)),
        "gangs": len(tree.gangs),
        "minMembers": [g.min_member for g in tree.gangs],
        "gpus": tree.gpus,
    }


def run(args: argparse.Namespace) -> int:
    if args.type and args.all_types:
        raise CliError("give TYPE or --all-types, not both")
    base = base_descriptors(args)
    if args.filename:
        _, found = workloads_in_file(args.filename, base)
        if args.type:
            found = _of_type(found, base, args.type)
        rows = [row(f) for f in found]
    else:
        if not args.type and not args.all_types:
            raise CliError("give TYPE (for example: muster get jobsets) or --all-types")
        rows = _live(args, base)
    rows.sort(key=lambda r: (r["namespace"], r["kind"], r["name"]))
    if args.output != "table":
        emit_data({"apiVersion": "v1", "kind": "List", "items": rows}, args.output)
        return EXIT_OK
    if not rows:
        print("No workloads found.", file=sys.stderr)
        return EXIT_OK
    kinds = len({r["kind"] for r in rows}) > 1
    namespaces = len({r["namespace"] for r in rows}) > 1 or args.all_namespaces
    columns = [*(["NAMESPACE"] if namespaces else []), *(["KIND"] if kinds else []),
               "NAME", "PHASE", "READY", "GANGS", "GPUS"]
    lines = []
    for r in rows:
        gangs = (f"{r['gangs']} (min {'/'.join(str(m) for m in r['minMembers'])})"
                 if r["gangs"] else "-")
        lines.append([*([r["namespace"]] if namespaces else []), *([r["kind"]] if kinds else []),
                      r["name"], r["phase"], f"{r['readyPods']}/{r['pods']}", gangs, r["gpus"]])
    console().print(table(columns, lines))
    return EXIT_OK


def _of_type(found: list[Found], base: Descriptors, name: str) -> list[Found]:
    try:
        wanted = {(d.target.group, d.target.kind) for d in base.catalog.find_type(name)}
    except UnknownKind as err:
        raise CliError(str(err)) from None
    return [f for f in found if (f.tree.ref.api_version.rpartition("/")[0], f.tree.ref.kind)
            in wanted]


def _live(args: argparse.Namespace, base: Descriptors) -> list[dict[str, Any]]:
    conn = connection(args)
    try:
        descriptors, problems = with_cluster_descriptors(base, conn)
        if args.all_types:
            kinds = list(descriptors.catalog.descriptors)
        else:
            try:
                kinds = list(descriptors.catalog.find_type(args.type))
            except UnknownKind as err:
                raise CliError(str(err), exit_code=EXIT_ERROR) from None
        namespace = None if args.all_namespaces else (
            args.namespace or context_namespace(args.kubeconfig, args.context))
        found, trouble = find_all(conn, descriptors, kinds, namespace)
    except KubeError as err:
        raise cluster_error(err) from None
    for problem in [*problems, *trouble]:
        print(f"warning: {problem}", file=sys.stderr)
    return [row(f) for f in found]
