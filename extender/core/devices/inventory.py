"""What ResourceSlices publish, per node, as the DRA allocator reads them.

Slices are grouped into pools by ``(driver, pool name)``. As the allocator does
(``k8s.io/dynamic-resource-allocation`` ``structured``), only a pool's highest
``pool.generation`` counts, and only when all ``resourceSliceCount`` slices of that generation are
present; a pool with a device name twice, or a device consuming a counter set or counter the
pool does not declare, is invalid. Such pools are left out with a problem that names them.

Counted slice forms: ``spec.nodeName`` (node-local devices, the form GPU drivers use). Slices
selecting nodes by ``nodeSelector``, ``allNodes`` or ``perDeviceNodeSelection`` (network-attached
devices) are left out with a problem: Muster does not yet know which nodes share them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from extender.core.model.objects import as_mapping
from extender.core.model.quantity import QuantityError, parse_quantity

MAX_DEVICES_PER_SLICE = 128
"""The API server's own limit (``resource.k8s.io/v1`` validation): a slice with more is refused
as hostile rather than walked."""
MAX_COUNTER_SETS = 8
MAX_PROBLEMS = 100
"""Problems kept per inventory (bounded memory under a flood of broken slices)."""


@dataclass(frozen=True, slots=True)
class Device:
    """One device a node offers: its identity, raw entry (for CEL) and counter consumption."""

    driver: str
    pool: str
    name: str
    node: str
    raw: Mapping[str, Any] = field(compare=False, hash=False)
    consumes: tuple[tuple[str, str, int], ...] = ()
    """``(counter set, counter, amount in milli-units)`` this device uses when allocated."""
    shareable: bool = False
    """``allowMultipleAllocations``: several claims may share it (consumable capacity)."""
    tainted: bool = False
    """Carries a ``NoSchedule`` or ``NoExecute`` taint: the allocator skips it unless tolerated;
    Muster does not count it."""

    @property
    def id(self) -> str:
        return f"{self.driver}/{self.pool}/{self.name}"


@dataclass(frozen=True)
class Inventory:
    """Every counted device by node, the pools' counter sets, and what was left out."""

    devices: Mapping[str, tuple[Device, ...]]
    """Node name -> its devices, in the allocator's order (driver, pool, slice, device)."""
    counters: Mapping[tuple[str, str, str], Mapping[str, int]]
    """``(driver, pool, counter set)`` -> counter -> amount (milli-units)."""
    problems: tuple[str, ...] = ()

    def by_id(self) -> dict[str, Device]:
        return {d.id: d for devices in self.devices.values() for d in devices}


EMPTY_INVENTORY = Inventory(devices={}, counters={})


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass
class _Pool:
    generation: int
    expected: int
    slices: list[Mapping[str, Any]]


def _slice_name(obj: Mapping[str, Any]) -> str:
    return str(as_mapping(obj.get("metadata")).get("name") or "?")


def build_inventory(slices: Iterable[Mapping[str, Any]]) -> Inventory:
    """The devices of every complete, valid pool of ``slices``, by node."""
    problems: list[str] = []
    pools: dict[tuple[str, str], _Pool] = {}
    for obj in slices:
        spec = as_mapping(obj.get("spec"))
        pool_ref = as_mapping(spec.get("pool"))
        driver, name = spec.get("driver"), pool_ref.get("name")
        generation = _int(pool_ref.get("generation"))
        expected = _int(pool_ref.get("resourceSliceCount"))
        if not isinstance(driver, str) or not isinstance(name, str) or generation is None \
                or expected is None or expected < 1:
            problems.append(f"ResourceSlice {_slice_name(obj)}: spec.driver, spec.pool.name, "
                            "generation and resourceSliceCount are required; not counted")
            continue
        key = (driver, name)
        known = pools.get(key)
        if known is None or generation > known.generation:
            pools[key] = _Pool(generation=generation, expected=expected, slices=[obj])
        elif generation == known.generation:
            known.slices.append(obj)
    devices: dict[str, list[Device]] = {}
    counters: dict[tuple[str, str, str], Mapping[str, int]] = {}
    for (driver, name), pool in sorted(pools.items(), key=lambda kv: kv[0]):
        where = f"pool {driver}/{name} (generation {pool.generation})"
        if len(pool.slices) < pool.expected:
            problems.append(f"{where}: {len(pool.slices)} of {pool.expected} slices published; "
                            "an incomplete pool is not counted")
            continue
        found = _read_pool(driver, name, sorted(pool.slices, key=_slice_name), where)
        if isinstance(found, str):
            problems.append(found)
            continue
        pool_devices, pool_counters = found
        counters.update(pool_counters)
        for device in pool_devices:
            devices.setdefault(device.node, []).append(device)
    return Inventory(
        devices={node: tuple(found) for node, found in sorted(devices.items())},
        counters=counters,
        problems=tuple(problems[:MAX_PROBLEMS]),
    )


