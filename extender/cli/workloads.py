"""What ``describe``, ``get`` and ``fit`` share: the descriptor catalog with where each
descriptor came from, objects read from files (multi-document YAML, ``List``s, ``-`` for
stdin), workloads resolved from them, and the pods that belong to each.

Every problem becomes a :class:`~extender.cli.errors.CliError` naming the file (and document)
or the cluster, so no input produces a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from extender.cli.errors import CliError
from extender.core.devices.attach import lower_objects
from extender.core.karta.compile import compile_any
from extender.core.karta.model import is_karta_document
from extender.core.model.objects import ObjectError, pod_from_api
from extender.core.model.values import Membership, PodInfo, WorkloadTree
from extender.core.workloads.catalog import Catalog, UnknownKind
from extender.core.workloads.cluster import owned_by_described
from extender.core.workloads.descriptor import API_VERSION, KIND, Descriptor, DescriptorError
from extender.core.workloads.expressions import WorkloadError
from extender.core.workloads.membership import ObjectIndex, find_membership
from extender.core.workloads.workload import resolve_workload
from extender.files.catalog import CatalogError, Problem, packaged_catalog, yaml_documents
from extender.kube.client import Connection, KubeError, NotFound, connect
from extender.kube.reader import cluster_descriptor_objects

FORMAT_MUSTER = "muster"
SOURCE_CATALOG = "catalog"
SOURCE_FILE = "file"
SOURCE_CLUSTER = "cluster"


# --- descriptors and where they came from -------------------------------------------------

@dataclass(frozen=True)
class Origin:
    format: str
    """``muster`` or ``karta`` (read from an NVIDIA Workload Map ``Karta``)."""
    source: str
    """``catalog`` (packaged), ``file`` (``--descriptors`` or the input file) or ``cluster``."""
    where: str = ""


@dataclass(frozen=True)
class Descriptors:
    """A catalog plus, for each descriptor name, where the winning copy came from."""

    catalog: Catalog
    origins: Mapping[str, Origin] = field(default_factory=dict)

    def origin(self, name: str) -> Origin:
        return self.origins.get(name, Origin(FORMAT_MUSTER, SOURCE_CATALOG))

    def plus(self, found: Iterable[tuple[Descriptor, Origin]]) -> Descriptors:
        """Later descriptors win for the same group/kind/version, as the catalog merges."""
        pairs = list(found)
        if not pairs:
            return self
        origins = dict(self.origins)
        for d, o in pairs:
            origins[d.name] = o
        return Descriptors(self.catalog.merged(d for d, _ in pairs), origins)


def is_descriptor(doc: object) -> bool:
    """A Muster ``WorkloadDescriptor`` or a Workload Map ``Karta`` document."""
    return isinstance(doc, Mapping) and (
        (doc.get("kind") == KIND and doc.get("apiVersion") == API_VERSION)
        or is_karta_document(doc))


def compile_documents(docs: Iterable[tuple[int, Any]], file: str, *, source: str,
                      ) -> tuple[list[tuple[Descriptor, Origin]], list[Problem]]:
    out: list[tuple[Descriptor, Origin]] = []
    problems: list[Problem] = []
    for doc, data in docs:
        try:
            descriptor = compile_any(data, source=file)
        except DescriptorError as err:
            problems.append(Problem(file, doc, err.path, err.message))
            continue
        out.append((descriptor, Origin(descriptor.format, source, f"{file}:{doc}")))
    return out, problems


def descriptor_files(paths: Iterable[str]) -> list[Path]:
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            out.extend(sorted(p for p in path.iterdir()
                              if p.suffix in (".yaml", ".yml") and p.is_file()))
        elif path.exists():
            out.append(path)
        else:
            raise CliError(f"{raw}: no such file or directory")
    return out


def load_descriptor_files(paths: Iterable[str]) -> list[tuple[Descriptor, Origin]]:
    """Compile every descriptor (Muster or Karta) of files and directories, or fail with every
    problem as ``FILE:DOC: field.path: message``."""
    found: list[tuple[Descriptor, Origin]] = []
    problems: list[Problem] = []
    for file in descriptor_files(paths):
        try:
            docs = list(numbered_documents(read_text(str(file)), str(file)))
        except CliError as err:
            problems.append(Problem(str(file), 0, "", str(err)))
            continue
        more, trouble = compile_documents(docs, str(file), source=SOURCE_FILE)
        found.extend(more)
        problems.extend(trouble)
    if problems:
        raise CliError("descriptors do not load:\n" + str(CatalogError(problems)))
    return found


def base_descriptors(args: Any) -> Descriptors:
    """The packaged catalog (unless ``--no-builtin``) plus ``--descriptors`` files."""
    if getattr(args, "no_builtin", False):
        base = Descriptors(Catalog.of(()))
    else:
        try:
            base = Descriptors(packaged_catalog())
        except CatalogError as err:  # a broken installation, not the user's input
            raise CliError(f"the packaged descriptor catalog does not load:\n{err}") from None
    return base.plus(load_descriptor_files(getattr(args, "descriptors", []) or []))


def connect_with_descriptors(args: Any, base: Descriptors) -> tuple[Connection, Descriptors]:
    """The cluster ``args`` name, and ``base`` plus its WorkloadDescriptor objects (they win).
    A cluster descriptor that does not compile is left out and warned about, as the extender
    reports it."""
    conn = connection(args)
    try:
        objects = cluster_descriptor_objects(conn)
    except KubeError as err:
        raise cluster_error(err) from None
    found: list[tuple[Descriptor, Origin]] = []
    for obj in objects:
        name = str((obj.get("metadata") or {}).get("name") or "?")
        try:
            descriptor = compile_any(obj, source=SOURCE_CLUSTER)
        except DescriptorError as err:
            print(f"warning: cluster descriptor {name}: {err}", file=sys.stderr)
            continue
        found.append((descriptor, Origin(descriptor.format, SOURCE_CLUSTER, name)))
    return conn, base.plus(found)


# --- files ---------------------------------------------------------------------------------

def read_text(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CliError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise CliError(f"{path}: is a directory, expected a YAML file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise CliError(f"{path}: cannot read: {err}") from None


def numbered_documents(text: str, file: str) -> Iterator[tuple[int, Any]]:
    """The non-empty documents of a YAML (or JSON) stream, numbered from 1."""
    try:
        yield from yaml_documents(text, file)
    except CatalogError as err:
        raise CliError(str(err)) from None


@dataclass(frozen=True)
class FileObject:
    obj: dict[str, Any]
    where: str
    """``FILE:DOC`` (plus ``.items[i]`` inside a List), for messages."""


def file_objects(path: str) -> list[FileObject]:
    """Every object of a file, Lists flattened, in file order."""
    label = "<stdin>" if path == "-" else path
    out: list[FileObject] = []
    for doc, data in numbered_documents(read_text(path), label):
        out.extend(_flatten(data, f"{label}:{doc}"))
    return out


def _flatten(data: object, where: str) -> Iterator[FileObject]:
    if not isinstance(data, dict):
        raise CliError(f"{where}: expected a Kubernetes object, got {_type_name(data)}")
    kind = data.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and "items" in data:
        items = data.get("items") or []
        if not isinstance(items, list):
            raise CliError(f"{where}: items: expected a list, got {_type_name(items)}")
        item_kind = kind[: -len("List")] if kind != "List" else None
        for i, raw in enumerate(items):
            item = raw
            if item_kind and isinstance(raw, dict) and not raw.get("kind"):
                item = {"apiVersion": data.get("apiVersion", "v1"), "kind": item_kind, **raw}
            yield from _flatten(item, f"{where}.items[{i}]")
        return
    if not isinstance(kind, str) or not kind:
        raise CliError(f"{where}: object has no kind")
    if not isinstance(data.get("apiVersion"), str):
        raise CliError(f"{where}: {kind} has no apiVersion")
    yield FileObject(data, where)


def _type_name(value: object) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number",
            bool: "a boolean"}.get(type(value), type(value).__name__)


# --- workloads and their pods ----------------------------------------------------------------

@dataclass(frozen=True)
class PodView:
    raw: Mapping[str, Any]
    info: PodInfo
    membership: Membership


@dataclass(frozen=True)
class Found:
    """One resolved workload, with the pods that belong to it."""

    tree: WorkloadTree
    raw: Mapping[str, Any]
    """The workload object as the file or the API server has it (its tree is resolved from
    the object with its claimed devices lowered)."""
    origin: Origin
    pods: tuple[PodView, ...] = ()


def resolve(obj: Mapping[str, Any], descriptors: Descriptors, *, where: str) -> WorkloadTree:
    try:
        descriptor = descriptors.catalog.require(obj)
    except UnknownKind as err:
        raise CliError(f"{where}: {err}") from None
    try:
        tree = resolve_workload(obj, descriptor)
    except WorkloadError as err:
        raise CliError(f"{where}: {err}") from None
    for warning in tree.warnings:
        print(f"warning: {where}: {tree.ref.kind}/{tree.ref.name}: {warning}", file=sys.stderr)
    return tree


def _pod_infos(pods: Iterable[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], PodInfo]]:
    out = []
    for raw in pods:
        try:
            out.append((raw, pod_from_api(raw)))
        except ObjectError:
            continue  # an unreadable pod is nobody's member; the workload is still described
    return sorted(out, key=lambda p: p[1].key)


def attach_pods(trees: Sequence[tuple[WorkloadTree, Mapping[str, Any]]],
                pods: Iterable[Mapping[str, Any]], owners: Iterable[Mapping[str, Any]],
                descriptors: Descriptors) -> list[Found]:
    """Each tree with the pods whose owner chain (or descriptor labels) lead to it."""
    workloads = {t.ref.key: t for t, _ in trees}
    index = ObjectIndex.of([*owners, *(raw for _, raw in trees)])
    members: dict[str, list[PodView]] = {key: [] for key in workloads}
    for raw, info in _pod_infos(pods):
        member = find_membership(info, objects=index, catalog=descriptors.catalog,
                                 workloads=workloads)
        if member is not None and member.workload.key in members:
            members[member.workload.key].append(PodView(raw, info, member))
    return [Found(tree, raw, descriptors.origin(tree.descriptor),
                  tuple(members[tree.ref.key])) for tree, raw in trees]


def workloads_in_file(path: str, descriptors: Descriptors, *,
                      devices: Sequence[Mapping[str, Any]] = ()) -> tuple[Descriptors, list[Found]]:
    """File mode: the workloads of a file (descriptors in the file are added first), each with
    the pods of the same file that belong to it. Bare pods that belong to no other workload
    are workloads of their own (kind ``Pod``). DRA objects of the file, and ``devices`` (a
    cluster's), count the devices its pods and templates claim."""
    written = file_objects(path)
    lowered = lower_objects([*(o.obj for o in written), *devices])[:len(written)]
    objects = [FileObject(dict(obj), o.where) for obj, o in zip(lowered, written, strict=True)]
    # Each workload's raw object is the one written (what -o json prints), not the lowered.
    as_written = {id(o.obj): w.obj for o, w in zip(objects, written, strict=True)}
    label = "<stdin>" if path == "-" else path
    docs = [(i, o.obj) for i, o in enumerate(objects, start=1) if is_descriptor(o.obj)]
    if docs:
        found, problems = compile_documents(docs, label, source=SOURCE_FILE)
        if problems:
            raise CliError("descriptors do not load:\n" + str(CatalogError(problems)))
        descriptors = descriptors.plus(found)
    catalog = descriptors.catalog
    rest = [o for o in objects if not is_descriptor(o.obj)]
    pods = [o.obj for o in rest if o.obj.get("kind") == "Pod" and o.obj.get("apiVersion") == "v1"]
    candidates = [o for o in rest if o.obj.get("kind") != "Pod" and catalog.for_object(o.obj)
                  is not None and not owned_by_described(o.obj, catalog)]
    trees = [(resolve(o.obj, descriptors, where=o.where), as_written[id(o.obj)])
             for o in candidates]
    found_list = attach_pods(trees, pods, [o.obj for o in rest], descriptors)
    claimed = {v.info.uid for f in found_list for v in f.pods}
    bare_pods = [o for o in rest if o.obj.get("kind") == "Pod" and o.obj.get("apiVersion") == "v1"
                 and not (o.obj.get("metadata") or {}).get("ownerReferences")]
    if catalog.for_api("v1", "Pod") is not None:
        extra = []
        for o in bare_pods:
            try:
                info = pod_from_api(o.obj)
            except ObjectError as err:
                raise CliError(f"{o.where}: {err}") from None
            if info.uid not in claimed:
                extra.append((resolve(o.obj, descriptors, where=o.where), as_written[id(o.obj)]))
        found_list.extend(attach_pods(extra, [o.obj for o in bare_pods], [], descriptors))
    if not found_list:
        raise CliError(_nothing_described(label, [o.obj for o in rest], catalog))
    return descriptors, found_list


def _nothing_described(label: str, objects: Sequence[Mapping[str, Any]], catalog: Catalog) -> str:
    if not objects:
        return f"{label}: no workload in the file"
    seen = sorted({f"{o.get('kind')} ({o.get('apiVersion')})" for o in objects})
    # The catalog's own message names the known kinds (and described versions of a known kind).
    try:
        catalog.require(objects[0])
    except UnknownKind as err:
        detail = str(err)
    else:  # pragma: no cover - only undescribed objects reach here
        detail = ""
    return f"{label}: no workload of a described kind (found {', '.join(seen)}); {detail}"


# --- live clusters -------------------------------------------------------------------------

def connection(args: Any, *, context: str | None = None) -> Connection:
    """The cluster of kubeconfig ``context``, else of ``--context``, else of the current
    context (``""`` or a list of several, as ``fit`` takes them, is none named here)."""
    chosen = context if context is not None else getattr(args, "context", None)
    groups = list(getattr(args, "as_group", None) or [])
    if len(groups) > 1:
        raise CliError("give one --as-group")
    try:
        conn = connect(getattr(args, "kubeconfig", None),
                       chosen if isinstance(chosen, str) and chosen else None,
                       timeout=getattr(args, "request_timeout", 10.0))
    except KubeError as err:
        raise cluster_error(err) from None
    user = getattr(args, "as_user", None)
    if groups and not user:
        raise CliError("--as-group needs --as (the API server impersonates a user)")
    if user:  # the API server's impersonation headers, as kubectl --as sends them
        conn.api.default_headers["Impersonate-User"] = user
        for group in groups:
            conn.api.default_headers["Impersonate-Group"] = group
    return conn


def cluster_error(err: KubeError) -> CliError:
    """API server trouble (unreachable or refused; a missing object is the input's fault);
    the message names the server. Every error exits 1, as kubectl's."""
    return CliError(str(err), cluster=not isinstance(err, NotFound))
