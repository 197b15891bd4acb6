"""What pods ask of DRA: DeviceClasses, and the device requests of claims and templates.

A request names a DeviceClass, optional CEL selectors, an allocation mode and a count
(``resource.k8s.io/v1`` ``ExactDeviceRequest``). ``firstAvailable`` lists alternatives in the
order the allocator tries them; all are read, and :mod:`~extender.core.devices.lowering` charges
the first one the cluster publishes devices for.
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
MAX_SUBREQUESTS = 8
"""``firstAvailable`` holds at most 8 alternatives (``resource.k8s.io/v1`` validation)."""


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
    alternatives: tuple[DeviceRequest, ...] = ()
    """``firstAvailable``'s later subrequests, in order (this request is the first)."""

    @property
    def signature(self) -> tuple[str, tuple[str, ...], str]:
        return self.device_class, self.selectors, self.match_attribute

    @property
    def signatures(self) -> tuple[tuple[str, tuple[str, ...], str], ...]:
        """This request's signature and its alternatives', in the allocator's order."""
        return (self.signature, *(a.signature for a in self.alternatives))


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
    subnames: list[tuple[str, ...]] = []
    for index, entry in enumerate(raw):
        path = f"{where}: spec.devices.requests[{index}]"
        read = _request(as_mapping(entry), path)
        if isinstance(read, str):
            return ClaimSpec(problem=read)
        out.append(read[0])
        subnames.append(read[1])
    if sum(r.count for r in out if not r.all_devices) > MAX_COUNT:
        return ClaimSpec(problem=f"{where}: asks more than {MAX_COUNT} devices in all "
                                 "(the API's limit for one claim)")
    names = [str(as_mapping(entry).get("name") or "") for entry in raw]
    for constraint in _constraints(devices.get("constraints")):
        attribute = constraint.get("matchAttribute")
        if not isinstance(attribute, str) or not attribute:
            continue  # distinctAttribute: not counted (docs/dra.md)
        named = constraint.get("requests")
        wanted = ({str(n) for n in named} if isinstance(named, list) and named
                  else set(names))
        out = [_constrained(r, name, subs, wanted, attribute)
               for name, subs, r in zip(names, subnames, out, strict=True)]
    return ClaimSpec(requests=tuple(out))


def _request(request: Mapping[str, Any],
             path: str) -> tuple[DeviceRequest, tuple[str, ...]] | str:
    """One entry of ``spec.devices.requests``, with its subrequests' names (``()`` for an
    ``exactly`` request)."""
    exact = request.get("exactly")
    if isinstance(exact, Mapping):
        single = _exact(exact, path)
        return single if isinstance(single, str) else (single, ())
    alternatives = request.get("firstAvailable")
    if not isinstance(alternatives, list) or not alternatives:
        return f"{path}: neither exactly nor firstAvailable is set"
    if len(alternatives) > MAX_SUBREQUESTS:
        return (f"{path}.firstAvailable has {len(alternatives)} entries "
                f"(at most {MAX_SUBREQUESTS})")
    read: list[DeviceRequest] = []
    for index, raw in enumerate(alternatives):
        one = _exact(as_mapping(raw), f"{path}.firstAvailable[{index}]")
        if isinstance(one, str):
            return one
        read.append(one)
    names = tuple(str(as_mapping(a).get("name") or "") for a in alternatives)
    return replace(read[0], alternatives=tuple(read[1:])), names


def _constrained(request: DeviceRequest, name: str, subnames: tuple[str, ...],
                 wanted: set[str], attribute: str) -> DeviceRequest:
    """``request`` with a constraint's ``matchAttribute`` where the constraint names it: the
    request by its name (every alternative), or one alternative as ``request/subrequest``."""
    def one(r: DeviceRequest, sub: str) -> DeviceRequest:
        applies = name in wanted or (sub and f"{name}/{sub}" in wanted)
        return replace(r, match_attribute=r.match_attribute or attribute) if applies else r
    if not subnames:
        return one(request, "")
    first = one(replace(request, alternatives=()), subnames[0])
    rest = tuple(one(a, sub) for a, sub in zip(request.alternatives, subnames[1:], strict=True))
    return replace(first, alternatives=rest)


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
