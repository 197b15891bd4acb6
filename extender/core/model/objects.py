"""API objects (plain mappings from the API server or a file) turned into core values.

:func:`node_from_api` and :func:`pod_from_api` read only what decisions need; a field of the
wrong type raises :class:`ObjectError` naming the object and the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from extender.core.model.errors import ModelError
from extender.core.model.podspec import DEVICE_DEMAND, PodSpecError, shape_of
from extender.core.model.quantity import QuantityError
from extender.core.model.resources import Resources
from extender.core.model.values import (
    LabelError,
    NodeInfo,
    NodeName,
    OwnerRef,
    PodInfo,
    PodPhase,
    Taint,
    freeze_labels,
)

DEVICE_SUPPLY = "muster.dev/device-supply"
"""Top-level key the state store adds to a raw Node: the DRA devices it can still give, as
resource -> milli-units (:mod:`extender.core.devices.lowering`). API objects never have it."""


def _extra(obj: Mapping[str, Any], key: str) -> Resources:
    raw = obj.get(key)
    if not isinstance(raw, Mapping) or not raw:
        return Resources()
    return Resources({str(k): v for k, v in raw.items() if isinstance(v, int)})


class ObjectError(ModelError):
    """An API object missing a field it needs, or holding one of the wrong type."""


def as_mapping(value: object) -> Mapping[str, Any]:
    """``value`` if it is a mapping, else an empty one: a field of the wrong type reads as
    absent."""
    return value if isinstance(value, Mapping) else {}


def object_key(obj: Mapping[str, Any], *, default_namespace: str = "") -> str:
    """``namespace/name``; an object without a namespace takes ``default_namespace``, and is
    keyed by its name alone when that is empty (a cluster-scoped object)."""
    meta = as_mapping(obj.get("metadata"))
    namespace = meta.get("namespace") or default_namespace
    name = meta.get("name") or ""
    return f"{namespace}/{name}" if namespace else str(name)


def _labels(meta: Mapping[str, Any], field: str, what: str) -> tuple[tuple[str, str], ...]:
    try:
        return freeze_labels(as_mapping(meta.get(field)))
    except LabelError as err:
        raise ObjectError(f"{what}: metadata.{field}: {err}") from err


def _meta(obj: Mapping[str, Any], what: str) -> tuple[Mapping[str, Any], str]:
    if not isinstance(obj, Mapping):
        raise ObjectError(f"{what}: expected an object")
    meta = as_mapping(obj.get("metadata"))
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ObjectError(f"{what}: metadata.name is required")
    return meta, name


def timestamp(value: object) -> float:
    """Seconds since the epoch of an RFC 3339 API timestamp (0.0 when absent or unreadable)."""
    if not isinstance(value, str):
        return 0.0
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def owner_refs(meta: Mapping[str, Any]) -> tuple[OwnerRef, ...]:
    out = []
    refs = meta.get("ownerReferences")
    for raw in refs if isinstance(refs, list) else []:
        ref = as_mapping(raw)
        kind, name = ref.get("kind"), ref.get("name")
        if isinstance(kind, str) and isinstance(name, str):
            out.append(OwnerRef(api_version=str(ref.get("apiVersion") or ""), kind=kind,
                                name=name, uid=str(ref.get("uid") or ""),
                                controller=ref.get("controller") is True))
    return tuple(out)


def node_from_api(obj: Mapping[str, Any]) -> NodeInfo:
    """A Node object -> :class:`NodeInfo` (allocatable, labels, taints, cordon)."""
    meta, name = _meta(obj, "node")
    spec = as_mapping(obj.get("spec"))
    status = as_mapping(obj.get("status"))
    try:
        allocatable = Resources.parse(as_mapping(status.get("allocatable")))
    except QuantityError as err:
        raise ObjectError(f"node {name}: status.allocatable: {err}") from err
    taints = []
    raw_taints = spec.get("taints")
    for raw in raw_taints if isinstance(raw_taints, list) else []:
        t = as_mapping(raw)
        if isinstance(t.get("key"), str):
            taints.append(Taint(key=t["key"], value=str(t.get("value") or ""),
                                effect=str(t.get("effect") or "NoSchedule")))
    return NodeInfo(
        name=NodeName(name),
        allocatable=allocatable + _extra(obj, DEVICE_SUPPLY),
        labels=_labels(meta, "labels", f"node {name}"),
        taints=tuple(taints),
        unschedulable=spec.get("unschedulable") is True,
    )


def pod_from_api(obj: Mapping[str, Any]) -> PodInfo:
    """A Pod object -> :class:`PodInfo`, its demand computed by :func:`podspec.shape_of`."""
    meta, name = _meta(obj, "pod")
    namespace = str(meta.get("namespace") or "default")
    spec = as_mapping(obj.get("spec"))
    status = as_mapping(obj.get("status"))
    annotations = as_mapping(meta.get("annotations"))
    labels = _labels(meta, "labels", f"pod {namespace}/{name}")
    frozen_annotations = _labels(meta, "annotations", f"pod {namespace}/{name}")
    try:
        shape = shape_of(spec, annotations=annotations)
    except PodSpecError as err:
        raise ObjectError(f"pod {namespace}/{name}: {err}") from err
    node = spec.get("nodeName")
    try:
        phase = PodPhase(str(status.get("phase") or "Pending"))
    except ValueError:
        phase = PodPhase.UNKNOWN
    return PodInfo(
        uid=str(meta.get("uid") or f"{namespace}/{name}"),
        namespace=namespace,
        name=name,
        shape=shape,
        node_name=NodeName(node) if isinstance(node, str) and node else None,
        phase=phase,
        labels=labels,
        annotations=frozen_annotations,
        owners=owner_refs(meta),
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        created=timestamp(meta.get("creationTimestamp")),
        deleting=meta.get("deletionTimestamp") is not None,
        gates=scheduling_gates(spec),
        claimed=_extra(spec, DEVICE_DEMAND),
    )


def scheduling_gates(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of a pod spec's ``schedulingGates`` (entries without a string name skipped)."""
    raw = spec.get("schedulingGates")
    if not isinstance(raw, list):
        return ()
    return tuple(g["name"] for g in raw
                 if isinstance(g, Mapping) and isinstance(g.get("name"), str))
