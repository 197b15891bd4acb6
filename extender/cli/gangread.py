"""The Gang objects (``gangs.muster.dev``) Muster writes, read for ``get`` and ``describe``:
one per gang it serves, in the workload's namespace, with the gang's state, bound count,
reason and holders (:mod:`extender.server.gangobjects` builds them).

A cluster without the Gang CRD, or a user RBAC does not let read them, has none to read:
``get`` then leaves its GANG and STATE columns out and ``describe`` asks Muster and the
events.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from extender.cli.errors import EXIT_ERROR, EXIT_OK, CliError
from extender.cli.listing import SortBy, age_of, resource_name
from extender.cli.livefind import namespace_of
from extender.cli.render import console, emit_data, table
from extender.cli.workloads import cluster_error, connection
from extender.kube.client import Connection, KubeError, ResourceType
from extender.server.gangobjects import API_VERSION, KIND

GROUP, _, VERSION = API_VERSION.partition("/")
GANGS = ResourceType(group=GROUP, version=VERSION, kind=KIND, plural="gangs", namespaced=True,
                     short_names=("mg",))
GANG_TYPES = frozenset({"gang", "gangs", "mg", "gang.muster.dev", "gangs.muster.dev"})
"""What ``muster get`` takes as the Gang objects' type, as kubectl takes it."""


def list_gang_objects(conn: Connection, namespace: str | None,
                      ) -> tuple[list[dict[str, Any]] | None, str]:
    """The Gang objects in ``namespace`` (``None``: all); ``None`` and why when there are none
    to read (``""``: the cluster serves no Gangs)."""
    if (GROUP, KIND) not in conn.resource_types():
        return None, ""
    try:
        return conn.list(GANGS, namespace), ""
    except KubeError as err:
        return None, f"cannot list gangs.muster.dev on {conn.server}: {err}"


def read_gang_objects(conn: Connection, namespace: str | None,
                      ) -> tuple[dict[str, dict[str, Any]] | None, str]:
    """Gang key (``namespace/workload[/group]``) -> its Gang object, in ``namespace`` (``None``:
    all); ``None`` and why when there are none to read (``""``: the cluster serves no Gangs)."""
    items, problem = list_gang_objects(conn, namespace)
    if items is None:
        return None, problem
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        status = item.get("status")
        if isinstance(status, Mapping) and isinstance(status.get("gang"), str):
            out[status["gang"]] = item
    return out, ""


def object_state(obj: Mapping[str, Any]) -> str:
    """The gang state a Gang object says (``Waiting``): Muster writes it as every view
    spells it (:func:`~extender.server.gangobjects.state_word`)."""
    status = obj.get("status") or {}
    return str(status.get("state") or "")


def object_name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("name") or "")


def get_gangs(args: argparse.Namespace, name: str | None) -> int:
    """``muster get gangs``: the Gang objects of a namespace (or all), as ``kubectl get gangs``
    lists them."""
    conn = connection(args)
    namespace = None if args.all_namespaces else namespace_of(args)
    try:
        listed, problem = list_gang_objects(conn, namespace)
    except KubeError as err:
        raise cluster_error(err) from None
    if listed is None:
        raise CliError(problem or f"the API server at {conn.server} serves no gangs.muster.dev "
                       "(is Muster's Gang CRD installed?)", exit_code=EXIT_ERROR)
    items = sorted(listed, key=lambda o: ((o.get("metadata") or {}).get("namespace", ""),
                                          object_name(o)))
    if name is not None:
        items = [o for o in items if object_name(o) == name]
        if not items:
            raise CliError(f'gang "{name}" not found', exit_code=EXIT_ERROR)
    if args.sort_by:
        items = SortBy(args.sort_by).sort(items, lambda o: o)
    if args.output in ("json", "yaml"):
        emit_data(items[0] if name is not None else
                  {"apiVersion": "v1", "kind": "List", "items": items}, args.output)
        return EXIT_OK
    if args.output == "name":
        for o in items:
            print(resource_name(KIND, API_VERSION, object_name(o)))
        return EXIT_OK
    if not items:
        where = "" if args.all_namespaces else f" in {namespace} namespace"
        print(f"No resources found{where}.", file=sys.stderr)
        return EXIT_OK
    now, wide = datetime.now(UTC), args.output == "wide"
    namespaces = bool(args.all_namespaces)
    rows = []
    for o in items:
        status = o.get("status") or {}
        rows.append([*([o["metadata"].get("namespace", "")] if namespaces else []),
                     object_name(o), str(status.get("workload") or ""), object_state(o),
                     f"{status.get('bound', 0)}/{status.get('minMember', 0)}", age_of(o, now),
                     *([str(status.get("reason") or "")] if wide else [])])
    columns = [*(["NAMESPACE"] if namespaces else []), "NAME", "WORKLOAD", "STATE",
               "BOUND/MIN", "AGE", *(["REASON"] if wide else [])]
    console().print(table(columns, rows, headers=not args.no_headers))
    return EXIT_OK
