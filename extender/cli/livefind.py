"""Live mode for ``describe`` and ``get``: find workloads of the kinds a person named, in a
namespace or all, resolve them, and attach their pods through owner references (and the
descriptors' labels when a chain cannot be followed)."""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from extender.cli.errors import EXIT_ERROR, CliError
from extender.cli.workloads import (
    Descriptors,
    Found,
    attach_pods,
    connect_with_descriptors,
    resolve,
)
from extender.core.devices.attach import DeviceLowering, lowering_of
from extender.core.model.objects import owner_refs
from extender.core.model.values import WorkloadTree
from extender.core.workloads.catalog import Catalog, UnknownKind
from extender.core.workloads.cluster import owned_by_described
from extender.core.workloads.descriptor import Descriptor
from extender.kube.client import Connection
from extender.kube.reader import (
    context_namespace,
    device_objects,
    get_workload,
    list_pods_and_owners,
    list_workloads,
    served_types,
)


def parse_target(target: Sequence[str]) -> tuple[str, str | None]:
    """``["jobset/a"]``, ``["jobset", "a"]`` or ``["jobset"]`` -> ``(type, name or None)``, as
    kubectl reads ``TYPE/NAME``, ``TYPE NAME`` and ``TYPE``."""
    if not target or len(target) > 2:
        raise CliError("give TYPE/NAME, TYPE NAME or TYPE (or -f FILE)")
    if len(target) == 2:
        if "/" in target[0] or "/" in target[1]:
            raise CliError(f"give TYPE/NAME or TYPE NAME, not {' '.join(target)}")
        return target[0], target[1]
    kind, slash, name = target[0].partition("/")
    if slash and (not kind or not name):
        raise CliError(f"{target[0]}: expected TYPE/NAME")
    return kind, (name or None)


def find_type(catalog: Catalog, name: str) -> list[Descriptor]:
    """The descriptors a person means by ``name`` (kind, plural, short name or kind.group);
    a name none describes is an error that says which one was meant when one is close."""
    try:
        return list(catalog.find_type(name))
    except UnknownKind as err:
        names = sorted({n for d in catalog.descriptors for n in (
            d.target.kind.lower(), d.target.plural.lower(),
            *(s.lower() for s in d.target.short_names))})
        close = difflib.get_close_matches(name.strip().lower(), names, n=3, cutoff=0.75)
        if not close:
            raise CliError(str(err), exit_code=EXIT_ERROR) from None
        raise CliError(f"unknown kind {name}; did you mean {' or '.join(close)}? "
                       "(muster descriptors lists every kind)", exit_code=EXIT_ERROR) from None


def connect_described(args: Any, base: Descriptors, type_name: str | None,
                      ) -> tuple[Connection, Descriptors, list[Descriptor]]:
    """The cluster ``args`` name, ``base`` plus its descriptors (each one that does not compile
    warned about and left out) and the descriptors of the type a person named (``None``: every
    described kind)."""
    conn, descriptors = connect_with_descriptors(args, base)
    if type_name is None:
        return conn, descriptors, list(descriptors.catalog.descriptors)
    return conn, descriptors, find_type(descriptors.catalog, type_name)


def namespace_of(args: Any) -> str:
    """``-n``, else the namespace of the kubeconfig's context (``default`` if it names none)."""
    return str(args.namespace or context_namespace(args.kubeconfig, args.context))


def current_context(kubeconfig: str | None) -> str:
    """The name of the kubeconfig's current context (the first file of ``$KUBECONFIG``), or
    ``current-context`` when it names none (an in-cluster service account)."""
    path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    try:
        loaded = yaml.safe_load(Path(path.split(os.pathsep)[0]).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return "current-context"
    name = loaded.get("current-context") if isinstance(loaded, Mapping) else None
    return name if isinstance(name, str) and name else "current-context"


def distinct_kinds(descriptors: Sequence[Descriptor]) -> list[Descriptor]:
    """One descriptor per group/kind: two versions of one kind are listed once, and each
    object is then resolved by the descriptor of its own version."""
    seen: set[tuple[str, str]] = set()
    out = []
    for d in descriptors:
        key = (d.target.group, d.target.kind)
        if key not in seen:
            seen.add(key)
            out.append(d)
    return out


def _is_part(obj: Mapping[str, Any], catalog: Catalog) -> bool:
    """Owned by an object of a described kind (a JobSet's Job), or a pod with any owner: part
    of another workload, never one of its own."""
    meta = obj.get("metadata")
    if obj.get("kind") == "Pod" and isinstance(meta, Mapping) and owner_refs(meta):
        return True
    return owned_by_described(obj, catalog)


def find_one(conn: Connection, descriptors: Descriptors, kinds: Sequence[Descriptor], name: str,
             namespace: str) -> Found:
    """The workload ``name`` of one of ``kinds`` in ``namespace``, with its pods."""
    served = [d for d in distinct_kinds(kinds) if served_types(conn, d)]
    if not served:
        names = ", ".join(d.target.group_kind for d in distinct_kinds(kinds))
        raise CliError(f"{names} is not served by the API server at {conn.server} "
                       "(is its CRD installed?)", exit_code=EXIT_ERROR)
    for descriptor in served:
        obj = get_workload(conn, descriptor, name, namespace)
        if obj is not None:
            lowering = lowering_of(device_objects(conn, namespace))
            tree = resolve(dict(lowering.workload(obj)), descriptors,
                           where=f"{obj['kind']} {namespace}/{name}")
            return _with_pods(conn, descriptors, [(tree, obj)], namespace, lowering)[0]
    kind = served[0].target.kind
    raise CliError(f"{kind} {name} not found in namespace {namespace} on {conn.server}",
                   exit_code=EXIT_ERROR)


def find_all(conn: Connection, descriptors: Descriptors, kinds: Sequence[Descriptor],
             namespace: str | None, *,
             label_selector: str | None = None) -> tuple[list[Found], list[str]]:
    """Every workload of ``kinds`` (``namespace=None``: all namespaces; ``label_selector``:
    only those it selects), with its pods, and one problem per object that does not resolve
    (reported, not fatal)."""
    trees: list[tuple[WorkloadTree, Mapping[str, Any]]] = []
    problems: list[str] = []
    catalog = descriptors.catalog
    lowering = lowering_of(device_objects(conn, namespace))
    for descriptor in distinct_kinds(kinds):
        for listed in list_workloads(conn, descriptor, namespace, label_selector=label_selector):
            if _is_part(listed, catalog):
                continue
            obj = lowering.workload(listed)
            meta = obj.get("metadata") or {}
            where = f"{obj.get('kind')} {meta.get('namespace', '')}/{meta.get('name', '?')}"
            try:  # resolved lowered; kept as the API server has it
                trees.append((resolve(obj, descriptors, where=where), listed))
            except CliError as err:
                problems.append(str(err))
    if not trees:
        return [], problems
    return _with_pods(conn, descriptors, trees, namespace, lowering), problems


def _with_pods(conn: Connection, descriptors: Descriptors,
               trees: list[tuple[WorkloadTree, Mapping[str, Any]]],
               namespace: str | None, lowering: DeviceLowering) -> list[Found]:
    pods, owners = list_pods_and_owners(conn, descriptors.catalog.descriptors, namespace)
    found = attach_pods(trees, [lowering.pod(p) for p in pods], owners, descriptors)
    return sorted(found, key=lambda f: (f.tree.ref.namespace, f.tree.ref.kind, f.tree.ref.name))
