"""ResourceSlices become per-node devices only as the DRA allocator would use them: the newest
generation of a complete, valid pool, published for one node by name."""

from __future__ import annotations

import time

from extender.core.devices.inventory import build_inventory
from tests.unit.core.devices.dra_objects import gpu, gpu_node_slice, resource_slice


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    old = gpu_node_slice("n1", gpus=8, generation=1)
    new = gpu_node_slice("n1", gpus=4, generation=2)
    inventory = build_inventory([old, new])
    assert [d.name for d in inventory.devices["n1"]] == [f"gpu-{i}" for i in range(4)]
    assert inventory.problems == ()


def test_an_incomplete_pool_is_left_out_and_named() -> None:
    part = resource_slice("n1", [gpu(0), gpu(1)], count=2, name="s-a")
    inventory = build_inventory([part])
    assert inventory.devices == {}
    assert inventory.problems == (
        "pool gpu.nvidia.com/n1 (generation 1): 1 of 2 slices published; an incomplete pool "
        "is not counted",)


def test_a_pool_spread_over_two_slices_counts_both() -> None:
    a = resource_slice("n1", [gpu(0), gpu(1)], count=2, name="s-a")
    b = resource_slice("n1", [gpu(2), gpu(3)], count=2, name="s-b")
    assert len(build_inventory([b, a]).devices["n1"]) == 4


def test_a_device_published_twice_invalidates_its_pool() -> None:
    a = resource_slice("n1", [gpu(0)], count=2, name="s-a")
    b = resource_slice("n1", [gpu(0)], count=2, name="s-b")
    inventory = build_inventory([a, b])
    assert inventory.devices == {}
    assert "device gpu-0 is published twice" in inventory.problems[0]


def test_network_attached_slices_are_refused_with_a_reason() -> None:
    shared = resource_slice("n1", [gpu(0)])
    del shared["spec"]["nodeName"]
    shared["spec"]["allNodes"] = True
    inventory = build_inventory([shared])
    assert inventory.devices == {}
    assert "devices selected by allNodes (not a nodeName) are not counted yet" \
        in inventory.problems[0]


def test_a_hostile_slice_is_refused_without_walking_it() -> None:
    huge = resource_slice("n1", [gpu(i) for i in range(100_000)])
    started = time.perf_counter()
    inventory = build_inventory([huge])
    assert time.perf_counter() - started < 0.5
    assert inventory.devices == {}
    assert "spec.devices has 100000 entries (the API allows 128)" in inventory.problems[0]


def test_a_device_naming_an_undeclared_counter_invalidates_its_pool() -> None:
    device = gpu(0, consumes={"memory": 80}, counter_set="gpu-0-counter-set")
    inventory = build_inventory([resource_slice("n1", [device])])
    assert inventory.devices == {}
    assert "consumes gpu-0-counter-set/memory, which the pool does not declare" \
        in inventory.problems[0]


def test_tainted_devices_are_marked() -> None:
    device = gpu(0)
    device["taints"] = [{"key": "unhealthy", "effect": "NoSchedule"}]
    assert build_inventory([resource_slice("n1", [device, gpu(1)])]).devices["n1"][0].tainted
