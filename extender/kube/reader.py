"""Read-only views of a live cluster for the command line: workloads of a kind, their pods and
the owner objects between them, the cluster's descriptors, a context's namespace.

Everything goes through :class:`~extender.kube.client.Connection`, so failures arrive as
:class:`~extender.kube.client.KubeError` subclasses whose messages name the server.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from kubernetes import config
from kubernetes.config.config_exception import ConfigException

from extender.core.workloads.descriptor import Descriptor
from extender.kube.client import Connection, Forbidden, NotFound, ResourceType

POD_TYPE = ResourceType(group="", version="v1", kind="Pod", plural="pods", namespaced=True)
NODE_TYPE = ResourceType(group="", version="v1", kind="Node", plural="nodes", namespaced=False)
DEVICE_TYPES = tuple(
    ResourceType(group="resource.k8s.io", version="v1", kind=kind, plural=plural,
                 namespaced=namespaced)
    for kind, plural, namespaced in (
        ("ResourceSlice", "resourceslices", False), ("DeviceClass", "deviceclasses", False),
        ("ResourceClaim", "resourceclaims", True),
        ("ResourceClaimTemplate", "resourceclaimtemplates", True)))
"""Dynamic Resource Allocation (``resource.k8s.io/v1``): devices, classes, claims, templates."""
DESCRIPTOR_GROUP_KIND = ("muster.dev", "WorkloadDescriptor")
KARTA_GROUP_KIND = ("run.ai", "Karta")
"""NVIDIA Workload Map descriptors (``kartas.run.ai``), read as descriptors of format karta."""

#: Where owner kinds usually live; a pod's owner chain is followed through these first.
_PREFERRED_GROUPS = ("apps", "batch", "")


def context_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace the kubeconfig context names, else ``default`` (as kubectl does)."""
    path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    try:
        contexts, active = config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=path.split(os.pathsep)[0])
    except (ConfigException, OSError, TypeError, ValueError):
        return "default"
    chosen = active
    for ctx in contexts or []:
        if context and ctx.get("name") == context:
            chosen = ctx
    namespace = ((chosen or {}).get("context") or {}).get("namespace")
    return namespace if isinstance(namespace, str) and namespace else "default"


def served_types(conn: Connection, descriptor: Descriptor) -> list[ResourceType]:
    """The resource types to read a descriptor's kind through, one per described version the
    server may serve (the discovered preferred version first when it is described)."""
    target = descriptor.target
    found = conn.resource_types().get((target.group, target.kind))
    if found is None:
        return []
    versions = list(target.versions)
    if found.version in versions:
        versions.remove(found.version)
        versions.insert(0, found.version)
    return [ResourceType(group=target.group, version=v, kind=target.kind, plural=found.plural,
                         namespaced=found.namespaced, short_names=found.short_names)
            for v in versions]


def get_workload(conn: Connection, descriptor: Descriptor, name: str,
                 namespace: str) -> dict[str, Any] | None:
    """The object ``name`` of the descriptor's kind, or ``None`` when it does not exist (or the
    kind is not served)."""
    for rtype in served_types(conn, descriptor):
        try:
            obj: dict[str, Any] = conn.get(rtype, name, namespace)
        except NotFound:
            continue
        obj.setdefault("apiVersion", rtype.api_version)
        obj.setdefault("kind", rtype.kind)
        return obj
    return None


def list_workloads(conn: Connection, descriptor: Descriptor, namespace: str | None, *,
                   label_selector: str | None = None) -> list[dict[str, Any]]:
    """Every object of the descriptor's kind (``namespace=None``: all namespaces), only those
    ``label_selector`` selects when given (the API server filters)."""
    for rtype in served_types(conn, descriptor):
        try:
            return conn.list(rtype, namespace, label_selector=label_selector)
        except NotFound:  # this version is described but not served: try the next one
            continue
    return []


def owner_types(conn: Connection, kinds: Iterable[str]) -> list[ResourceType]:
    """Served types of the owner kinds between pods and workloads (``Job``, ``StatefulSet``)."""
    wanted = set(kinds)
    by_kind: dict[str, ResourceType] = {}
    rank = {g: i for i, g in enumerate(_PREFERRED_GROUPS)}
    for (group, kind), rtype in sorted(conn.resource_types().items()):
        if kind not in wanted:
            continue
        current = by_kind.get(kind)
        if current is None or rank.get(group, 99) < rank.get(current.group, 99):
            by_kind[kind] = rtype
    return [by_kind[k] for k in sorted(by_kind)]


def list_pods_and_owners(conn: Connection, descriptors: Iterable[Descriptor],
                         namespace: str | None,
                         ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Pods of ``namespace`` (or all) and the objects of the descriptors' owner kinds, for
    walking owner references from a pod up to its workload."""
    pods = conn.list(POD_TYPE, namespace)
    return pods, owner_objects(conn, descriptors, namespace)


def owner_objects(conn: Connection, descriptors: Iterable[Descriptor],
                  namespace: str | None) -> list[dict[str, Any]]:
    """The objects of the descriptors' owner kinds (Jobs, StatefulSets...) in ``namespace``."""
    owners: list[dict[str, Any]] = []
    kinds = {k for d in descriptors for k in d.pods.owners}
    for rtype in owner_types(conn, kinds):
        try:
            owners.extend(conn.list(rtype, namespace))
        except NotFound:
            continue
    return owners


def cluster_descriptor_objects(conn: Connection) -> list[dict[str, Any]]:
    """The cluster's ``WorkloadDescriptor`` objects, then its Workload Map ``Karta`` objects;
    a kind whose CRD is not installed (or went away while listing) contributes none."""
    out: list[dict[str, Any]] = []
    for group_kind in (DESCRIPTOR_GROUP_KIND, KARTA_GROUP_KIND):
        rtype = conn.resource_types().get(group_kind)
        if rtype is None:
            continue
        try:
            out.extend(conn.list(rtype))
        except NotFound:
            continue
    return out


def nodes_and_pods(conn: Connection) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every node and every pod: what ``kubectl get nodes,pods -A`` shows, for ``muster fit``."""
    return conn.list(NODE_TYPE), conn.list(POD_TYPE)


def device_objects(conn: Connection, namespace: str | None) -> list[dict[str, Any]]:
    """ResourceSlices, DeviceClasses, and the ResourceClaims and templates of ``namespace``
    (``None``: all): what counts GPUs allocated through DRA. A cluster that does not serve
    ``resource.k8s.io/v1``, or RBAC that forbids a kind, gives none of that kind."""
    out: list[dict[str, Any]] = []
    for rtype in DEVICE_TYPES:
        try:
            out.extend(conn.list(rtype, namespace=namespace if rtype.namespaced else None))
        except (NotFound, Forbidden):
            continue
    return out
