"""``muster record -o snapshot.yaml``: dump a live cluster into a snapshot file.

What is written: every Node and Pod, every object of every kind a descriptor targets (packaged,
``--descriptors`` files and the cluster's own), the owners pods are found through (Jobs,
StatefulSets, ...), the PriorityClasses (pods created in the replay get their priority from
them), and the cluster's WorkloadDescriptor objects, as one ``List`` whose
``muster.dev/recorded-at`` annotation is the time of the recording. ``muster simulate`` replays
the file, workloads arriving at their creation times; a ``Timeline`` document may be appended
by hand.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from extender.cli.errors import EXIT_OK, CliError
from extender.cli.options import add_cluster_flags, add_descriptor_flags
from extender.cli.workloads import (
    base_descriptors,
    cluster_error,
    connect_with_descriptors,
)
from extender.core.workloads.descriptor import Descriptor
from extender.kube.client import Connection, KubeError, NotFound, ResourceType
from extender.kube.reader import cluster_descriptor_objects, device_objects, nodes_and_pods

RECORDED_AT = "muster.dev/recorded-at"
PRIORITY_CLASS = ("scheduling.k8s.io", "PriorityClass")
#: Fields a replay never reads; dropping them keeps recordings small and readable.
_DROPPED = ("managedFields",)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "record", help="dump a live cluster into a snapshot file for `muster simulate`",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_cluster_flags(p)
    add_descriptor_flags(p)
    p.add_argument("-o", "--output", metavar="FILE", default="-",
                   help="where to write the snapshot (default: standard output)")
    p.set_defaults(handler=run)


def _clean(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        for key in _DROPPED:
            meta.pop(key, None)
    return obj


def _kinds(descriptors: Iterable[Descriptor],
           served: dict[tuple[str, str], ResourceType]) -> list[ResourceType]:
    """Served types of described kinds and of the owners their pods are found through."""
    wanted: set[tuple[str, str]] = set()
    for d in descriptors:
        wanted.add((d.target.group, d.target.kind))
        for owner in d.pods.owners:
            wanted.update(k for k in served if k[1] == owner)
    wanted -= {("", "Pod"), ("", "Node")}
    return [served[k] for k in sorted(wanted) if k in served]


def record(conn: Connection, descriptors: Iterable[Descriptor], *,
           now: datetime) -> dict[str, Any]:
    """The cluster as one ``List`` (nodes, pods, priority classes, workloads, owners,
    descriptors, and DRA's slices, classes, claims and templates)."""
    nodes, pods = nodes_and_pods(conn)
    items = [*nodes, *pods]
    served = conn.resource_types()
    kinds = _kinds(descriptors, served)
    if PRIORITY_CLASS in served:
        kinds.insert(0, served[PRIORITY_CLASS])
    for rtype in kinds:
        try:
            items.extend(conn.list(rtype))
        except NotFound:
            continue  # the kind's CRD went away while we were listing
    items.extend(cluster_descriptor_objects(conn))
    items.extend(device_objects(conn, None))
    return {"apiVersion": "v1", "kind": "List",
            "metadata": {"annotations": {RECORDED_AT: now.isoformat(timespec="seconds")},
                         "server": conn.server},
            "items": [_clean(i) for i in items]}


def run(args: argparse.Namespace) -> int:
    conn, descriptors = connect_with_descriptors(args, base_descriptors(args))
    try:
        data = record(conn, descriptors.catalog.descriptors, now=datetime.now(UTC))
    except KubeError as err:
        raise cluster_error(err) from None
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as err:
            raise CliError(f"cannot write {args.output}: {err.strerror or err}") from None
        counts = {"Node": 0, "Pod": 0}
        for item in data["items"]:
            counts[item["kind"]] = counts.get(item["kind"], 0) + 1
        shown = ", ".join(f"{n} {k}" for k, n in counts.items())
        print(f"recorded {shown} to {args.output}", file=sys.stderr)
    return EXIT_OK
