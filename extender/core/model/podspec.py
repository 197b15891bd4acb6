"""Turn an API PodSpec (a plain mapping) into a :class:`PodShape`, as kube-scheduler would.

Demand follows ``k8s.io/component-helpers/resource.PodRequests``: the sum of the containers
plus restartable init containers (sidecars), against the largest single init container (plus the
sidecars started before it), take the larger per resource, then add pod overhead. Pod-level
``spec.resources.requests`` replace the container sum for the resources they name. A container
limit without a request counts as the request, as API defaulting would make it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from extender.core.model.errors import ModelError
from extender.core.model.quantity import MILLI, QuantityError
from extender.core.model.resources import EMPTY, Resources
from extender.core.model.values import (
    LabelError,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodShape,
    Toleration,
    freeze_labels,
)

DEVICE_DEMAND = "muster.dev/device-demand"
"""Key the state store adds to a raw PodSpec (a pod's or a workload's pod template's) that
takes devices through ResourceClaims: resource -> milli-units its claims still ask, lowered by
:mod:`extender.core.devices.lowering`. API objects never have it."""

#: Annotations that ask for a share of one GPU device.
GPU_FRACTION_ANNOTATIONS = ("gpu-fraction", "muster.dev/gpu-fraction")
GPU_MILLI_ANNOTATION = "muster.dev/gpu-milli"


class PodSpecError(ModelError):
    """A pod spec field that cannot be read; ``path`` says where."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


def _mapping(value: object, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PodSpecError(path, f"expected an object, got {type(value).__name__}")
    return value


def _sequence(value: object, path: str) -> Sequence[Any]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise PodSpecError(path, f"expected a list, got {type(value).__name__}")
    return value


#: Resources a container may ask for in fractions; every other one (extended resources such
#: as ``nvidia.com/gpu``) must be a whole number, as the API server validates it.
_FRACTIONAL = frozenset({"cpu", "memory", "ephemeral-storage"})


def _whole_only(name: str) -> bool:
    return name not in _FRACTIONAL and not name.startswith("hugepages-")


def _resource_list(raw: object, path: str) -> Resources:
    items = _mapping(raw, path)
    try:
        parsed = Resources.parse(items)
    except QuantityError as err:
        raise PodSpecError(path, str(err)) from err
    for name, amount in parsed.items():
        if amount % MILLI and _whole_only(name):
            raise PodSpecError(f"{path}[{name}]", f"must be a whole number, got "
                               f"{items.get(name)!r:.40} (only cpu, memory, ephemeral-storage "
                               "and hugepages may be fractional)")
    return parsed


def container_requests(container: Mapping[str, Any], path: str) -> Resources:
    """A container's effective requests: requests, with limits standing in where unset."""
    resources = _mapping(container.get("resources"), f"{path}.resources")
    try:
        requests = _resource_list(resources.get("requests"), f"{path}.resources.requests")
        limits = _resource_list(resources.get("limits"), f"{path}.resources.limits")
    except PodSpecError as err:
        name = container.get("name")
        if not isinstance(name, str):
            raise
        raise PodSpecError(err.path, f"{err.message} (container {name!r})") from err
    missing = {k: v for k, v in limits.items() if k not in requests}
    return requests + Resources(missing) if missing else requests


def pod_requests(spec: Mapping[str, Any], path: str = "spec") -> Resources:
    """Per-pod demand, computed the way kube-scheduler's NodeResourcesFit computes it."""
    total = EMPTY
    for i, c in enumerate(_sequence(spec.get("containers"), f"{path}.containers")):
        total = total + container_requests(_mapping(c, f"{path}.containers[{i}]"),
                                           f"{path}.containers[{i}]")
    sidecars = EMPTY
    init_peak = EMPTY
    for i, c in enumerate(_sequence(spec.get("initContainers"), f"{path}.initContainers")):
        cpath = f"{path}.initContainers[{i}]"
        container = _mapping(c, cpath)
        req = container_requests(container, cpath)
        if container.get("restartPolicy") == "Always":
            total = total + req
            sidecars = sidecars + req
        else:
            init_peak = init_peak.maximum(req + sidecars)
    total = total.maximum(init_peak)
    pod_level = _mapping(spec.get("resources"), f"{path}.resources")
    if pod_level.get("requests") or pod_level.get("limits"):
        explicit = container_requests({"resources": pod_level}, path)
        total = Resources({**dict(total), **dict(explicit)})
    return total + _resource_list(spec.get("overhead"), f"{path}.overhead")


def _requirements(raw: object, path: str) -> tuple[NodeSelectorRequirement, ...]:
    out = []
    for i, r in enumerate(_sequence(raw, path)):
        req = _mapping(r, f"{path}[{i}]")
        key, operator = req.get("key"), req.get("operator")
        if not isinstance(key, str) or not isinstance(operator, str):
            raise PodSpecError(f"{path}[{i}]", "needs a string key and operator")
        values = tuple(str(v) for v in _sequence(req.get("values"), f"{path}[{i}].values"))
        out.append(NodeSelectorRequirement(key=key, operator=operator, values=values))
    return tuple(out)


def required_affinity(spec: Mapping[str, Any], path: str = "spec") -> tuple[NodeSelectorTerm, ...]:
    affinity = _mapping(spec.get("affinity"), f"{path}.affinity")
    node = _mapping(affinity.get("nodeAffinity"), f"{path}.affinity.nodeAffinity")
    rpath = f"{path}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    required = _mapping(node.get("requiredDuringSchedulingIgnoredDuringExecution"), rpath)
    terms = []
    for i, t in enumerate(_sequence(required.get("nodeSelectorTerms"),
                                    f"{rpath}.nodeSelectorTerms")):
        tpath = f"{rpath}.nodeSelectorTerms[{i}]"
        term = _mapping(t, tpath)
        terms.append(
            NodeSelectorTerm(
                match_expressions=_requirements(term.get("matchExpressions"),
                                                f"{tpath}.matchExpressions"),
                match_fields=_requirements(term.get("matchFields"), f"{tpath}.matchFields"),
            )
        )
    return tuple(terms)


def tolerations(spec: Mapping[str, Any], path: str = "spec") -> tuple[Toleration, ...]:
    out = []
    for i, t in enumerate(_sequence(spec.get("tolerations"), f"{path}.tolerations")):
        tol = _mapping(t, f"{path}.tolerations[{i}]")
        out.append(
            Toleration(
                key=str(tol.get("key") or ""),
                operator=str(tol.get("operator") or "Equal"),
                value=str(tol.get("value") or ""),
                effect=str(tol.get("effect") or ""),
            )
        )
    return tuple(out)


def gpu_share(annotations: Mapping[str, Any] | None) -> int:
    """Milli of one GPU a sharing pod asks for through annotations (0 if none)."""
    if not annotations:
        return 0
    milli = annotations.get(GPU_MILLI_ANNOTATION)
    if milli is not None:
        try:
            return max(0, min(1000, int(str(milli))))
        except ValueError as err:
            raise PodSpecError(f"metadata.annotations[{GPU_MILLI_ANNOTATION}]",
                               f"not an integer: {milli!r}") from err
    for key in GPU_FRACTION_ANNOTATIONS:
        fraction = annotations.get(key)
        if fraction is not None:
            try:
                value = float(str(fraction))
            except ValueError as err:
                raise PodSpecError(f"metadata.annotations[{key}]",
                                   f"not a number: {fraction!r}") from err
            if not 0 < value <= 1:
                raise PodSpecError(f"metadata.annotations[{key}]",
                                   f"must be in (0, 1], got {fraction!r}")
            return round(value * 1000)
    return 0


def shape_of(
    spec: Mapping[str, Any] | None,
    *,
    annotations: Mapping[str, Any] | None = None,
    path: str = "spec",
) -> PodShape:
    """The :class:`PodShape` of a PodSpec (and its pod's annotations)."""
    spec = _mapping(spec, path)
    priority = spec.get("priority")
    try:
        selector = freeze_labels(_mapping(spec.get("nodeSelector"), f"{path}.nodeSelector"))
    except LabelError as err:
        raise PodSpecError(f"{path}.nodeSelector", str(err)) from err
    devices = spec.get(DEVICE_DEMAND)
    extra = Resources({str(k): v for k, v in devices.items() if isinstance(v, int)}) \
        if isinstance(devices, Mapping) else EMPTY
    return PodShape(
        requests=pod_requests(spec, path) + extra,
        gpu_share=gpu_share(annotations),
        node_selector=selector,
        affinity=required_affinity(spec, path),
        tolerations=tolerations(spec, path),
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        preempts=spec.get("preemptionPolicy") != "Never",
        claims=bool(spec.get("resourceClaims")),
    )
