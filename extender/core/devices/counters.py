"""Shared counters (partitions of one GPU): what allocated devices draw, and how many more
devices fit what is left, taken in the allocator's order."""

from __future__ import annotations

from collections.abc import Mapping

from extender.core.devices.inventory import Device, Inventory

CounterKey = tuple[str, str, str, str]
"""``(driver, pool, counter set, counter)``."""


def consumed_by(devices: Mapping[str, Device], used: set[str]) -> dict[CounterKey, int]:
    """What the allocated devices (``used``, looked up in ``devices`` by id) draw on each
    shared counter."""
    out: dict[CounterKey, int] = {}
    for device_id in used:
        device = devices.get(device_id)
        if device is None:
            continue  # its pool was replaced since it was allocated
        for counter_set, counter, amount in device.consumes:
            key = (device.driver, device.pool, counter_set, counter)
            out[key] = out.get(key, 0) + amount
    return out


def free_count(devices: tuple[Device, ...], used: set[str], consumed: Mapping[CounterKey, int],
                inventory: Inventory) -> int:
    """How many of ``devices`` can still be allocated at once: not in use, and their counters
    fitting what allocated devices have left (taken in the allocator's order)."""
    left: dict[CounterKey, int] = {}

    def remaining(key: CounterKey) -> int:
        if key not in left:
            total = inventory.counters.get(key[:3], {}).get(key[3], 0)
            left[key] = total - consumed.get(key, 0)
        return left[key]

    count = 0
    for device in devices:
        if device.id in used:
            continue
        keys = [((device.driver, device.pool, s, c), amount) for s, c, amount in device.consumes]
        if any(remaining(key) < amount for key, amount in keys):
            continue
        for key, amount in keys:
            left[key] = remaining(key) - amount
        count += 1
    return count
