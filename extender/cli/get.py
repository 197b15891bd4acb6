"""``muster get``: one row per workload with its phase, pods ready/desired, gangs, GPUs, age;
live, each gang's Gang object (GANG) and its state (STATE) when the cluster has them.

    muster get jobsets -n ml
    muster get js/train -n ml           # TYPE/NAME or TYPE NAME: one workload
    muster get gangs -A                 # the Gang objects: state, bound, minimum, reason
    muster get gangs -n ml -w           # then a row each time one changes, until Ctrl-C
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
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from extender.cli.errors import EXIT_ERROR, EXIT_OK, CliError
from extender.cli.gangread import (
    GANG_TYPES,
    GANGS,
    get_gangs,
    object_name,
    object_state,
    read_gang_objects,
)
from extender.cli.listing import SortBy, age_of, resource_name
from extender.cli.livefind import (
    connect_described,
    distinct_kinds,
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
    asked_live,
)
from extender.cli.render import console, emit_data, table
from extender.cli.selectors import Selector, parse_selector
from extender.cli.views import pod_ready, shown_phase
from extender.cli.watching import Changes, Rows, follow_objects, follow_table
from extender.cli.workloads import (
    Descriptors,
    Found,
    base_descriptors,
    cluster_error,
    workloads_in_file,
)
from extender.core.workloads.descriptor import Descriptor
from extender.kube.client import Connection, KubeError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "get", help="list workloads: phase, pods ready/desired, gangs, GPUs",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    asked_live(p.add_argument(
        "target", nargs="*", metavar="TYPE[/NAME] [NAME]",
        help="kind, plural, short name or kind.group, any case (gangs: the Gang objects); "
             "TYPE/NAME or TYPE NAME: that workload only"))
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
    p.add_argument("-w", "--watch", action="store_true",
                   help="after the list, print a row each time a listed object (a workload or "
                        "its Gang object) changes, until interrupted")
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
    if args.watch and args.filename:
        raise CliError("--watch follows a cluster's objects; a file (-f) does not change")
    if kind is not None and kind.lower() in GANG_TYPES and not args.filename:
        return get_gangs(args, name)
    sort_by = SortBy(args.sort_by) if args.sort_by else None
    selector = parse_selector(args.selector) if args.selector is not None else None
    base = base_descriptors(args)
    live = None if args.filename else _Live.connect(args, base, kind, selector)
    changes = live.changes() if live is not None and args.watch else None

    def read(*, strict: bool = True) -> tuple[list[Found], dict[str, dict[str, Any]] | None]:
        found, objects = _selected(args, base, live, (kind, name), strict=strict)
        found.sort(key=lambda f: (f.tree.ref.namespace, f.tree.ref.kind, f.tree.ref.name))
        if sort_by is not None:  # stable: ties keep the order above
            found = sort_by.sort(found, lambda f: f.raw)
        return found, objects

    found, objects = read()
    if args.output in ("json", "yaml"):  # the objects themselves, as kubectl prints them
        emit_data({"apiVersion": "v1", "kind": "List", "items": [f.raw for f in found]},
                  args.output)
        if changes is not None:
            follow_objects(changes, lambda: [f.raw for f in read(strict=False)[0]],
                           [f.raw for f in found], key=_raw_key, output=args.output)
        return EXIT_OK
    rows = [row(f, objects) for f in found]
    layout = _Layout.of(rows, wide=args.output == "wide", namespaces=args.all_namespaces,
                        kinds=live is not None and len(live.kinds) > 1,
                        objects=objects is not None)
    now = datetime.now(UTC)
    if args.output == "name":
        for r in rows:
            print(_name(r), flush=True)
    elif not rows and changes is None:
        where = "" if args.all_namespaces or args.filename else " in this namespace"
        print(f"No workloads found{where}.", file=sys.stderr)
    elif rows or not args.no_headers:
        console().print(table(layout.columns, [layout.line(r, now) for r in rows],
                              headers=not args.no_headers))
        sys.stdout.flush()
    if changes is not None:
        follow_table(changes, lambda: [row(f, o) for fs, o in [read(strict=False)] for f in fs],
                     rows, Rows(key=lambda r: (r["namespace"], r["kind"], r["name"]),
                                columns=layout.columns, line=layout.line,
                                name=_name if args.output == "name" else None))
    return EXIT_OK


@dataclass(frozen=True)
class _Live:
    """The cluster ``get`` lists from, with its descriptors and the kinds asked for."""

    conn: Connection
    descriptors: Descriptors
    kinds: list[Descriptor]
    namespace: str | None
    selector: Selector | None

    @classmethod
    def connect(cls, args: argparse.Namespace, base: Descriptors, kind: str | None,
                selector: Selector | None) -> _Live:
        if not kind and not args.all_types:
            raise CliError("give TYPE (for example: muster get jobsets) or --all-types")
        conn, descriptors, kinds = connect_described(args, base,
                                                     None if args.all_types else kind)
        namespace = None if args.all_namespaces else namespace_of(args)
        return cls(conn, descriptors, distinct_kinds(kinds), namespace, selector)

    def listed(self) -> tuple[list[Found], dict[str, dict[str, Any]] | None]:
        """The workloads listed, and the Gang objects by gang key (``None``: the cluster has
        none to read)."""
        try:
            found, trouble = find_all(self.conn, self.descriptors, self.kinds, self.namespace,
                                      label_selector=self.selector.text if self.selector
                                      else None)
            objects, problem = (read_gang_objects(self.conn, self.namespace) if found
                                else (None, ""))
        except KubeError as err:
            raise cluster_error(err) from None
        for problem_text in [*trouble, *([problem] if problem else [])]:
            print(f"warning: {problem_text}", file=sys.stderr)
        return found, objects

    def changes(self) -> Changes:
        """Watches of the kinds listed and of the Gang objects, started."""
        try:
            served = self.conn.resource_types()
        except KubeError as err:
            raise cluster_error(err) from None
        types = [served[key] for key in [*((d.target.group, d.target.kind) for d in self.kinds),
                                         (GANGS.group, GANGS.kind)] if key in served]
        return Changes(self.conn, types, self.namespace).start()


def _selected(args: argparse.Namespace, base: Descriptors, live: _Live | None,
              target: tuple[str | None, str | None], *, strict: bool = True,
              ) -> tuple[list[Found], dict[str, dict[str, Any]] | None]:
    """The workloads asked for (``target``: of a kind, named a name; selected by ``-l``) and,
    live, the Gang objects by gang key. ``strict``: a name not found is an error."""
    kind, name = target
    selector = parse_selector(args.selector) if args.selector is not None else None
    objects = None
    if live is None:
        _, found = workloads_in_file(args.filename, base)
        if kind:
            found = _of_type(found, base, kind)
    else:
        found, objects = live.listed()
    if selector is not None:  # file mode filters here; live, the API server filtered too
        found = [f for f in found if selector.matches(_labels(f.raw))]
    if name is not None:
        found = [f for f in found if f.tree.ref.name == name]
        if not found and strict:
            raise CliError(f'{kind} "{name}" not found', exit_code=EXIT_ERROR)
    return found, objects


@dataclass(frozen=True)
class _Layout:
    """The table's columns, fixed by its first rows: rows ``-w`` prints later keep them."""

    wide: bool
    namespaces: bool
    kinds: bool
    objects: bool

    @classmethod
    def of(cls, rows: list[dict[str, Any]], *, wide: bool, namespaces: bool, kinds: bool,
           objects: bool) -> _Layout:
        """KIND and NAMESPACE when the rows differ in them (or may: several kinds asked, or
        -A), GANG and STATE when some row has Gang objects (or the cluster serves them)."""
        return cls(wide=wide,
                   namespaces=namespaces or len({r["namespace"] for r in rows}) > 1,
                   kinds=len({r["kind"] for r in rows}) > 1 or (kinds and not rows),
                   objects=any("gangObjects" in r for r in rows) or (objects and not rows))

    @property
    def columns(self) -> list[str]:
        return [*(["NAMESPACE"] if self.namespaces else []), *(["KIND"] if self.kinds else []),
                "NAME", "PHASE", "READY", "GANGS", *(["GANG", "STATE"] if self.objects else []),
                "GPUS", "AGE", *(["DESCRIPTOR", "NODES"] if self.wide else [])]

    def line(self, r: Mapping[str, Any], now: datetime) -> list[Any]:
        gangs = (f"{r['gangs']} (min {'/'.join(str(m) for m in r['minMembers'])})"
                 if r["gangs"] else "-")
        own = r.get("gangObjects") or [{"name": "-", "state": "-"}]
        age = age_of({"metadata": {"creationTimestamp": r["creationTimestamp"]}}, now)
        extra = [r["descriptor"], ",".join(r["nodes"]) or "<none>"] if self.wide else []
        return [*([r["namespace"]] if self.namespaces else []),
                *([r["kind"]] if self.kinds else []),
                r["name"], r["phase"], f"{r['readyPods']}/{r['pods']}", gangs,
                *([",".join(o["name"] for o in own), ",".join(o["state"] for o in own)]
                  if self.objects else []),
                r["gpus"], age, *extra]


def _raw_key(raw: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = raw.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(raw.get("kind")), str(meta.get("name")))


def _name(r: Mapping[str, Any]) -> str:
    return resource_name(r["kind"], r["apiVersion"], r["name"])


def _labels(raw: Mapping[str, Any]) -> Mapping[str, str]:
    meta = raw.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


def _of_type(found: list[Found], base: Descriptors, name: str) -> list[Found]:
    wanted = {(d.target.group, d.target.kind) for d in find_type(base.catalog, name)}
    return [f for f in found if (f.tree.ref.api_version.rpartition("/")[0], f.tree.ref.kind)
            in wanted]
