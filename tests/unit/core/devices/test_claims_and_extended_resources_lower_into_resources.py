"""DRA lowered into Resources: each node's free devices and each pod's unallocated device demand,
so that every capacity check Muster makes counts claim GPUs and DRA-backed ``nvidia.com/gpu``."""

from __future__ import annotations

from typing import Any

from extender.core.devices.lowering import DeviceCatalog, DeviceView, signatures_of
from extender.core.devices.matching import resource_name
from extender.core.model.objects import DEVICE_SUPPLY, node_from_api, pod_from_api
from extender.core.model.podspec import DEVICE_DEMAND
from extender.core.model.resources import UNCOUNTABLE_PREFIX, Resources
from tests.unit.core.devices.dra_objects import (
    MIG_SELECTOR,
    claim,
    claim_pod,
    device_class,
    gpu,
    gpu_node_slice,
    resource_slice,
    template,
)

CLASS = "deviceclass.resource.kubernetes.io/gpu.nvidia.com"
GPU = "nvidia.com/gpu"


def view(*, slices: list[dict[str, Any]], classes: list[dict[str, Any]] | None = None,
         claims: list[dict[str, Any]] = (), templates: list[dict[str, Any]] = (),  # type: ignore[assignment]
         live: tuple[str, ...] = ()) -> DeviceView:
    classes = classes if classes is not None else [device_class()]
    catalog = DeviceCatalog.build(slices, classes, signatures_of(claims, templates))
    return DeviceView.build(catalog, claims=claims, templates=templates,
                            live_pods=frozenset(live))


def test_a_template_claim_asks_its_devices_and_each_dra_node_offers_its_gpus() -> None:
    v = view(slices=[gpu_node_slice("n1"), gpu_node_slice("n2", gpus=4)],
             templates=[template(count=8)])
    assert v.node_supply("n1", {}) == {CLASS: 8000}
    assert v.node_supply("n2", {}) == {CLASS: 4000}
    assert v.pod_demand(claim_pod("w-0", template_name="gpus")) == {CLASS: 8000}


def test_an_allocated_claim_leaves_the_supply_and_the_pods_demand() -> None:
    allocated = claim("w-0-gpus-x", allocated=[("n1", f"gpu-{i}") for i in range(6)])
    v = view(slices=[gpu_node_slice("n1")], templates=[template(count=6)], claims=[allocated])
    assert v.node_supply("n1", {}) == {CLASS: 2000}
    pod = claim_pod("w-0", template_name="gpus", generated="w-0-gpus-x")
    assert v.pod_demand(pod) == {}
    # Its generated claim not created yet: the template says what it will ask.
    assert v.pod_demand(claim_pod("w-1", template_name="gpus")) == {CLASS: 6000}


def test_a_claim_reserved_for_its_living_pod_alone_is_counted_through_that_pod() -> None:
    allocated = claim("w-0-gpus-x", count=6, allocated=[("n1", f"gpu-{i}") for i in range(6)])
    allocated["status"]["reservedFor"] = [{"resource": "pods", "name": "w-0", "uid": "uid-w-0"}]
    pod = claim_pod("w-0", template_name="gpus", generated="w-0-gpus-x")
    args: dict[str, Any] = {"slices": [gpu_node_slice("n1")], "templates": [template(count=6)],
                            "claims": [allocated]}
    # The pod holds them as a device plugin's pod holds its GPUs: the node offers all eight,
    # and the pod's demand has its six, so they go back with it (a preemption frees them).
    living = view(**args, live=("uid-w-0",))
    assert living.node_supply("n1", {}) == {CLASS: 8000}
    assert living.pod_demand(pod) == {CLASS: 6000}
    # Its pod gone (or ended) and the claim not released yet: the devices are held by no pod.
    gone = view(**args)
    assert gone.node_supply("n1", {}) == {CLASS: 2000}
    # Reserved for two pods: counted once, in the supply, and by neither pod.
    allocated["status"]["reservedFor"].append({"resource": "pods", "name": "w-1", "uid": "u1"})
    shared = view(**args, live=("uid-w-0", "u1"))
    assert shared.node_supply("n1", {}) == {CLASS: 2000}
    assert shared.pod_demand(pod) == {}


