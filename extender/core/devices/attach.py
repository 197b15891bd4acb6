"""DRA lowered into raw objects: Nodes, Pods and workloads' pod templates with their device
supply and demand attached, for the state store, the command line's files and the simulator.

The store calls :meth:`DeviceLowering.refresh` before it hands objects to the snapshot builder;
only then, and only when a DRA object changed since, is anything computed again. The costly part
(matching devices against classes and selectors in CEL) is redone only when slices or classes
change; a request signature not seen before is matched alone, and allocations move the free
counts alone. A cluster without any DRA object pays nothing: nodes and pods pass through
untouched.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from extender.core.devices.lowering import (
    DEFAULT_NAMESPACE,
    DeviceCatalog,
    DeviceView,
    signatures_of,
)
from extender.core.model.objects import DEVICE_SUPPLY
from extender.core.model.podspec import DEVICE_DEMAND

RawObject = Mapping[str, Any]

RESOURCE_SLICES = "resource.k8s.io/v1/ResourceSlice"
DEVICE_CLASSES = "resource.k8s.io/v1/DeviceClass"
RESOURCE_CLAIMS = "resource.k8s.io/v1/ResourceClaim"
CLAIM_TEMPLATES = "resource.k8s.io/v1/ResourceClaimTemplate"
DEVICE_SOURCES = (RESOURCE_SLICES, DEVICE_CLASSES, RESOURCE_CLAIMS, CLAIM_TEMPLATES)
"""The sources of DRA objects, named as the state store names a source
(``<apiVersion>/<kind>``): lowered into node supply and pod demand, never workload objects."""
_CATALOG_SOURCES = frozenset({RESOURCE_SLICES, DEVICE_CLASSES})
_TERMINAL = ("Succeeded", "Failed")
"""Phases of pods that hold nothing: a claim reserved for one is counted as held by none."""


class DeviceLowering:
    """Not thread-safe: the store calls it under its lock."""

    def __init__(self) -> None:
        self._view: DeviceView | None = None
        self._catalog: DeviceCatalog | None = None
        self._stale = True
        self._catalog_stale = True
        self._touched: set[str] | None = None
        """Nodes whose free devices claim changes moved since the last refresh (``None``:
        every node's may have)."""

    @property
    def view(self) -> DeviceView | None:
        return self._view

    def invalidate(self, source: str, nodes: Iterable[str] | None = None) -> None:
        """A DRA object of ``source`` changed; ``nodes``: all the claim change can move."""
        if nodes is None or (self._touched is None and self._stale):
            self._touched = None
        else:
            self._touched = (self._touched if self._stale and self._touched is not None
                             else set()) | set(nodes)
        self._stale = True
        if source in _CATALOG_SOURCES:
            self._catalog_stale = True

    def clear(self) -> bool:
        """No DRA object left; whether there was a view (every node's supply then moves)."""
        had = self._view is not None
        self._view, self._catalog, self._stale, self._catalog_stale = None, None, True, True
        self._touched = None
        return had

    def refresh(self, *, slices: Iterable[RawObject], classes: Iterable[RawObject],
                claims: Iterable[RawObject], templates: Iterable[RawObject],
                pods: Iterable[RawObject]) -> bool:
        """Compute again what changed; whether the device catalog was built again."""
        if not self._stale and self._view is not None:
            return False
        claims, templates = list(claims), list(templates)
        signatures = signatures_of(claims, templates)
        rebuilt = False
        if self._catalog is None or self._catalog_stale:
            self._catalog = DeviceCatalog.build(slices, classes, signatures)
            self._catalog_stale, rebuilt = False, True
        elif not self._catalog.covers(signatures):
            # A signature no claim or template had before. One that went (its last claim
            # allocated) stays matched until then: claims come and go by the second, and
            # every change of the set would move every node's supply.
            self._catalog, rebuilt = self._catalog.with_signatures(signatures), True
        live = frozenset(str((p.get("metadata") or {}).get("uid") or "") for p in pods
                         if (p.get("status") or {}).get("phase") not in _TERMINAL)
        self._view = DeviceView.build(self._catalog, claims=claims, templates=templates,
                                      live_pods=live, previous=self._view,
                                      only=None if rebuilt else self._touched)
        self._stale, self._touched = False, None
        return rebuilt

    def claim_touches(self, before: RawObject | None, after: RawObject | None,
                      ) -> tuple[set[str], set[str]] | None:
        """The nodes whose free devices and the pods (store keys) whose demand a claim's
        change can move: the nodes of its allocated devices, before and after, and the pods
        that own it or that it is reserved for. ``None`` when that cannot be told: no view
        yet, or a claim no pod owns (a named claim any pod may list)."""
        if self._catalog is None or self._view is None:
            return None
        nodes: set[str] = set()
        pods: set[str] = set()
        by_id = self._catalog.devices_by_id
        for claim in (before, after):
            if claim is None:
                continue
            meta = claim.get("metadata") or {}
            namespace = str(meta.get("namespace") or DEFAULT_NAMESPACE)
            owners = [o for o in meta.get("ownerReferences") or ()
                      if isinstance(o, Mapping) and o.get("kind") == "Pod" and o.get("name")]
            if not owners:
                return None
            pods.update(f"{namespace}/{o['name']}" for o in owners)
            status = claim.get("status") or {}
            for entry in status.get("reservedFor") or ():
                if isinstance(entry, Mapping) and entry.get("resource") == "pods":
                    pods.add(f"{namespace}/{entry.get('name')}")
            results = ((status.get("allocation") or {}).get("devices") or {}).get("results")
            for result in results if isinstance(results, list) else ():
                r = result if isinstance(result, Mapping) else {}
                device = by_id.get(f"{r.get('driver')}/{r.get('pool')}/{r.get('device')}")
                if device is not None:
                    nodes.add(device.node)
        return nodes, pods

    def node(self, node: RawObject) -> RawObject:
        if self._view is None:
            return node
        status = node.get("status")
        allocatable = status.get("allocatable") if isinstance(status, Mapping) else None
        name = str((node.get("metadata") or {}).get("name") or "")
        supply = self._view.node_supply(
            name, allocatable if isinstance(allocatable, Mapping) else {})
        return {**node, DEVICE_SUPPLY: supply} if supply else node

    def pod(self, pod: RawObject) -> RawObject:
        if self._view is None:
            return pod
        demand = self._view.pod_demand(pod)
        pinned = self._view.pod_node_terms(pod)
        if not demand and not pinned:
            return pod
        spec = dict(pod.get("spec") or {})
        if demand:
            spec[DEVICE_DEMAND] = demand
        if pinned:
            spec["affinity"] = _pinned_affinity(spec.get("affinity"), pinned)
        return {**pod, "spec": spec}

    def workload(self, obj: RawObject) -> RawObject:
        """A workload object with each pod template's device demand, wherever its templates
        are (any PodSpec with ``resourceClaims`` beneath it), copied along the way only."""
        if self._view is None:
            return obj
        namespace = str((obj.get("metadata") or {}).get("namespace") or DEFAULT_NAMESPACE)
        view = self._view

        def lowered(value: object, depth: int) -> object:
            if depth > _DEPTH:
                return value
            if isinstance(value, Mapping):
                out: dict[str, Any] | None = None
                if isinstance(value.get("resourceClaims"), list) and "containers" in value:
                    demand = view.spec_demand(namespace, value)
                    if demand:
                        out = {**value, DEVICE_DEMAND: demand}
                for key, item in value.items():
                    new = lowered(item, depth + 1)
                    if new is not item:
                        out = out if out is not None else dict(value)
                        out[key] = new
                return out if out is not None else value
            if isinstance(value, list):
                items = [lowered(item, depth + 1) for item in value]
                changed = any(a is not b for a, b in zip(items, value, strict=True))
                return items if changed else value
            return value

        found = lowered(obj, 0)
        return found if isinstance(found, Mapping) else obj


_DEPTH = 24
"""How deep a pod template may sit in a workload object (JobSet: 7 levels)."""


DEVICE_KINDS = frozenset(source.rsplit("/", 1)[-1] for source in DEVICE_SOURCES)


def is_device_object(obj: RawObject) -> bool:
    return str(obj.get("apiVersion") or "").startswith("resource.k8s.io/") \
        and obj.get("kind") in DEVICE_KINDS


def lowering_of(objects: Iterable[RawObject]) -> DeviceLowering:
    """A lowering over the DRA objects among ``objects`` (a file, a snapshot, a listing)."""
    found: dict[str, list[RawObject]] = {kind: [] for kind in DEVICE_KINDS}
    pods: list[RawObject] = []
    for obj in objects:
        if is_device_object(obj):
            found[str(obj.get("kind"))].append(obj)
        elif obj.get("kind") == "Pod":
            pods.append(obj)
    lowering = DeviceLowering()
    if any(found.values()):
        lowering.refresh(slices=found["ResourceSlice"], classes=found["DeviceClass"],
                         claims=found["ResourceClaim"],
                         templates=found["ResourceClaimTemplate"], pods=pods)
    return lowering


def lower_objects(objects: Sequence[RawObject]) -> list[dict[str, Any]]:
    """``objects`` with DRA lowered into them as the store lowers what it holds: Nodes with
    their free devices, Pods and workloads' pod templates with their claims' devices. Same
    length and order; DRA objects themselves pass unchanged."""
    lowering = lowering_of(objects)
    if lowering.view is None:
        return [dict(o) for o in objects]
    out: list[RawObject] = []
    for obj in objects:
        kind = obj.get("kind")
        if is_device_object(obj):
            out.append(obj)
        elif kind == "Node":
            out.append(lowering.node(obj))
        elif kind == "Pod":
            out.append(lowering.pod(obj))
        else:
            out.append(lowering.workload(obj))
    return [dict(o) for o in out]


_MAX_PINNED_TERMS = 64


def _pinned_affinity(affinity: object,
                     pinned: tuple[tuple[Mapping[str, Any], ...], ...]) -> dict[str, Any]:
    """``affinity`` with its required node terms ANDed with every allocated claim's node
    selector, as kube-scheduler applies both (terms are ORed within a selector, selectors
    ANDed): each combination of one term of each, its requirements joined."""
    base = dict(affinity) if isinstance(affinity, Mapping) else {}
    node = dict(base.get("nodeAffinity") or {}) if isinstance(
        base.get("nodeAffinity"), Mapping) else {}
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    existing = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    terms: Sequence[Mapping[str, Any]] = (
        [t for t in existing if isinstance(t, Mapping)] if isinstance(existing, list) and existing
        else [{}])
    for selector in pinned:
        terms = [_joined(t, u) for t in terms for u in selector][:_MAX_PINNED_TERMS]
    node["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    base["nodeAffinity"] = node
    return base


def _joined(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """One node selector term requiring everything ``a`` and ``b`` require."""
    out: dict[str, Any] = {}
    for key in ("matchExpressions", "matchFields"):
        both = [*(a.get(key) or ()), *(b.get(key) or ())]
        if both:
            out[key] = both
    return out

