"""Whatever pods Muster's device counts admit onto a node, DRA's allocator can then give every
one of them its devices, in any order, first fit: no device and no shared counter is promised
twice. Nodes mix GPU models and partitionable GPUs (a counter set per GPU, which the full GPU
and its MIG partitions consume); requests ask for a class, a class narrowed by a selector, or
partitions; some claims are already allocated."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.core.devices.lowering import DeviceCatalog, DeviceView, signatures_of
from extender.core.model.resources import Resources
from tests.unit.core.devices.dra_objects import (
    GPU_SELECTOR,
    MIG_SELECTOR,
    claim,
    claim_pod,
    device_class,
    gpu,
    resource_slice,
    template,
)

H100 = "device.attributes['gpu.nvidia.com'].productName == 'H100'"
SIGNATURES = {"gpu": ("gpu.nvidia.com", ()), "h100": ("gpu.nvidia.com", (H100,)),
              "mig": ("mig.nvidia.com", ())}


@st.composite
def nodes(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A node's devices (in slice order) and their counter sets."""
    devices: list[dict[str, Any]] = []
    counters: list[dict[str, Any]] = []
    for g in range(draw(st.integers(1, 4))):
        product = draw(st.sampled_from(["H100", "A100"]))
        if draw(st.booleans()):
            name = f"gpu-{g}-cs"
            counters.append({"name": name, "counters": {"slices": {"value": "4"}}})
            full = gpu(g, product=product, consumes={"slices": 4}, counter_set=name)
            migs = []
            for m in range(draw(st.integers(1, 4))):
                part = gpu(10 * g + m, kind="mig", product=product,
                           consumes={"slices": draw(st.sampled_from([1, 2]))}, counter_set=name)
                migs.append(part)
            devices.extend(draw(st.permutations([full, *migs])))
        else:
            devices.append(gpu(g, product=product))
    return devices, {"counters": counters}


def first_fit(devices: list[dict[str, Any]], counters: dict[str, int], used: set[str],
              want: str, count: int) -> bool:
    """The allocator on one node: the first devices in slice order that match, are free and
    whose counters fit."""
    for device in devices:
        if count == 0:
            break
        attributes = device["attributes"]
        kind, product = attributes["type"]["string"], attributes["productName"]["string"]
        matches = ((kind == "gpu" and want in ("gpu", "h100") and (want == "gpu" or
                                                                 product == "H100"))
                   or (kind == "mig" and want == "mig"))
        if not matches or device["name"] in used:
            continue
        uses = {c: int(v["value"]) for use in device.get("consumesCounters", ())
                for c, v in use["counters"].items()}
        sets = [use["counterSet"] for use in device.get("consumesCounters", ())]
        if any(counters[f"{s}/{c}"] < a for s in sets for c, a in uses.items()):
            continue
        for s in sets:
            for c, a in uses.items():
                counters[f"{s}/{c}"] -= a
        used.add(device["name"])
        count -= 1
    return count == 0


@settings(max_examples=300, deadline=None)
@given(node=nodes(), data=st.data())
def test_what_the_counts_admit_the_allocator_can_always_give(
        node: tuple[list[dict[str, Any]], dict[str, Any]], data: st.DataObject) -> None:
    devices, extra = node
    classes = [device_class(selector=GPU_SELECTOR),
               device_class("mig.nvidia.com", selector=MIG_SELECTOR)]
    templates = [template(key, count=count, device_class=SIGNATURES[key][0],
                          selectors=SIGNATURES[key][1])
                 for key in SIGNATURES for count in (1, 2)]
    for t, (key, count) in zip(templates, [(k, c) for k in SIGNATURES for c in (1, 2)],
                               strict=True):
        t["metadata"]["name"] = f"{key}-{count}"
    slices = [resource_slice("n1", devices, counters=extra["counters"] or None)]
    # Some devices already allocated to claims Muster does not plan.
    taken = data.draw(st.lists(st.sampled_from([d["name"] for d in devices]), unique=True,
                               max_size=2))
    counters = {f"{c['name']}/{k}": int(v["value"])
                for c in extra["counters"] for k, v in c["counters"].items()}
    used: set[str] = set()
    for name in taken:  # the allocator made these allocations, in its own order
        device = next(d for d in devices if d["name"] == name)
        for use in device.get("consumesCounters", ()):
            for c, v in use["counters"].items():
                counters[f"{use['counterSet']}/{c}"] -= int(v["value"])
        used.add(name)
    if any(v < 0 for v in counters.values()):
        return  # not an allocation the allocator could have made
    held = [claim(f"held-{n}", allocated=[("n1", n)]) for n in taken]
    catalog = DeviceCatalog.build(slices, classes, signatures_of(held, templates))
    view = DeviceView.build(catalog, claims=held, templates=templates, live_pods=frozenset())
    free = Resources(view.node_supply("n1", {}))
    wanted = data.draw(st.lists(st.tuples(st.sampled_from(sorted(SIGNATURES)),
                                          st.sampled_from([1, 2])), max_size=8))
    admitted: list[tuple[str, int]] = []
    for key, count in wanted:
        demand = Resources(view.pod_demand(claim_pod("p", template_name=f"{key}-{count}")))
        if demand.fits_in(free):
            free = free - demand
            admitted.append((key, count))
    order = data.draw(st.permutations(admitted))
    for key, count in order:
        assert first_fit(devices, counters, used, key, count), (
            f"admitted {admitted}, allocated in order {order}: {key} x{count} found no devices")
