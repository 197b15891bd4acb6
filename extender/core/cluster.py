"""Build a :class:`ClusterSnapshot` from API objects and a catalog.

Every object of a described kind is resolved into a workload tree; bare pods (no owner) are
workloads of kind ``Pod`` when the catalog describes pods; every pod then gets its membership.
Objects controlled by an object of a described kind (a JobSet's Jobs) are parts of that
workload, not workloads. Objects that cannot be resolved are left out and reported by
:func:`resolve_objects`, so one malformed custom resource never stops the scheduler from seeing
the rest of the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from extender.core.catalog import Catalog
from extender.core.expressions import WorkloadError
from extender.core.membership import ObjectIndex, find_membership, pending_owner
from extender.core.model import Membership, NodeInfo, PodInfo, WorkloadTree
from extender.core.objects import ObjectError, node_from_api, owner_refs, pod_from_api
from extender.core.snapshot import ClusterSnapshot
from extender.core.workload import resolve_workload


def resolve_objects(objects: Iterable[Mapping[str, Any]], catalog: Catalog,
                    ) -> tuple[list[WorkloadTree], list[str]]:
    """Resolve the objects of described kinds; returns the trees and one problem per failure."""
    trees: dict[str, WorkloadTree] = {}
    problems: list[str] = []
    for obj in objects:
        descriptor = catalog.for_object(obj) if isinstance(obj, Mapping) else None
        if descriptor is None or _owned_by_described(obj, catalog):
            continue
        try:
            tree = resolve_workload(obj, descriptor)
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


def build_snapshot(
    *,
    nodes: Iterable[NodeInfo | Mapping[str, Any]],
    pods: Iterable[PodInfo | Mapping[str, Any]],
    objects: Iterable[Mapping[str, Any]],
    catalog: Catalog,
    revision: int = 0,
) -> ClusterSnapshot:
    """Nodes, pods (API mappings or core values) and other objects -> a snapshot.

    Unreadable nodes and pods are skipped, as are workloads that do not resolve.
    """
    node_infos = []
    for n in nodes:
        try:
            node_infos.append(n if isinstance(n, NodeInfo) else node_from_api(n))
        except ObjectError:
            continue
    pod_infos: list[PodInfo] = []
    bare: list[Mapping[str, Any]] = []
    for p in pods:
        if isinstance(p, PodInfo):
            pod_infos.append(p)
            continue
        try:
            pod_infos.append(pod_from_api(p))
        except ObjectError:
            continue
        if _is_bare(p) and p.get("kind", "Pod") == "Pod":
            bare.append({"apiVersion": "v1", "kind": "Pod", **p})
    object_list = list(objects)
    trees, _ = resolve_objects([*object_list, *bare], catalog)
    workloads = {t.ref.key: t for t in trees}
    index = ObjectIndex.of(object_list)
    memberships: dict[str, Membership] = {}
    unresolved: dict[str, str] = {}
    for pod in pod_infos:
        member = find_membership(pod, objects=index, catalog=catalog, workloads=workloads)
        if member is not None:
            memberships[pod.uid] = member
        elif not pod.holds_resources:
            why = pending_owner(pod, objects=index, catalog=catalog)
            if why is not None:
                unresolved[pod.uid] = why
    return ClusterSnapshot.of(node_infos, pod_infos, trees, memberships, revision=revision,
                              unresolved=unresolved)