def test_a_class_serving_an_extended_resource_counts_it_only_where_no_device_plugin_does() -> None:
    v = view(slices=[gpu_node_slice("dra-1")], classes=[device_class(extended=GPU)],
             templates=[template(count=8)])
    assert v.node_supply("dra-1", {"cpu": "8"}) == {CLASS: 8000, GPU: 8000}
    assert v.node_supply("dra-1", {GPU: "8"}) == {CLASS: 8000}
    # A claim pod charges the extended resource too: on a device-plugin node, whose
    # nvidia.com/gpu is not DRA's, the class's own resource is missing and it does not fit.
    demand = v.pod_demand(claim_pod("w-0", template_name="gpus"))
    assert demand == {CLASS: 8000, GPU: 8000}
    device_plugin = node_from_api({"metadata": {"name": "dp-1"},
                                   "status": {"allocatable": {GPU: "8"}}})
    assert not Resources(demand).fits_in(device_plugin.allocatable)


def test_the_hidden_claim_of_a_living_pod_is_counted_once_through_its_request() -> None:
    hidden = claim("p-extended-resources-x", owner_uid="uid-p", extended=True,
                   allocated=[("dra-1", f"gpu-{i}") for i in range(4)])
    classes = [device_class(extended=GPU)]
    alive = view(slices=[gpu_node_slice("dra-1")], classes=classes, claims=[hidden],
                 live=("uid-p",))
    assert alive.node_supply("dra-1", {})[GPU] == 8000  # the pod's own request takes 4
    gone = view(slices=[gpu_node_slice("dra-1")], classes=classes, claims=[hidden])
    assert gone.node_supply("dra-1", {})[GPU] == 4000


def test_a_named_claim_shared_by_pods_is_read_from_the_claim() -> None:
    shared = claim("shared", count=2)
    v = view(slices=[gpu_node_slice("n1")], claims=[shared])
    assert v.pod_demand(claim_pod("a", claim_name="shared")) == {CLASS: 2000}


def test_selectors_narrow_a_request_and_charge_what_they_overlap() -> None:
    h100 = "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')"
    mixed = resource_slice("n1", [gpu(0), gpu(1, product="NVIDIA A100"), gpu(2)])
    v = view(slices=[mixed], templates=[template(count=1, selectors=(h100,))])
    supply = v.node_supply("n1", {})
    narrowed = [k for k in supply if k.startswith(CLASS + "#")]
    assert len(narrowed) == 1 and supply[narrowed[0]] == 2000 and supply[CLASS] == 3000
    demand = v.pod_demand(claim_pod("w", template_name="gpus"))
    # Worst case, first fit: the H100 it takes is also one of the class's devices.
    assert demand == {narrowed[0]: 1000, CLASS: 1000}


def test_partitions_of_one_gpu_never_promise_a_counter_twice() -> None:
    counters = [{"name": "gpu-0-cs", "counters": {"slices": {"value": "7"}}}]
    full = gpu(0, consumes={"slices": 7}, counter_set="gpu-0-cs")
    migs = [gpu(i, kind="mig", consumes={"slices": 1}, counter_set="gpu-0-cs")
            for i in range(7)]
    classes = [device_class(), device_class("mig.nvidia.com", selector=MIG_SELECTOR)]
    mig_claim = template("mig", count=1, device_class="mig.nvidia.com")
    slices = [resource_slice("n1", [full, *migs], counters=counters)]
    v = view(slices=slices, classes=classes, templates=[mig_claim, template(count=1)])
    mig = "deviceclass.resource.kubernetes.io/mig.nvidia.com"
    assert v.node_supply("n1", {}) == {CLASS: 1000, mig: 7000}
    # One full GPU blocks all seven partitions; one partition blocks the full GPU.
    assert v.pod_demand(claim_pod("f", template_name="gpus")) == {CLASS: 1000, mig: 7000}
    assert v.pod_demand(claim_pod("m", template_name="mig")) == {mig: 1000, CLASS: 1000}
    one_mig = claim("m-0", device_class="mig.nvidia.com", count=1,
                    allocated=[("n1", "gpu-0-mig-0")])
    after = view(slices=slices, classes=classes, claims=[one_mig], templates=[mig_claim])
    assert after.node_supply("n1", {}) == {mig: 6000}


