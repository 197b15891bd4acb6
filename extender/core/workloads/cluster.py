"""Build a :class:`ClusterSnapshot` from API objects and a catalog.

Every object of a described kind is resolved into a workload tree; bare pods (no owner) are
workloads of kind ``Pod`` when the catalog describes pods; every pod then gets its membership.
Objects controlled by an object of a described kind (a JobSet's Jobs) are parts of that
workload, not workloads. Objects that cannot be resolved are left out and reported by
:func:`resolve_objects`, so one malformed custom resource never stops the scheduler from seeing
the rest of the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

from extender.core.model.objects import ObjectError, node_from_api, owner_refs, pod_from_api
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Membership, NodeInfo, PodInfo, WorkloadRef, WorkloadTree
from extender.core.workloads.catalog import Catalog
from extender.core.workloads.expressions import WorkloadError
from extender.core.workloads.membership import (
    ObjectIndex,
    find_membership,
    pending_owner,
    refused_owner,
)
from extender.core.workloads.workload import (
    DEFAULT_LIMITS,
    WorkloadLimits,
    resolve_workload,
    workload_ref,
)


def resolve_objects(objects: Iterable[Mapping[str, Any]], catalog: Catalog,
                    limits: WorkloadLimits = DEFAULT_LIMITS,
                    ) -> tuple[list[WorkloadTree], list[str]]:
    """Resolve the objects of described kinds; returns the trees and one problem per failure."""
    trees: dict[str, WorkloadTree] = {}
    problems: list[str] = []
    for obj in objects:
        descriptor = catalog.for_object(obj) if isinstance(obj, Mapping) else None
        if descriptor is None or _owned_by_described(obj, catalog):
            continue
        try:
            tree = resolve_workload(obj, descriptor, limits)
        except WorkloadError as err:
            problems.append(str(err))
            continue
        trees[tree.ref.key] = tree
    return [trees[k] for k in sorted(trees)], problems


def _owned_by_described(obj: Mapping[str, Any], catalog: Catalog) -> bool:
    """A Job inside a JobSet, a StatefulSet inside an LWS: part of the owner's tree, not a
    workload of its own (counting it too would reserve its pods twice)."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return False
    return any(ref.controller and catalog.for_api(ref.api_version, ref.kind) is not None
               for ref in owner_refs(meta))


