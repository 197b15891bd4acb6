"""``muster describe``: a workload's roles, pods, gangs, phase and resources.

    muster describe jobset/llama -n ml            # live, through the kubeconfig
    muster describe jobset llama -n ml -o json
    muster describe jobsets -A                    # every JobSet
    muster describe -f workload.yaml              # file mode, no cluster (- reads stdin)
    muster describe jobset/llama --muster-url http://127.0.0.1:8888   # and Muster's own view
    muster describe jobset/llama --muster-url https://127.0.0.1:8443 --certificate-authority
        ca.crt --client-certificate client.crt --client-key client.key   # its mutual-TLS port

Each gang's state (Waiting, Planned, Admitted, Bound), the last reason, who holds what it
needs, and the recent events on the workload and its pods: from the gang's Gang object
(gangs.muster.dev) first, then, with --muster-url (or $MUSTER_URL), Muster's /inspect/gangs,
then the events Muster writes on the workload. A waiting gang's forecast (when it is
expected to start, and what it waits for: docs/forecast.md) comes from its Gang object.

Types match leniently: kind, plural, short name or kind.group, any case.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from typing import Any

from rich.text import Text
from rich.tree import Tree

from extender.cli.errors import EXIT_ERROR, EXIT_OK, CliError
from extender.cli.forecast import status_sentence
from extender.cli.gangread import read_gang_objects
from extender.cli.gangstate import (
    event_rows,
    gang_answers,
    holder_text,
    muster_tls,
    read_events,
    read_inspect,
    sandbox_muster,
)
from extender.cli.listing import age_of
from extender.cli.livefind import (
    connect_described,
    find_all,
    find_one,
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
from extender.cli.views import status_text, workload_data
from extender.cli.workloads import (
    Descriptors,
    Found,
    base_descriptors,
    cluster_error,
    workloads_in_file,
)
from extender.kube.client import Connection, KubeError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "describe", help="a workload's roles, pods, gangs, phase and resources",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    asked_live(p.add_argument(
        "target", nargs="*", metavar="TYPE[/NAME] [NAME]",
        help="what to describe: TYPE/NAME, TYPE NAME, or TYPE for every one"))
    p.add_argument("-f", "--filename", metavar="FILE",
                   help="describe the workloads of a YAML file (- for stdin); no cluster")
    add_namespace_flags(p)
    add_cluster_flags(p)
    add_output_flag(p)
    add_descriptor_flags(p)
    p.add_argument("--muster-url", metavar="URL", default=os.environ.get("MUSTER_URL"),
                   help="Muster's address, to add its view of each gang from /inspect/gangs "
                        "(default $MUSTER_URL, or the sandbox's Muster when the cluster is "
                        "`muster sandbox`'s; e.g. after kubectl port-forward)")
    p.add_argument("--certificate-authority", metavar="FILE",
                   help="for an https --muster-url: the CA of Muster's serving certificate "
                        "(the ca.crt of its TLS secret; default: the system's CAs)")
    p.add_argument("--client-certificate", metavar="FILE",
                   help="for an https --muster-url: the client certificate its mutual TLS "
                        "asks for (one its CA signed, as kube-scheduler's)")
    p.add_argument("--client-key", metavar="FILE",
                   help="the key of --client-certificate")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    base = base_descriptors(args)
    if args.filename:
        if args.target:
            raise CliError("give either -f FILE or TYPE/NAME, not both")
        _, found = workloads_in_file(args.filename, base)
        extras = [_extras(f, None, None) for f in found]
    else:
        tls = muster_tls(ca=args.certificate_authority, cert=args.client_certificate,
                         key=args.client_key)
        found, conn = _described(args, base)
        inspected = None
        try:
            objects, trouble = read_gang_objects(
                conn, None if args.all_namespaces else namespace_of(args))
        except KubeError as err:
            objects, trouble = None, str(err)
        if trouble:
            print(f"warning: {trouble}", file=sys.stderr)
        url = args.muster_url or sandbox_muster(conn.server, args.kubeconfig)
        if url:
            inspected, problem = read_inspect(url, tls=tls)
            if problem:
                print(f"warning: {problem}; gang state from "
                      f"{'Gang objects and ' if objects else ''}events only", file=sys.stderr)
        extras = [_extras(f, conn, inspected, objects) for f in found]
    show(found, args.output, extras)
    return EXIT_OK


def _extras(found: Found, conn: Connection | None, inspected: list[dict[str, Any]] | None,
            objects: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Gang state, recent events and age: what ``describe`` adds to the workload's data."""
    now = datetime.now(UTC)
    events = None
    if conn is not None:
        events, problems = read_events(conn, found)
        for problem in problems:
            print(f"warning: {problem}", file=sys.stderr)
    states = gang_answers(found, events=events, inspected=inspected, objects=objects)
    for state in states:
        status = ((objects or {}).get(state["gang"]) or {}).get("status") or {}
        told = status_sentence(status.get("forecast") or {}, now.timestamp())
        if told:
            state["forecast"] = told
    extra: dict[str, Any] = {"age": age_of(found.raw, now), "gangStates": states}
    if events is not None:  # from a file no event is known, not "none"
        extra["events"] = event_rows(events, now)
    return extra