def test_what_cannot_be_counted_is_a_demand_no_node_supplies_naming_why() -> None:
    v = view(slices=[gpu_node_slice("n1")], templates=[template(count=2, device_class="nope")])
    demand = v.pod_demand(claim_pod("w", template_name="gpus"))
    # Still counted as asked (describe's totals), and waiting on a problem no node solves.
    assert demand == {UNCOUNTABLE_PREFIX + "DeviceClass nope does not exist": 1000,
                      "deviceclass.resource.kubernetes.io/nope": 2000}
    missing = v.pod_demand(claim_pod("w", template_name="absent"))
    assert list(missing) == [UNCOUNTABLE_PREFIX
                             + "ResourceClaimTemplate default/absent does not exist"]
    huge = view(slices=[gpu_node_slice("n1")], templates=[template(count=10**9)])
    (reason,) = huge.pod_demand(claim_pod("w", template_name="gpus"))
    assert "spec.devices.requests[0].count: '1000000000' is not a whole number from 1 to 32" \
        in reason


def test_a_selector_that_does_not_compile_names_its_expression() -> None:
    v = view(slices=[gpu_node_slice("n1")],
             templates=[template(count=1, selectors=("device.attributes[",))])
    (reason,) = [k for k in v.pod_demand(claim_pod("w", template_name="gpus"))
                 if k.startswith(UNCOUNTABLE_PREFIX)]
    assert "device.attributes[" in reason


def test_core_values_carry_the_lowered_supply_and_demand() -> None:
    node = node_from_api({"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "4"}},
                          DEVICE_SUPPLY: {CLASS: 8000}})
    assert node.allocatable == Resources({"cpu": 4000, CLASS: 8000})
    raw = claim_pod("w", template_name="gpus")
    pod = pod_from_api({**raw, "spec": {**raw["spec"], DEVICE_DEMAND: {CLASS: 8000}}})
    assert pod.shape.requests == Resources({CLASS: 8000})


def test_a_match_attribute_constraint_counts_the_largest_group_sharing_a_value() -> None:
    two_cliques = resource_slice("n1", [gpu(i, clique="c0" if i < 4 else "c1")
                                        for i in range(8)])
    same = template(count=4)
    same["spec"]["spec"]["devices"]["constraints"] = [
        {"requests": ["gpus"], "matchAttribute": "gpu.nvidia.com/cliqueID"}]
    v = view(slices=[two_cliques], templates=[same])
    supply = v.node_supply("n1", {})
    (constrained,) = [k for k in supply if "#" in k]
    assert supply == {CLASS: 8000, constrained: 4000}
    demand = Resources(v.pod_demand(claim_pod("w", template_name="gpus")))
    assert demand == Resources({constrained: 4000, CLASS: 4000})
    assert demand.fits_in(Resources(supply))
    assert not (demand + demand).fits_in(Resources(supply) - Resources({constrained: 1000}))


def test_a_full_gpu_charges_only_the_partitions_its_counters_could_hold() -> None:
    """Each GPU offers itself, seven 1-slice and two 4-slice partitions on 7 slices: a full
    GPU blocks at most seven partitions at once, so whole-GPU claims still fit a node."""
    counters = [{"name": f"gpu-{g}-cs", "counters": {"slices": {"value": "7"}}}
                for g in range(2)]
    devices = []
    for g in range(2):
        devices.append(gpu(g, consumes={"slices": 7}, counter_set=f"gpu-{g}-cs"))
        devices += [gpu(10 * g + m, kind="mig", consumes={"slices": 1 if m < 7 else 4},
                        counter_set=f"gpu-{g}-cs") for m in range(9)]
    classes = [device_class(), device_class("mig.nvidia.com", selector=MIG_SELECTOR)]
    v = view(slices=[resource_slice("n1", devices, counters=counters)], classes=classes,
             templates=[template(count=2)])
    mig = "deviceclass.resource.kubernetes.io/mig.nvidia.com"
    supply = Resources(v.node_supply("n1", {}))
    assert supply == Resources({CLASS: 2000, mig: 14000})
    demand = Resources(v.pod_demand(claim_pod("w", template_name="gpus")))
    assert demand == Resources({CLASS: 2000, mig: 14000})
    assert demand.fits_in(supply)


def _first_available(*alternatives: tuple[str, int, str]) -> dict[str, Any]:
    """A template whose one request lists ``(name, count, productName prefix)`` alternatives."""
    out = template()
    out["spec"]["spec"]["devices"]["requests"] = [{"name": "gpus", "firstAvailable": [
        {"name": name, "deviceClassName": "gpu.nvidia.com", "count": count, "selectors": [
            {"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName"
                                   f".startsWith('{product}')"}}]}
        for name, count, product in alternatives]}]
    return out