def _is_bare(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata")
    return isinstance(meta, Mapping) and not meta.get("ownerReferences")


_K = TypeVar("_K")
_V = TypeVar("_V")


class _ByIdentity(Generic[_V]):
    """Values derived from objects, found again by the object's identity.

    A live store replaces an object when it changes, so an object seen before (the same
    Python object) has the same derived value. Each build keeps only the objects it saw, so
    the memo never outgrows the cluster.
    """

    def __init__(self) -> None:
        self._old: dict[int, tuple[object, _V]] = {}
        self._new: dict[int, tuple[object, _V]] = {}

    def get(self, obj: _K, derive: Callable[[_K], _V]) -> _V:
        hit = self._old.get(id(obj))
        if hit is None or hit[0] is not obj:
            hit = (obj, derive(obj))
        self._new[id(obj)] = hit
        return hit[1]

    def each(self, objs: Iterable[_K], derive: Callable[[_K], _V]) -> list[_V]:
        """:meth:`get` for many objects (one call, the loop in here: it runs per pod)."""
        old, new, out = self._old, self._new, []
        for obj in objs:
            key = id(obj)
            hit = old.get(key)
            if hit is None or hit[0] is not obj:
                hit = (obj, derive(obj))
            new[key] = hit
            out.append(hit[1])
        return out

    def roll(self) -> None:
        """End a build: what it did not see is forgotten."""
        self._old, self._new = self._new, {}

    def clear(self) -> None:
        self._old, self._new = {}, {}


class BuildMemo:
    """What :func:`build_snapshot` may reuse from the previous build of the same source.

    Rebuilding a 5,000-node cluster after every pod event would otherwise parse every node and
    pod and resolve every workload again (over a second per event). With a memo, unchanged
    objects cost a lookup; memberships are reused while no workload object and no descriptor
    changed (a pod's membership depends only on itself, the objects above it and the catalog).
    Not thread-safe: one builder owns it.
    """

    def __init__(self) -> None:
        self._catalog: Catalog | None = None
        self.nodes: _ByIdentity[NodeInfo | str] = _ByIdentity()
        self.pods: _ByIdentity[tuple[PodInfo | None, WorkloadTree | str | None]] = _ByIdentity()
        """Raw pod (or a given PodInfo) -> the pod, and its own tree when it is a bare pod."""
        self.trees: _ByIdentity[WorkloadTree | str | None] = _ByIdentity()
        """Object -> its tree, the problem resolving it, or None if it is no workload."""
        self.members: _ByIdentity[tuple[Membership | None, str | None]] = _ByIdentity()
        self._objects: list[Mapping[str, Any]] = []
        self.index: ObjectIndex | None = None
        self.fresh: list[str] = []
        """Why objects new to this memo were left out (read once per object: the caller
        reports each once, not on every build)."""

    def take_fresh(self) -> list[str]:
        out, self.fresh = self.fresh, []
        return out

    def start(self, catalog: Catalog, objects: list[Mapping[str, Any]]) -> None:
        if catalog is not self._catalog:
            self._catalog = catalog
            self.pods.clear()
            self.trees.clear()
            self.members.clear()
            self.index = None
        same = len(objects) == len(self._objects) and all(
            a is b for a, b in zip(objects, self._objects, strict=True))
        if not same:
            self.members.clear()
            self.index = None
            self._objects = objects

    def roll(self) -> None:
        for memo in (self.nodes, self.pods, self.trees, self.members):
            memo.roll()


def read_node(raw: NodeInfo | Mapping[str, Any]) -> NodeInfo | str:
    """The node, or why it cannot be read."""
    if isinstance(raw, NodeInfo):
        return raw
    try:
        return node_from_api(raw)
    except ObjectError as err:
        return str(err)


def read_pod(raw: Mapping[str, Any], catalog: Catalog, limits: WorkloadLimits,
         ) -> tuple[PodInfo | None, WorkloadTree | str | None]:
    """The pod, and the workload it is when it has no owner (a bare pod); or ``None`` and why
    the pod cannot be read."""
    try:
        info = pod_from_api(raw)
    except ObjectError as err:
        return None, str(err)
    if _is_bare(raw) and raw.get("kind", "Pod") == "Pod":
        return info, read_tree({"apiVersion": "v1", "kind": "Pod", **raw}, catalog, limits)
    return info, None


def read_tree(obj: Mapping[str, Any], catalog: Catalog,
          limits: WorkloadLimits) -> WorkloadTree | str | None:
    descriptor = catalog.for_object(obj) if isinstance(obj, Mapping) else None
    if descriptor is None or _owned_by_described(obj, catalog):
        return None
    try:
        return resolve_workload(obj, descriptor, limits)
    except WorkloadError as err:
        return str(err)


def build_snapshot(
    *,
    nodes: Iterable[NodeInfo | Mapping[str, Any]],
    pods: Iterable[PodInfo | Mapping[str, Any]],
    objects: Iterable[Mapping[str, Any]],
    catalog: Catalog,
    revision: int = 0,
    memo: BuildMemo | None = None,
    limits: WorkloadLimits = DEFAULT_LIMITS,
) -> ClusterSnapshot:
    """Nodes, pods (API mappings or core values) and other objects -> a snapshot.

    Unreadable nodes and pods are skipped, as are workloads that do not resolve. ``memo``
    (kept by the caller between builds of one changing source) makes unchanged objects free.
    """
    memo = memo or BuildMemo()
    object_list = list(objects)
    memo.start(catalog, object_list)
    fresh = memo.fresh

    def node(n: NodeInfo | Mapping[str, Any]) -> NodeInfo | str:
        found = read_node(n)
        if isinstance(found, str):
            fresh.append(found)
        return found

    def tree(o: Mapping[str, Any]) -> WorkloadTree | str | None:
        found = read_tree(o, catalog, limits)
        if isinstance(found, str):
            fresh.append(found)
        return found

    node_infos = [n for n in memo.nodes.each(nodes, node) if isinstance(n, NodeInfo)]
    trees: dict[str, WorkloadTree] = {}
    refused: dict[str, tuple[WorkloadRef, str]] = {}
    for obj, found in zip(object_list, memo.trees.each(object_list, tree), strict=True):
        if isinstance(found, WorkloadTree):
            trees[found.ref.key] = found
        elif isinstance(found, str):
            ref = ref_or_none(obj)
            if ref is not None:
                refused[ref.key] = (ref, found)
    pod_infos: list[PodInfo] = []

    def parsed(p: PodInfo | Mapping[str, Any],
               ) -> tuple[PodInfo | None, WorkloadTree | str | None]:
        if isinstance(p, PodInfo):
            return p, None
        found = read_pod(p, catalog, limits)
        if isinstance(found[1], str):
            fresh.append(found[1])
        return found

    for info, own in memo.pods.each(pods, parsed):
        if info is not None:
            pod_infos.append(info)
            if isinstance(own, WorkloadTree):
                trees[own.ref.key] = own
    workloads = {k: trees[k] for k in sorted(trees)}
    if memo.index is None:
        memo.index = ObjectIndex.of(object_list)
    index = memo.index

    def place(pod: PodInfo) -> tuple[Membership | None, str | None]:
        member = find_membership(pod, objects=index, catalog=catalog, workloads=workloads)
        if member is not None or pod.holds_resources:
            return member, None
        return None, (refused_owner(pod, objects=index, refused=refused)
                      or pending_owner(pod, objects=index, catalog=catalog))

    memberships: dict[str, Membership] = {}
    unresolved: dict[str, str] = {}
    for pod, (member, why) in zip(pod_infos, memo.members.each(pod_infos, place),
                                  strict=True):
        if member is not None:
            memberships[pod.uid] = member
        elif why is not None:
            unresolved[pod.uid] = why
    memo.roll()
    return ClusterSnapshot.of(node_infos, pod_infos, workloads.values(), memberships,
                              revision=revision, unresolved=unresolved, refused=refused)


def ref_or_none(obj: Mapping[str, Any]) -> WorkloadRef | None:
    try:
        return workload_ref(obj)
    except WorkloadError:
        return None
