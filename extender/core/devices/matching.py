"""Which devices each kind of request may take: the CEL work, done once per device catalog.

A *signature* is a request's ``(device class, request selectors, matchAttribute)``. For each,
every node's
devices that pass the class's and the request's selectors are found once (CEL is the costly
part) and kept until slices, classes or the set of signatures change; the free counts move with
allocations in :mod:`extender.core.devices.lowering`, without evaluating CEL again.

Two signatures *overlap* when one device passes both, or when a device of one and a device of
the other draw on one shared counter set (partitions of one GPU). A request then also charges
every signature it overlaps, as many as one of its devices can block of the other's (a full
GPU blocks as many partitions as its counters hold at once; a partition blocks the full GPU):
the allocator picks devices first-fit, so Muster counts the worst case. A request charges another
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
from extender.core.devices.counters import free_count
from extender.core.devices.inventory import Device, Inventory
from extender.core.devices.requests import DeviceClassInfo
from extender.core.model.resources import DEVICE_CLASS_PREFIX as IMPLICIT_PREFIX

Signature = tuple[str, tuple[str, ...], str]
"""``(device class, request selectors, matchAttribute or "")``."""


def resource_name(signature: Signature) -> str:
    """The resource a signature's devices are counted under: the class's implicit extended
    resource name (``deviceclass.resource.kubernetes.io/<class>``), plus a digest of the
    request's selectors when it has any."""
    device_class, selectors, match = signature
    if not selectors and not match:
        return IMPLICIT_PREFIX + device_class
    digest = hashlib.sha256("\n".join((*selectors, match)).encode()).hexdigest()[:8]
    return f"{IMPLICIT_PREFIX}{device_class}#{digest}"


def attribute_value(device: Device, qualified: str) -> str | None:
    """A device's value of a fully qualified attribute (``gpu.nvidia.com/cliqueID``; a name
    in the driver's own domain is published bare), typed, or None when it has none."""
    domain, _, name = qualified.rpartition("/")
    attributes = device.raw.get("attributes")
    if not isinstance(attributes, Mapping):
        return None
    found = attributes.get(qualified)
    if found is None and domain == device.driver:
        found = attributes.get(name)
    if not isinstance(found, Mapping) or len(found) != 1:
        return None
    ((kind, value),) = found.items()
    return f"{kind}:{value}"


@dataclass(frozen=True)
class Matches:
    """Per signature: its devices by node, what it charges, or why it cannot be counted."""

    devices: Mapping[Signature, Mapping[str, tuple[Device, ...]]]
    charges: Mapping[Signature, tuple[tuple[str, int], ...]]
    """Signature -> ``(resource, devices charged per device asked)`` a request charges: its own
    resource, those of the signatures it overlaps, and the extended resource its class serves."""
    problems: Mapping[Signature, str] = field(default_factory=dict)


def wanted_signatures(classes: Mapping[str, DeviceClassInfo],
                      signatures: Iterable[Signature]) -> frozenset[Signature]:
    """The signatures a catalog matches: those asked, plus every class's own (class alone),
    which its implicit and explicit extended resources are counted under."""
    return frozenset(signatures) | {(name, (), "") for name in classes}


def match_devices(inventory: Inventory, classes: Mapping[str, DeviceClassInfo],
                  signatures: Iterable[Signature], *,
                  previous: Matches | None = None) -> Matches:
    """``previous``: matches over the same inventory and classes, whose per-signature results
    are taken as they are (the CEL evaluation is the costly part; only new signatures pay
    it, and the charges between signatures are worked out again)."""
    devices: dict[Signature, Mapping[str, tuple[Device, ...]]] = {}
    problems: dict[Signature, str] = {}
    for signature in sorted(wanted_signatures(classes, signatures)):
        found: Mapping[str, tuple[Device, ...]] | str
        if previous is not None and signature in previous.devices:
            found = previous.devices[signature]
        elif previous is not None and signature in previous.problems:
            found = previous.problems[signature]
        else:
            found = _matching(inventory, classes, signature)
        if isinstance(found, str):
            problems[signature] = found
        else:
            devices[signature] = found
    charges = {s: _charges(s, devices, classes, inventory) for s in devices}
    return Matches(devices=devices, charges=charges, problems=problems)


def _matching(inventory: Inventory, classes: Mapping[str, DeviceClassInfo],
              signature: Signature) -> dict[str, tuple[Device, ...]] | str:
    device_class, selectors, match = signature
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
            if match and attribute_value(device, match) is None:
                continue  # the allocator refuses a device without the attribute
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


Layout = tuple[tuple[str, tuple[tuple[str, str, int], ...]], ...]
"""A node's devices of one signature by name and counter use: nodes of one model share it."""


def _layout(devices: tuple[Device, ...]) -> Layout:
    return tuple((d.name, d.consumes) for d in devices)


def _blocked(mine: tuple[Device, ...], theirs: tuple[Device, ...],
             inventory: Inventory) -> int:
    """At most how many of ``theirs`` one device of ``mine`` takes away: itself, or as many
    of those drawing on its counter sets as those counters could ever hold at once."""
    worst = 0
    for device in mine:
        sets = _counter_sets(device)
        near = tuple(o for o in theirs if o.id == device.id or sets & _counter_sets(o))
        if near:
            worst = max(worst, free_count(near, set(), {}, inventory))
    return worst


def _charges(signature: Signature, devices: Mapping[Signature, Mapping[str, tuple[Device, ...]]],
             classes: Mapping[str, DeviceClassInfo], inventory: Inventory,
             ) -> tuple[tuple[str, int], ...]:
    """What one device asked under ``signature`` charges, worst case, to every signature."""
    mine = devices[signature]
    out: dict[str, int] = {resource_name(signature): 1}
    for other, theirs in devices.items():
        if other == signature or not set(mine) <= set(theirs):
            continue
        blocked = 0
        seen: set[tuple[Layout, Layout]] = set()
        for node, node_devices in mine.items():
            others = theirs.get(node, ())
            layout = (_layout(node_devices), _layout(others))
            if not others or layout in seen:
                continue
            seen.add(layout)
            blocked = max(blocked, _blocked(node_devices, others, inventory))
        if blocked:
            out[resource_name(other)] = max(out.get(resource_name(other), 0), blocked)
    for charged in [s for s in devices if resource_name(s) in out]:
        extended = classes[charged[0]].extended
        if extended and not charged[1] and not charged[2]:
            out[extended] = max(out.get(extended, 0), out[resource_name(charged)])
    return tuple(sorted(out.items()))
