"""``muster get``: one row per workload with its phase, pods ready/desired, gangs, GPUs, age;
live, each gang's Gang object (GANG) and its state (STATE) when the cluster has them.

    muster get jobsets -n ml
    muster get js/train -n ml           # TYPE/NAME or TYPE NAME: one workload
    muster get gangs -A                 # the Gang objects: state, bound, minimum, reason
    muster get lws -A -o json
    muster get jobsets -l team=nlp,tier!=debug -o wide
    muster get jobsets -A --sort-by .metadata.creationTimestamp
    muster get jobsets -o name          # jobset.jobset.x-k8s.io/train, as kubectl prints it
    muster get --all-types -A           # every kind the catalog describes and the cluster serves
    muster get -f workloads.yaml        # file mode, no cluster
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from extender.cli.errors import EXIT_ERROR, EXIT_OK, CliError
from extender.cli.gangread import (
    GANG_TYPES,
    get_gangs,
    object_name,
    object_state,
    read_gang_objects,
)
from extender.cli.listing import SortBy, age_of, resource_name
from extender.cli.livefind import (
    connect_described,
    find_all,
    find_type,
    namespace_of,
    parse_target,
)
from extender.cli.options import (
    add_cluster_flags,
    add_descriptor_flags,
    add_namespace_flags,
    add_output_flag,
)
from extender.cli.render import console, emit_data, table
from extender.cli.selectors import Selector, parse_selector
from extender.cli.views import pod_ready, shown_phase
from extender.cli.workloads import (
    Descriptors,
    Found,
    base_descriptors,
    cluster_error,
    workloads_in_file,
)
from extender.kube.client import KubeError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "get", help="list workloads: phase, pods ready/desired, gangs, GPUs",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", nargs="*", metavar="TYPE[/NAME] [NAME]",
                   help="kind, plural, short name or kind.group, any case (gangs: the Gang "
                        "objects); TYPE/NAME or TYPE NAME: that workload only")
    p.add_argument("--all-types", action="store_true",
                   help="every kind the catalog describes (and the cluster serves)")
    p.add_argument("-f", "--filename", metavar="FILE",
                   help="list the workloads of a YAML file (- for stdin); no cluster")
    p.add_argument("-l", "--selector", metavar="SELECTOR",
                   help="label selector, as kubectl's: a=b, a==b, a!=b, 'a in (x,y)', "
                        "'a notin (x)', a, !a; comma-separated requirements all hold")
    p.add_argument("--sort-by", metavar="JSONPATH",
                   help="sort by this field of the workload objects, as kubectl's: "
                        "'{.metadata.creationTimestamp}', .spec.replicatedJobs[0].replicas")
    add_namespace_flags(p)
    add_cluster_flags(p)
    add_output_flag(p, extra=("wide", "name"))
    p.add_argument("--no-headers", action="store_true",
                   help="print the table without its header line")
    add_descriptor_flags(p)
    p.set_defaults(handler=run)


def row(found: Found, objects: Mapping[str, Mapping[str, Any]] | None = None,
        ) -> dict[str, Any]:
    """One workload's row; with ``objects`` (the Gang objects by gang key), its gangs' Gang
    objects and their states too (``-`` where a gang has none yet)."""
    tree = found.tree
    meta = found.raw.get("metadata")
    out: dict[str, Any] = {
        "kind": tree.ref.kind,
        "apiVersion": tree.ref.api_version,
        "name": tree.ref.name,
        "namespace": tree.ref.namespace,
        "descriptor": tree.descriptor,
        "phase": str(shown_phase(found)),
        "pods": tree.pods,
        "readyPods": sum(1 for p in found.pods if pod_ready(p.raw)),
        "gangs": len(tree.gangs),
        "minMembers": [g.min_member for g in tree.gangs],
        "gpus": tree.gpus,
        "creationTimestamp": meta.get("creationTimestamp") if isinstance(meta, Mapping) else None,
        "nodes": sorted({p.info.node_name for p in found.pods if p.info.node_name}),
    }
    if objects is not None:
        out["gangObjects"] = [
            {"gang": g.key, "name": object_name(objects[g.key]),
             "state": object_state(objects[g.key])} if g.key in objects else
            {"gang": g.key, "name": "-", "state": "-"} for g in tree.gangs]
    return out


def run(args: argparse.Namespace) -> int:
    kind, name = parse_target(args.target) if args.target else (None, None)
    if kind and args.all_types:
        raise CliError("give TYPE or --all-types, not both")
    if kind is not None and kind.lower() in GANG_TYPES and not args.filename:
        return get_gangs(args, name)
    sort_by = SortBy(args.sort_by) if args.sort_by else None
    found, objects = _selected(args, kind, name)
    found.sort(key=lambda f: (f.tree.ref.namespace, f.tree.ref.kind, f.tree.ref.name))
    if sort_by is not None:  # stable: ties keep the order above
        found = sort_by.sort(found, lambda f: f.raw)
    if args.output in ("json", "yaml"):  # the objects themselves, as kubectl prints them
        emit_data({"apiVersion": "v1", "kind": "List", "items": [f.raw for f in found]},
                  args.output)
        return EXIT_OK
    rows = [row(f, objects) for f in found]
    if args.output == "name":
        for r in rows:
            print(resource_name(r["kind"], r["apiVersion"], r["name"]))
        return EXIT_OK
    if not rows:
        where = "" if args.all_namespaces or args.filename else " in this namespace"
        print(f"No workloads found{where}.", file=sys.stderr)
        return EXIT_OK
    console().print(_table(rows, wide=args.output == "wide", namespaces=args.all_namespaces,
                           now=datetime.now(UTC), headers=not args.no_headers))
    return EXIT_OK


def _selected(args: argparse.Namespace, kind: str | None, name: str | None,
              ) -> tuple[list[Found], dict[str, dict[str, Any]] | None]:
    """The workloads asked for (of ``kind``, named ``name``, selected by ``-l``) and, live,
    the Gang objects by gang key."""
    selector = parse_selector(args.selector) if args.selector is not None else None
    base = base_descriptors(args)
    objects = None
    if args.filename:
        _, found = workloads_in_file(args.filename, base)
        if kind:
            found = _of_type(found, base, kind)
    else:
        if not kind and not args.all_types:
            raise CliError("give TYPE (for example: muster get jobsets) or --all-types")
        found, objects = _listed(args, base, selector, kind)
    if selector is not None:  # file mode filters here; live, the API server filtered too
        found = [f for f in found if selector.matches(_labels(f.raw))]
    if name is not None:
        found = [f for f in found if f.tree.ref.name == name]
        if not found:
            raise CliError(f'{kind} "{name}" not found', exit_code=EXIT_ERROR)
    return found, objects


def _table(rows: list[dict[str, Any]], *, wide: bool, namespaces: bool, now: datetime,
           headers: bool = True) -> Any:
    kinds = len({r["kind"] for r in rows}) > 1
    namespaces = namespaces or len({r["namespace"] for r in rows}) > 1
    objects = any("gangObjects" in r for r in rows)
    columns = [*(["NAMESPACE"] if namespaces else []), *(["KIND"] if kinds else []),
               "NAME", "PHASE", "READY", "GANGS", *(["GANG", "STATE"] if objects else []),
               "GPUS", "AGE", *(["DESCRIPTOR", "NODES"] if wide else [])]
    lines = []
    for r in rows:
        gangs = (f"{r['gangs']} (min {'/'.join(str(m) for m in r['minMembers'])})"
                 if r["gangs"] else "-")
        own = r.get("gangObjects") or [{"name": "-", "state": "-"}]
        age = age_of({"metadata": {"creationTimestamp": r["creationTimestamp"]}}, now)
        extra = [r["descriptor"], ",".join(r["nodes"]) or "<none>"] if wide else []
        lines.append([*([r["namespace"]] if namespaces else []), *([r["kind"]] if kinds else []),
                      r["name"], r["phase"], f"{r['readyPods']}/{r['pods']}", gangs,
                      *([",".join(o["name"] for o in own), ",".join(o["state"] for o in own)]
                        if objects else []),
                      r["gpus"], age, *extra])
    return table(columns, lines, headers=headers)


def _labels(raw: Mapping[str, Any]) -> Mapping[str, str]:
    meta = raw.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


def _of_type(found: list[Found], base: Descriptors, name: str) -> list[Found]:
    wanted = {(d.target.group, d.target.kind) for d in find_type(base.catalog, name)}
    return [f for f in found if (f.tree.ref.api_version.rpartition("/")[0], f.tree.ref.kind)
            in wanted]


def _listed(args: argparse.Namespace, base: Descriptors, selector: Selector | None,
            kind: str | None) -> tuple[list[Found], dict[str, dict[str, Any]] | None]:
    """The workloads listed, and the Gang objects by gang key (``None``: the cluster has
    none to read)."""
    conn, descriptors, kinds = connect_described(args, base, None if args.all_types else kind)
    namespace = None if args.all_namespaces else namespace_of(args)
    try:
        found, trouble = find_all(conn, descriptors, kinds, namespace,
                                  label_selector=selector.text if selector else None)
        objects, problem = read_gang_objects(conn, namespace) if found else (None, "")
    except KubeError as err:
        raise cluster_error(err) from None
    for problem_text in [*trouble, *([problem] if problem else [])]:
        print(f"warning: {problem_text}", file=sys.stderr)
    return found, objects
