"""Build a :class:`ClusterSnapshot` from API objects and a catalog.

Every object of a described kind is resolved into a workload tree; bare pods (no owner) are
workloads of kind ``Pod`` when the catalog describes pods; every pod then gets its membership.
Objects controlled by an object of a described kind (a JobSet's Jobs) are parts of that
workload, not workloads. Objects that cannot be resolved are left out and named in the
snapshot's ``refused``, so one malformed custom resource never stops the scheduler from seeing
the rest of the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

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


def owned_by_described(obj: Mapping[str, Any], catalog: Catalog) -> bool:
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
    if descriptor is None or owned_by_described(obj, catalog):
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
    limits: WorkloadLimits = DEFAULT_LIMITS,
) -> ClusterSnapshot:
    """Nodes, pods (API mappings or core values) and other objects -> a snapshot.

    Unreadable nodes and pods are skipped; a workload that does not resolve is left out and
    named, with why, in the snapshot's ``refused``.
    """
    object_list = list(objects)
    node_infos = [n for n in map(read_node, nodes) if isinstance(n, NodeInfo)]
    trees: dict[str, WorkloadTree] = {}
    refused: dict[str, tuple[WorkloadRef, str]] = {}
    for obj in object_list:
        found = read_tree(obj, catalog, limits)
        if isinstance(found, WorkloadTree):
            trees[found.ref.key] = found
        elif isinstance(found, str):
            ref = ref_or_none(obj)
            if ref is not None:
                refused[ref.key] = (ref, found)
    pod_infos: list[PodInfo] = []
    for p in pods:
        info, own = (p, None) if isinstance(p, PodInfo) else read_pod(p, catalog, limits)
        if info is not None:
            pod_infos.append(info)
            if isinstance(own, WorkloadTree):
                trees[own.ref.key] = own
    workloads = {k: trees[k] for k in sorted(trees)}
    index = ObjectIndex.of(object_list)
    memberships: dict[str, Membership] = {}
    unresolved: dict[str, str] = {}
    for pod in pod_infos:
        member = find_membership(pod, objects=index, catalog=catalog, workloads=workloads)
        if member is not None:
            memberships[pod.uid] = member
        elif not pod.holds_resources:
            why = (refused_owner(pod, objects=index, refused=refused)
                   or pending_owner(pod, objects=index, catalog=catalog))
            if why is not None:
                unresolved[pod.uid] = why
    return ClusterSnapshot.of(node_infos, pod_infos, workloads.values(), memberships,
                              revision=revision, unresolved=unresolved, refused=refused)


def ref_or_none(obj: Mapping[str, Any]) -> WorkloadRef | None:
    try:
        return workload_ref(obj)
    except WorkloadError:
        return None
