"""``muster fit``: would this workload start now, and where? Asked of one or more clusters.

    muster fit -f llama.yaml --snapshot a.yaml --snapshot b.yaml
    kubectl get nodes,pods -A -o yaml > prod.yaml && muster fit -f llama.yaml --snapshot prod.yaml
    muster fit -f llama.yaml --context prod --context staging -o json
    muster fit -f llama.yaml            # the kubeconfig's current context, as kubectl's

With neither --snapshot nor --context, the live cluster of the kubeconfig's current context
is asked. A snapshot is what ``kubectl get nodes,pods -A -o yaml`` prints (a List or a
multi-document stream): Nodes with ``status.allocatable`` and the pods that hold resources.
Gangs are placed in the workload's order, each seeing the capacity the ones before it took;
capacity is per node, never summed. Where it does not fit a live cluster now, fit also says
when each gang would be expected to start if submitted now, and what it would wait for
(``muster forecast``'s replay with the workload added, docs/forecast.md). Exit 0 if the
workload fits in at least one cluster, 1 if in none, 2 if it fits in none and some cluster
could not be reached (the answer there is unknown).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from extender.cli.errors import EXIT_NO, EXIT_OK, EXIT_UNANSWERED, CliError
from extender.cli.forecast import gang_data, sentence
from extender.cli.livefind import current_context
from extender.cli.options import (
    add_descriptor_flags,
    add_impersonation_flags,
    add_output_flag,
    duration,
)
from extender.cli.record import record
from extender.cli.render import console, emit_data, table
from extender.cli.workloads import (
    Descriptors,
    Found,
    base_descriptors,
    connection,
    workloads_in_file,
)
from extender.core.decide.fit import FitResult, fit_workload
from extender.core.decide.holders import fit_reason
from extender.core.decide.settings import CoreSettings
from extender.core.devices.attach import is_device_object, lower_objects
from extender.core.model.durations import parse_seconds
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, WorkloadTree
from extender.core.workloads.cluster import build_snapshot
from extender.core.workloads.expressions import WorkloadError
from extender.core.workloads.workload import workload_ref
from extender.files.snapshot import SnapshotFileError, load_snapshot
from extender.kube.client import KubeError
from extender.kube.reader import device_objects, list_workloads, nodes_and_pods, owner_objects
from simulator.forecast import Outlook, forecast
from simulator.snapshot_replay import ReplayInputError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "fit", help="would a workload's gangs be placed now, and where, in each cluster",
        error_exit=EXIT_UNANSWERED,
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-f", "--filename", metavar="FILE", required=True,
                   help="the workload (YAML; - for stdin)")
    p.add_argument("--snapshot", action="append", default=[], metavar="FILE",
                   help="a cluster as `kubectl get nodes,pods -A -o yaml` prints it; repeatable")
    p.add_argument("--context", action="append", default=[], metavar="NAME",
                   help="a live cluster through this kubeconfig context; repeatable")
    p.add_argument("--kubeconfig", metavar="PATH",
                   help="kubeconfig file for --context (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--request-timeout", type=duration, default=10.0, metavar="DURATION",
                   help="give up on an API request after this long: 5s, 1m, or seconds "
                        "(default 10s)")
    add_impersonation_flags(p)
    add_output_flag(p)
    add_descriptor_flags(p)
    # Exit 0 fits, 1 fits nowhere: any error is "no answer" (2), as kubectl diff exits.
    p.set_defaults(handler=run, error_exit=EXIT_UNANSWERED)


def _workload(args: argparse.Namespace, base: Descriptors, *,
              devices: list[dict[str, Any]] | None = None) -> tuple[Descriptors, Found]:
    descriptors, found = workloads_in_file(args.filename, base, devices=devices or ())
    if len(found) > 1:
        names = ", ".join(f.tree.ref.key for f in found)
        raise CliError(f"{args.filename}: holds {len(found)} workloads ({names}); "
                       "fit asks about one at a time")
    return descriptors, found[0]


def _split(objects: list[dict[str, Any]],
           ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [o for o in objects if o.get("kind") == "Node"]
    pods = [o for o in objects if o.get("kind") == "Pod"]
    rest = [o for o in objects if o.get("kind") not in ("Node", "Pod")]
    return nodes, pods, rest


def snapshot_objects(path: str) -> list[dict[str, Any]]:
    try:
        return load_snapshot(path)
    except SnapshotFileError as err:
        raise CliError(str(err)) from None


def snapshot_from_file(path: str, descriptors: Descriptors,
                       objects: list[dict[str, Any]]) -> ClusterSnapshot:
    nodes, pods, rest = _split(lower_objects(objects))
    if not nodes:
        raise CliError(f"{path}: no Node objects; a snapshot is what "
                       "`kubectl get nodes,pods -A -o yaml` prints")
    return build_snapshot(nodes=nodes, pods=pods, objects=rest, catalog=descriptors.catalog)


def snapshot_from_cluster(args: argparse.Namespace, context: str | None,
                          descriptors: Descriptors,
                          found: Found) -> tuple[ClusterSnapshot, list[dict[str, Any]]]:
    """The cluster of kubeconfig ``context`` (``None``: the current one)."""
    conn = connection(args, context=context or "")
    try:
        nodes, pods = nodes_and_pods(conn)
        # The workload's own kind and owner objects: if it already exists, its bound pods count
        # toward its gangs' minimums instead of being seen as strangers' pods.
        descriptor = descriptors.catalog.for_api(found.tree.ref.api_version, found.tree.ref.kind)
        namespace = found.tree.ref.namespace
        objects = owner_objects(conn, descriptors.catalog.descriptors, namespace)
        if descriptor is not None:
            objects += list_workloads(conn, descriptor, namespace)
        devices = device_objects(conn, None)
    except KubeError as err:
        raise CliError(str(err), cluster=True) from None
    nodes, pods, objects = _split(lower_objects([*nodes, *pods, *objects, *devices]))
    return build_snapshot(nodes=nodes, pods=pods, objects=objects,
                          catalog=descriptors.catalog), devices


def _submitted(found: Found, now: datetime) -> dict[str, Any]:
    """The workload of the file as the API server would hold it once created now."""
    obj = dict(found.raw)
    ref = found.tree.ref
    obj["metadata"] = {**(obj.get("metadata") or {}), "namespace": ref.namespace,
                       "creationTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ")}
    obj["metadata"].setdefault("uid", f"muster-fit-{ref.namespace}-{ref.name}")
    return obj


def forecast_live(args: argparse.Namespace, context: str | None, descriptors: Descriptors,
                  found: Found) -> list[dict[str, Any]]:
    """When each of the workload's gangs would start if it were submitted now: the cluster
    recorded as ``muster forecast`` reads it, the workload added (unless it exists already)
    and replayed forward (docs/forecast.md)."""
    conn = connection(args, context=context or "")
    now = datetime.now(UTC)
    try:
        objects = record(conn, descriptors.catalog.descriptors, now=now)["items"]
    except KubeError as err:
        raise CliError(str(err), cluster=True) from None
    key = found.tree.ref.key
    if not any(_key_of(o) == key for o in objects):
        objects.append(_submitted(found, now))
    try:
        result = forecast(objects, now=now.timestamp(), catalog=descriptors.catalog,
                          parse_duration=parse_seconds)
    except ReplayInputError as err:
        raise CliError(f"cannot forecast: {err}") from None
    return [gang_data(g) for g in result.gangs if g.workload == key]


def _key_of(obj: Mapping[str, Any]) -> str | None:
    try:
        return workload_ref(obj).key
    except WorkloadError:
        return None


def fit_told(tree: WorkloadTree, snapshot: ClusterSnapshot) -> FitResult:
    """:func:`fit_workload`'s answer, each gang that does not fit saying who runs on what it
    needs in the words its events would use (:func:`fit_reason`)."""
    settings = CoreSettings()
    result = fit_workload(tree, snapshot, settings=settings)
    gangs: dict[str, Gang] = {g.key: g for g in tree.gangs}
    told = tuple(g if g.fits or g.name not in gangs else replace(
        g, reason=fit_reason(gangs[g.name], g.reason, snapshot=snapshot, settings=settings))
        for g in result.gangs)
    return replace(result, gangs=told)


def cluster_data(name: str, result: FitResult) -> dict[str, Any]:
    return {
        "name": name,
        "fits": result.fits,
        "reason": "",
        "gangs": [{
            "name": g.name,
            "minMember": g.min_member,
            "placed": g.placed,
            "fits": g.fits,
            "plan": {node: sum(roles.values()) for node, roles in sorted(g.plan.items())},
            "planByRole": {node: dict(sorted(roles.items()))
                           for node, roles in sorted(g.plan.items())},
            "reason": g.reason,
        } for g in result.gangs],
    }


def unreachable_data(name: str, message: str) -> dict[str, Any]:
    return {"name": name, "fits": False, "reachable": False, "reason": message, "gangs": []}


def run(args: argparse.Namespace) -> int:
    # Neither snapshot nor context: the current context's cluster, as kubectl asks it.
    contexts: list[str | None] = (list(args.context) if args.context or args.snapshot
                                  else [None])
    base = base_descriptors(args)
    descriptors, found = _workload(args, base)
    clusters: list[dict[str, Any]] = []
    unreachable = False
    for path in args.snapshot:
        objects = snapshot_objects(path)
        snapshot = snapshot_from_file(path, descriptors, objects)
        # The workload's claims read against this cluster's DeviceClasses and slices.
        _, here = _workload(args, base, devices=[o for o in objects if is_device_object(o)])
        clusters.append(cluster_data(path, fit_told(here.tree, snapshot)))
    for context in contexts:
        name = context or current_context(args.kubeconfig)
        try:
            snapshot, devices = snapshot_from_cluster(args, context, descriptors, found)
            _, here = _workload(args, base, devices=devices)
        except CliError as err:
            if not err.cluster:
                raise
            unreachable = True
            print(f"warning: context {name}: {err}", file=sys.stderr)
            clusters.append(unreachable_data(name, str(err)))
            continue
        clusters.append(cluster_data(name, fit_told(here.tree, snapshot)))
        if not clusters[-1]["fits"]:
            clusters[-1]["forecast"] = _forecast_or_warn(args, context, descriptors, found,
                                                         name=name)
    data = {"workload": found.tree.ref.key, "descriptor": found.tree.descriptor,
            "pods": found.tree.pods, "gpus": found.tree.gpus, "clusters": clusters}
    if args.output != "table":
        emit_data(data, args.output)
    else:
        render(data)
    if any(c["fits"] for c in clusters):
        return EXIT_OK
    return EXIT_UNANSWERED if unreachable else EXIT_NO


def _forecast_or_warn(args: argparse.Namespace, context: str | None, descriptors: Descriptors,
                      found: Found, *, name: str) -> list[dict[str, Any]]:
    """:func:`forecast_live`, or none and a warning: the placement is answered either way."""
    try:
        return forecast_live(args, context, descriptors, found)
    except CliError as err:
        print(f"warning: context {name}: no forecast: {err}", file=sys.stderr)
        return []


def _plan_text(plan: Mapping[str, Mapping[str, int]]) -> str:
    return "; ".join(f"{node}: " + ", ".join(f"{role} {n}" for role, n in roles.items())
                     for node, roles in plan.items())


def render(data: dict[str, Any]) -> None:
    out = console()
    out.print(f"{data['workload']}: {data['pods']} pods, {data['gpus']} GPUs "
              f"(descriptor {data['descriptor']})", markup=False)
    rows = []
    for c in data["clusters"]:
        verdict = "yes" if c["fits"] else "no"
        if not c["gangs"]:
            rows.append((c["name"], verdict, "-", "-", "-", c["reason"]))
        for g in c["gangs"]:
            detail = _plan_text(g["planByRole"]) if g["fits"] else g["reason"]
            rows.append((c["name"], verdict, g["name"], g["minMember"], g["placed"],
                         detail or "-"))
    out.print(table(("CLUSTER", "FITS", "GANG", "MIN", "PLACED", "PLAN OR REASON"), rows))
    for c in data["clusters"]:
        for g in c.get("forecast") or ():
            told = sentence(Outlook(g["outlook"]), g["startSeconds"],
                            upper_bound=g["upperBound"], waits_for=g["waitsFor"],
                            unknown=g["unknownRuntimes"])
            out.print(f"{c['name']}: gang {g['gang']} {told}", markup=False)
