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
from extender.cli.watching import Changes, Rows, follow_objects, follow_table
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
    lists them; ``-w``: then a row each time one changes."""
    conn = connection(args)
    namespace = None if args.all_namespaces else namespace_of(args)
    items = _gang_items(args, conn, namespace, name)
    changes = Changes(conn, [GANGS], namespace).start() if args.watch else None
    if args.output in ("json", "yaml"):
        emit_data(items[0] if name is not None else
                  {"apiVersion": "v1", "kind": "List", "items": items}, args.output)
        if changes is not None:
            follow_objects(changes, lambda: _gang_items(args, conn, namespace, name,
                                                        strict=False),
                           items, key=_key, output=args.output)
        return EXIT_OK
    if args.output == "name":
        for o in items:
            print(_name(o), flush=True)
    elif not items and changes is None:
        where = "" if args.all_namespaces else f" in {namespace} namespace"
        print(f"No resources found{where}.", file=sys.stderr)
        return EXIT_OK
    wide, namespaces = args.output == "wide", bool(args.all_namespaces)
    columns = [*(["NAMESPACE"] if namespaces else []), "NAME", "WORKLOAD", "STATE",
               "BOUND/MIN", "AGE", *(["REASON"] if wide else [])]

    def line(o: Mapping[str, Any], now: datetime) -> list[Any]:
        return _gang_line(o, now, wide=wide, namespaces=namespaces)

    if args.output != "name" and (items or not args.no_headers):
        now = datetime.now(UTC)
        console().print(table(columns, [line(o, now) for o in items],
                              headers=not args.no_headers))
        sys.stdout.flush()
    if changes is not None:
        follow_table(changes, lambda: _gang_items(args, conn, namespace, name, strict=False),
                     items, Rows(key=_key, columns=columns, line=line,
                                 name=_name if args.output == "name" else None))
    return EXIT_OK


def _gang_items(args: argparse.Namespace, conn: Connection, namespace: str | None,
                name: str | None, *, strict: bool = True) -> list[dict[str, Any]]:
    """The Gang objects ``get gangs`` lists, in order; ``strict``: ``name`` not there is an
    error."""
    try:
        listed, problem = list_gang_objects(conn, namespace)
    except KubeError as err:
        raise cluster_error(err) from None
    if listed is None:
        raise CliError(problem or f"the API server at {conn.server} serves no gangs.muster.dev "
                       "(is Muster's Gang CRD installed?)", exit_code=EXIT_ERROR)
    items = sorted(listed, key=_key)
    if name is not None:
        items = [o for o in items if object_name(o) == name]
        if not items and strict:
            raise CliError(f'gang "{name}" not found', exit_code=EXIT_ERROR)
    if args.sort_by:
        items = SortBy(args.sort_by).sort(items, lambda o: o)
    return items


def _name(obj: Mapping[str, Any]) -> str:
    return resource_name(KIND, API_VERSION, object_name(obj))


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    return (str((obj.get("metadata") or {}).get("namespace", "")), object_name(obj))


def _gang_line(o: Mapping[str, Any], now: datetime, *, wide: bool, namespaces: bool,
               ) -> list[Any]:
    status = o.get("status") or {}
    return [*([_key(o)[0]] if namespaces else []), object_name(o),
            str(status.get("workload") or ""), object_state(o),
            f"{status.get('bound', 0)}/{status.get('minMember', 0)}", age_of(o, now),
            *([str(status.get("reason") or "")] if wide else [])]