def _described(args: argparse.Namespace, base: Descriptors,
               ) -> tuple[list[Found], Connection]:
    kind, name = parse_target(args.target)
    if name and args.all_namespaces:
        raise CliError("-A describes every workload of a type; leave the name out")
    conn, descriptors, kinds = connect_described(args, base, kind)
    namespace = namespace_of(args)
    try:
        if name:
            return [find_one(conn, descriptors, kinds, name, namespace)], conn
        found, trouble = find_all(conn, descriptors, kinds,
                                  None if args.all_namespaces else namespace)
    except KubeError as err:
        raise cluster_error(err) from None
    for problem in trouble:
        print(f"warning: {problem}", file=sys.stderr)
    if not found:
        where = "any namespace" if args.all_namespaces else f"namespace {namespace}"
        raise CliError(f"no {kinds[0].target.kind} in {where} on {conn.server}",
                       exit_code=EXIT_ERROR)
    return found, conn


def show(found: list[Found], fmt: str, extras: list[dict[str, Any]] | None = None) -> None:
    data = [workload_data(f) for f in found]
    for item, extra in zip(data, extras or [], strict=False):
        states = {s["gang"]: s for s in extra["gangStates"]}
        for gang in item["gangs"]:
            state = states.get(gang["name"])
            if state is not None:
                gang.update({k: v for k, v in state.items() if k != "gang"})
        item.update({k: extra[k] for k in ("age", "events") if k in extra})
    if fmt != "table":
        # One workload prints as an object; several as a List, as kubectl does.
        emit_data(data[0] if len(data) == 1 else
                  {"apiVersion": "v1", "kind": "List", "items": data}, fmt)
        return
    out = console()
    for i, item in enumerate(data):
        if i:
            out.print()
        render_workload(item)


def render_workload(w: dict[str, Any]) -> None:
    out = console()
    out.print(f"{w['kind']} {w['namespace']}/{w['name']}", style="bold", markup=False)
    out.print(f"descriptor: {w['descriptor']} ({w['descriptorFormat']}, "
              f"{w['descriptorSource']})", markup=False)
    out.print(f"phase: {w['phase']}" + (f"   age: {w['age']}" if "age" in w else ""),
              markup=False)
    totals = w["totals"]
    out.print(f"pods: {totals['readyPods']}/{totals['pods']} ready, "
              f"{totals['observedPods']} observed", markup=False)
    for gang in w["gangs"]:
        where = ""
        if "topology" in gang:
            t = gang["topology"]
            how = ("required, exclusive" if t["exclusive"] else
                   "required" if t["required"] else "preferred")
            where = f", in one {t['key']} domain ({how})"
        if "subgroupTopology" in gang:
            t = gang["subgroupTopology"]
            where = f", each of {t['subgroups']} subgroups alone in a {t['key']} domain of its own"
        out.print(f"gang: {gang['name']} (minimum {gang['minMember']} of {gang['pods']} pods, "
                  f"{gang['gpus']} GPUs{where})", markup=False)
        if "stages" in gang:
            out.print("  stages (created in turn, all held): " + " -> ".join(
                f"{'+'.join(st['roles'])} ({st['minimum']})" for st in gang["stages"]),
                markup=False)
        _gang_state(gang)
    if not w["gangs"]:
        out.print("gang: none (pods schedule one by one)", markup=False)
    if w["order"]:
        out.print("order: " + ", ".join(f"{e['before']} -> {e['after']}" for e in w["order"]),
                  markup=False)
    tree = Tree(Text(f"{w['kind']}/{w['name']}  {w['phase']}"), guide_style="dim")
    for role in w["roles"]:
        branch = tree.add(Text(
            f"{role['name']}  {role['ready']}/{role['pods']} ready  "
            f"({role['replicas']} x {role['podsPerReplica']} pods, "
            f"{role['gpusPerPod']} GPU/pod, {role['gpus']} GPUs)"))
        for pod in role["observed"]:
            branch.add(Text(_pod_line(pod)))
    if w["unassigned"]:
        branch = tree.add(Text("(no role)"))
        for pod in w["unassigned"]:
            branch.add(Text(_pod_line(pod)))
    out.print()
    out.print(tree, markup=False)
    rows = [(r["name"], r["pods"], r["gpus"], r["cpu"], r["memory"]) for r in w["roles"]]
    out.print()
    out.print(table(("COMPONENT", "REPLICAS", "GPU", "CPU", "MEMORY"), rows,
                    total=("TOTAL", totals["pods"], totals["gpus"], totals["cpu"],
                           totals["memory"])))
    _events(w)


def _gang_state(gang: dict[str, Any]) -> None:
    if "state" not in gang:
        return
    out = console()
    source = {"object": "from its Gang object", "muster": "from Muster",
              "events": "from its events",
              "pods": "from its pods"}[gang["source"]]
    out.print(f"  state: {gang['state']} ({gang['bound']} of minimum {gang['minMember']} "
              f"bound; {source})", markup=False)
    if gang["reason"]:
        out.print(f"  reason: {gang['reason']}", markup=False)
    if gang.get("forecast"):
        out.print(f"  forecast: {gang['forecast']}", markup=False)
    for holder in gang["heldBy"]:
        out.print(f"  held by: {holder_text(holder)}", markup=False)


def _events(w: dict[str, Any]) -> None:
    if "events" not in w:
        return
    out = console()
    out.print()
    if not w["events"]:
        out.print("Events: <none>", markup=False)
        return
    out.print("Events:", markup=False)
    out.print(table(("AGE", "TYPE", "REASON", "OBJECT", "MESSAGE"),
                    [(e["age"], e["type"], e["reason"], e["object"], e["message"])
                     for e in w["events"]]))


def _pod_line(pod: dict[str, Any]) -> str:
    ready = "ready" if pod["ready"] else "not ready"
    return (f"{pod['name']}  {status_text(pod['phase'], pod['reason'])}  {ready}  "
            f"node: {pod['node'] or '-'}  {pod['gpus']} GPU")