def test_first_available_counts_the_first_alternative_the_cluster_has_devices_for() -> None:
    prefer_h100 = _first_available(("h100", 8, "NVIDIA H100"), ("a100", 4, "NVIDIA A100"))
    a100_only = resource_slice("n1", [gpu(i, product="NVIDIA A100") for i in range(8)])
    v = view(slices=[a100_only], templates=[prefer_h100])
    demand = v.pod_demand(claim_pod("w", template_name="gpus"))
    # No H100 anywhere: the allocator always falls through to the A100s, and so does Muster,
    # rather than leaving the gang waiting for devices that do not exist.
    assert not any(k.startswith(UNCOUNTABLE_PREFIX) for k in demand)
    (narrowed,) = [k for k in demand if "#" in k]
    assert demand[narrowed] == 4000
    assert Resources(demand).fits_in(Resources(v.node_supply("n1", {})))
    # With H100s published, the first alternative is what the pod asks.
    with_h100 = view(slices=[a100_only, gpu_node_slice("n2")], templates=[prefer_h100])
    first = with_h100.pod_demand(claim_pod("w", template_name="gpus"))
    assert sorted(first.values()) == [8000, 8000]
    assert not Resources(first).fits_in(Resources(with_h100.node_supply("n1", {})))
    assert Resources(first).fits_in(Resources(with_h100.node_supply("n2", {})))


def test_first_available_with_no_alternative_published_waits_naming_the_first() -> None:
    v = view(slices=[gpu_node_slice("n1")],
             templates=[_first_available(("b200", 8, "NVIDIA B200"), ("gb", 8, "NVIDIA GB"))])
    demand = v.pod_demand(claim_pod("w", template_name="gpus"))
    assert not Resources(demand).fits_in(Resources(v.node_supply("n1", {})))
    b200 = ("gpu.nvidia.com",
            ("device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA B200')",), "")
    assert demand == {resource_name(b200): 8000}  # the first alternative: what a reason names


def test_a_constraint_naming_one_alternative_binds_only_that_one() -> None:
    two_cliques = resource_slice("n1", [gpu(i, product="NVIDIA A100",
                                            clique="c0" if i < 4 else "c1") for i in range(8)])
    spec = _first_available(("h100", 8, "NVIDIA H100"), ("a100", 8, "NVIDIA A100"))
    spec["spec"]["spec"]["devices"]["constraints"] = [
        {"requests": ["gpus/a100"], "matchAttribute": "gpu.nvidia.com/cliqueID"}]
    v = view(slices=[two_cliques], templates=[spec])
    # Eight A100s on one clique are asked; the node has two cliques of four.
    demand = v.pod_demand(claim_pod("w", template_name="gpus"))
    assert not Resources(demand).fits_in(Resources(v.node_supply("n1", {})))
    unconstrained = _first_available(("h100", 8, "NVIDIA H100"), ("a100", 8, "NVIDIA A100"))
    loose = view(slices=[two_cliques], templates=[unconstrained])
    assert Resources(loose.pod_demand(claim_pod("w", template_name="gpus"))).fits_in(
        Resources(loose.node_supply("n1", {})))


def test_allocation_mode_all_takes_every_matching_device_of_a_node_whose_all_are_free() -> None:
    every = template()
    every["spec"]["spec"]["devices"]["requests"] = [
        {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                     "allocationMode": "All"}}]
    one_taken = claim("other", count=1, allocated=[("n2", "gpu-0")])
    v = view(slices=[gpu_node_slice("n1"), gpu_node_slice("n2"), gpu_node_slice("n3", gpus=4)],
             templates=[every], claims=[one_taken])
    demand = Resources(v.pod_demand(claim_pod("w", template_name="gpus")))
    assert demand == Resources({CLASS: 8000})
    assert demand.fits_in(Resources(v.node_supply("n1", {})))
    # The allocator refuses All on a node with one of its devices allocated...
    assert not demand.fits_in(Resources(v.node_supply("n2", {})))
    # ...and a node with fewer devices is not promised eight (left unused: never overcounted).
    assert not demand.fits_in(Resources(v.node_supply("n3", {})))
    # Two such pods never share one node.
    assert not (demand + demand).fits_in(Resources(v.node_supply("n1", {})))
