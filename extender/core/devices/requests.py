"""What pods ask of DRA: DeviceClasses, and the device requests of claims and templates.

A request names a DeviceClass, optional CEL selectors, an allocation mode and a count
(``resource.k8s.io/v1`` ``ExactDeviceRequest``). ``firstAvailable`` lists alternatives; Muster
counts the first one (the one kube-scheduler prefers), so a gang waits rather than being planned
on an alternative the allocator might not take.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from extender.core.model.objects import as_mapping
from extender.core.model.resources import DEVICE_CLASS_PREFIX as IMPLICIT_PREFIX

MAX_COUNT = 32
"""A claim allocates at most 32 devices in all (``resource.k8s.io/v1`` validation)."""
MAX_REQUESTS = 32


@dataclass(frozen=True, slots=True)
class DeviceClassInfo:
    name: str
    selectors: tuple[str, ...]
    extended: str | None
    """``spec.extendedResourceName``: a pod's request for it is served by this class's
    devices on nodes whose allocatable lacks it."""
    created: str = ""


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """One request of one claim: ``count`` devices of ``device_class`` passing ``selectors``."""

    device_class: str
    selectors: tuple[str, ...] = ()
    count: int = 1
    all_devices: bool = False
    """``allocationMode: All``: every matching device of the node."""
    admin: bool = False
    """``adminAccess``: does not use the device up."""
    match_attribute: str = ""
    """A claim constraint's ``matchAttribute`` naming this request: all its devices share the
    attribute's value (one NVLink clique, one PCIe root)."""

    @property
    def signature(self) -> tuple[str, tuple[str, ...], str]:
        return self.device_class, self.selectors, self.match_attribute


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    """A claim's requests, or why they cannot be counted."""

    requests: tuple[DeviceRequest, ...] = ()
    problem: str = ""


def _name(obj: Mapping[str, Any]) -> str:
    return str(as_mapping(obj.get("metadata")).get("name") or "")


def read_classes(objects: Iterable[Mapping[str, Any]]) -> dict[str, DeviceClassInfo]:
    """DeviceClasses by name (objects without a name are skipped)."""
    out: dict[str, DeviceClassInfo] = {}
    for obj in objects:
        name = _name(obj)
        if not name:
            continue
        spec = as_mapping(obj.get("spec"))
        raw = spec.get("selectors")
        selectors = tuple(
            str(as_mapping(as_mapping(s).get("cel")).get("expression") or "")
            for s in (raw if isinstance(raw, list) else ()))
        extended = spec.get("extendedResourceName")
        created = as_mapping(obj.get("metadata")).get("creationTimestamp")
        out[name] = DeviceClassInfo(name=name, selectors=selectors,
                                    extended=extended if isinstance(extended, str) else None,
                                    created=created if isinstance(created, str) else "")
    return out


def extended_classes(classes: Mapping[str, DeviceClassInfo]) -> dict[str, DeviceClassInfo]:
    """Extended resource name -> the class serving it: the newest class naming it, on a tie the
    lower class name (as kube-scheduler's extended resource cache), plus every class's
    implicit name."""
    out: dict[str, DeviceClassInfo] = {}
    for info in sorted(classes.values(), key=lambda c: (c.created, _desc(c.name))):
        if info.extended:
            out[info.extended] = info
    for info in classes.values():
        out.setdefault(IMPLICIT_PREFIX + info.name, info)
    return out


def _desc(name: str) -> tuple[int, ...]:
    # Sorting ascending puts the winner last: among equal timestamps the lower name must win.
    return tuple(-ord(c) for c in name)


def read_claim_spec(spec: Mapping[str, Any], where: str) -> ClaimSpec:
    """The requests of a ResourceClaim ``spec`` (a claim's, or a template's ``spec.spec``)."""
    devices = as_mapping(as_mapping(spec).get("devices"))
    raw = devices.get("requests")
    if raw is None:
        return ClaimSpec()
    if not isinstance(raw, list):
        return ClaimSpec(problem=f"{where}: spec.devices.requests is not a list")
    if len(raw) > MAX_REQUESTS:
        return ClaimSpec(problem=f"{where}: spec.devices.requests has {len(raw)} entries "
                                 f"(at most {MAX_REQUESTS})")
    out: list[DeviceRequest] = []
    for index, entry in enumerate(raw):
        path = f"{where}: spec.devices.requests[{index}]"
        request = as_mapping(entry)
        exact = request.get("exactly")
        if not isinstance(exact, Mapping):
            alternatives = request.get("firstAvailable")
            if isinstance(alternatives, list) and alternatives:
                exact, path = as_mapping(alternatives[0]), f"{path}.firstAvailable[0]"
            else:
                return ClaimSpec(problem=f"{path}: neither exactly nor firstAvailable is set")
        read = _exact(exact, path)
        if isinstance(read, str):
            return ClaimSpec(problem=read)
        out.append(read)
    if sum(r.count for r in out if not r.all_devices) > MAX_COUNT:
        return ClaimSpec(problem=f"{where}: asks more than {MAX_COUNT} devices in all "
                                 "(the API's limit for one claim)")
    names = [str(as_mapping(entry).get("name") or "") for entry in raw]
    for constraint in _constraints(devices.get("constraints")):
        attribute = constraint.get("matchAttribute")
        if not isinstance(attribute, str) or not attribute:
            continue  # distinctAttribute: not counted (docs/dra.md)
        named = constraint.get("requests")
        wanted = set(named) if isinstance(named, list) and named else set(names)
        out = [replace(r, match_attribute=r.match_attribute or attribute)
               if name in wanted else r for name, r in zip(names, out, strict=True)]
    return ClaimSpec(requests=tuple(out))


def _constraints(raw: object) -> list[Mapping[str, Any]]:
    return [as_mapping(c) for c in raw[:MAX_REQUESTS]] if isinstance(raw, list) else []


def _exact(exact: Mapping[str, Any], path: str) -> DeviceRequest | str:
    device_class = exact.get("deviceClassName")
    if not isinstance(device_class, str) or not device_class:
        return f"{path}.deviceClassName is required"
    raw_selectors = exact.get("selectors")
    selectors = []
    for s in raw_selectors if isinstance(raw_selectors, list) else ():
        expression = as_mapping(as_mapping(s).get("cel")).get("expression")
        if not isinstance(expression, str):
            return f"{path}.selectors: a selector without cel.expression"
        selectors.append(expression)
    mode = exact.get("allocationMode") or "ExactCount"
    if mode not in ("ExactCount", "All"):
        return f"{path}.allocationMode: {str(mode)[:40]!r} is neither ExactCount nor All"
    count = exact.get("count", 1)
    if mode == "ExactCount" and (not isinstance(count, int) or isinstance(count, bool)
                                 or not 1 <= count <= MAX_COUNT):
        return f"{path}.count: {str(count)[:40]!r} is not a whole number from 1 to {MAX_COUNT}"
    return DeviceRequest(device_class=device_class, selectors=tuple(selectors),
                         count=count if mode == "ExactCount" else 0,
                         all_devices=mode == "All", admin=exact.get("adminAccess") is True)
