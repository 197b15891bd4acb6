"""Which devices each kind of request may take: the CEL work, done once per device catalog.

A *signature* is a request's ``(device class, request selectors)``. For each, every node's
devices that pass the class's and the request's selectors are found once (CEL is the costly
part) and kept until slices, classes or the set of signatures change; the free counts move with
allocations in :mod:`extender.core.devices.lowering`, without evaluating CEL again.

Two signatures *overlap* when one device passes both, or when a device of one and a device of
the other draw on one shared counter set (partitions of one GPU). A request then also charges
every signature it overlaps, as many as one of its devices can block of the other's: the
allocator picks devices first-fit, so Muster counts the worst case. A request charges another
signature only if that signature has devices on every node where the request's own are (a
charge on a node without them would keep the request off a node it fits): on a node whose
devices of one class differ in what a request's selectors test, a broad request is not charged
to the narrow one, and the allocator's own filter is what stops a second pod there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from extender.core.devices.cel import SelectorError, compile_selector
from extender.core.devices.inventory import Device, Inventory
from extender.core.devices.requests import DeviceClassInfo
from extender.core.model.resources import DEVICE_CLASS_PREFIX as IMPLICIT_PREFIX

Signature = tuple[str, tuple[str, ...]]


def resource_name(signature: Signature) -> str:
    """The resource a signature's devices are counted under: the class's implicit extended
    resource name (``deviceclass.resource.kubernetes.io/<class>``), plus a digest of the
    request's selectors when it has any."""
    device_class, selectors = signature
    if not selectors:
        return IMPLICIT_PREFIX + device_class
    digest = hashlib.sha256("\n".join(selectors).encode()).hexdigest()[:8]
    return f"{IMPLICIT_PREFIX}{device_class}#{digest}"


@dataclass(frozen=True)
class Matches:
    """Per signature: its devices by node, what it charges, or why it cannot be counted."""

    devices: Mapping[Signature, Mapping[str, tuple[Device, ...]]]
    charges: Mapping[Signature, tuple[tuple[str, int], ...]]
    """Signature -> ``(resource, devices charged per device asked)`` a request charges: its own
    resource, those of the signatures it overlaps, and the extended resource its class serves."""
    problems: Mapping[Signature, str] = field(default_factory=dict)


def match_devices(inventory: Inventory, classes: Mapping[str, DeviceClassInfo],
                  signatures: Iterable[Signature]) -> Matches:
    wanted = sorted(set(signatures) | {(name, ()) for name in classes})
    devices: dict[Signature, dict[str, tuple[Device, ...]]] = {}
    problems: dict[Signature, str] = {}
    for signature in wanted:
        found = _matching(inventory, classes, signature)
        if isinstance(found, str):
            problems[signature] = found
        else:
            devices[signature] = found
    charges = {s: _charges(s, devices, classes) for s in devices}
    return Matches(devices=devices, charges=charges, problems=problems)


def _matching(inventory: Inventory, classes: Mapping[str, DeviceClassInfo],
              signature: Signature) -> dict[str, tuple[Device, ...]] | str:
    device_class, selectors = signature
    info = classes.get(device_class)
    if info is None:
        return f"DeviceClass {device_class} does not exist"
    try:
        compiled = [compile_selector(e) for e in (*info.selectors, *selectors)]
    except SelectorError as err:
        return str(err)
    out: dict[str, tuple[Device, ...]] = {}
    for node, node_devices in inventory.devices.items():
        kept = []
        for device in node_devices:
            if device.tainted:
                continue
            try:
                if all(s.matches(device.driver, device.raw) for s in compiled):
                    kept.append(device)
            except SelectorError as err:
                return f"{err} (on device {device.id})"
        if kept:
            out[node] = tuple(kept)
    return out


def _counter_sets(device: Device) -> set[tuple[str, str, str]]:
    return {(device.driver, device.pool, s) for s, _, _ in device.consumes}


def _charges(signature: Signature, devices: Mapping[Signature, Mapping[str, tuple[Device, ...]]],
             classes: Mapping[str, DeviceClassInfo]) -> tuple[tuple[str, int], ...]:
    """What one device asked under ``signature`` charges, worst case, to every signature."""
    mine = devices[signature]
    out: dict[str, int] = {resource_name(signature): 1}
    for other, theirs in devices.items():
        if other == signature or not set(mine) <= set(theirs):
            continue
        blocked = 0
        for node, node_devices in mine.items():
            others = theirs.get(node, ())
            if not others:
                continue
            for device in node_devices:
                sets = _counter_sets(device)
                blocked = max(blocked, sum(1 for o in others
                                           if o.id == device.id or sets & _counter_sets(o)))
        if blocked:
            out[resource_name(other)] = max(out.get(resource_name(other), 0), blocked)
    for charged in [s for s in devices if resource_name(s) in out]:
        extended = classes[charged[0]].extended
        if extended and not charged[1]:
            out[extended] = max(out.get(extended, 0), out[resource_name(charged)])
    return tuple(sorted(out.items()))