def _read_pool(driver: str, pool: str, slices: list[Mapping[str, Any]], where: str,
               ) -> tuple[list[Device], dict[tuple[str, str, str], Mapping[str, int]]] | str:
    counters: dict[tuple[str, str, str], Mapping[str, int]] = {}
    out: list[Device] = []
    seen: set[str] = set()
    for obj in slices:
        spec = as_mapping(obj.get("spec"))
        what = f"{where}, ResourceSlice {_slice_name(obj)}"
        shared = spec.get("sharedCounters")
        if isinstance(shared, list):
            if len(shared) > MAX_COUNTER_SETS:
                return f"{what}: spec.sharedCounters has {len(shared)} sets (at most " \
                       f"{MAX_COUNTER_SETS}); pool not counted"
            for counter_set in shared:
                read = _counter_set(counter_set, what)
                if isinstance(read, str):
                    return read
                counters[(driver, pool, read[0])] = read[1]
        raw_devices = spec.get("devices")
        if raw_devices is None:
            continue
        if not isinstance(raw_devices, list):
            return f"{what}: spec.devices is not a list; pool not counted"
        if len(raw_devices) > MAX_DEVICES_PER_SLICE:
            return f"{what}: spec.devices has {len(raw_devices)} entries (the API allows " \
                   f"{MAX_DEVICES_PER_SLICE}); pool not counted"
        node = spec.get("nodeName")
        if not isinstance(node, str) or not node:
            form = next((f for f in ("nodeSelector", "allNodes", "perDeviceNodeSelection")
                         if spec.get(f)), "no node")
            return f"{what}: devices selected by {form} (not a nodeName) are not counted yet"
        for index, raw in enumerate(raw_devices):
            device = _device(driver, pool, node, raw, f"{what}: spec.devices[{index}]")
            if isinstance(device, str):
                return device
            if device.name in seen:
                return f"{what}: device {device.name} is published twice; an invalid pool " \
                       "is not counted"
            seen.add(device.name)
            out.append(device)
    for device in out:
        for counter_set, counter, _ in device.consumes:
            if counter not in counters.get((driver, pool, counter_set), {}):
                return f"{where}: device {device.name} consumes {counter_set}/{counter}, " \
                       "which the pool does not declare; an invalid pool is not counted"
    return out, counters


def _counter_set(raw: object, what: str) -> tuple[str, Mapping[str, int]] | str:
    entry = as_mapping(raw)
    name = entry.get("name")
    if not isinstance(name, str):
        return f"{what}: a shared counter set without a name; pool not counted"
    amounts: dict[str, int] = {}
    for counter, value in as_mapping(entry.get("counters")).items():
        try:
            amounts[str(counter)] = parse_quantity(as_mapping(value).get("value"))
        except QuantityError as err:
            return f"{what}: counter {name}/{counter}: {err}; pool not counted"
    return name, amounts


def _device(driver: str, pool: str, node: str, raw: object, where: str) -> Device | str:
    entry = as_mapping(raw)
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        return f"{where}: a device needs a name; pool not counted"
    consumes: list[tuple[str, str, int]] = []
    uses = entry.get("consumesCounters")
    for use in uses if isinstance(uses, list) else []:
        counter_set = as_mapping(use).get("counterSet")
        for counter, value in as_mapping(as_mapping(use).get("counters")).items():
            try:
                amount = parse_quantity(as_mapping(value).get("value"))
            except QuantityError as err:
                return f"{where}: consumesCounters {counter_set}/{counter}: {err}; " \
                       "pool not counted"
            consumes.append((str(counter_set), str(counter), amount))
    taints = entry.get("taints")
    tainted = any(as_mapping(t).get("effect") in ("NoSchedule", "NoExecute")
                  for t in (taints if isinstance(taints, list) else ()))
    return Device(driver=driver, pool=pool, name=name, node=node, raw=entry,
                  consumes=tuple(consumes),
                  shareable=entry.get("allowMultipleAllocations") is True, tainted=tainted)
