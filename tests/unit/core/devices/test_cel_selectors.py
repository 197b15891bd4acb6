"""DRA device selectors evaluate as the scheduler's CEL does: NVIDIA's DeviceClasses, quantities
and semvers, qualified and unqualified attribute names, an unknown domain as an empty map, and a
missing attribute as an error that names the expression, never as "no match"."""

from __future__ import annotations

from typing import Any

import pytest

from extender.core.devices.cel import (
    MAX_EXPRESSION_LENGTH,
    Selector,
    SelectorError,
    compile_selector,
)
from extender.core.devices.errors import DeviceError

NV = "gpu.nvidia.com"
CD = "compute-domain.nvidia.com"


def h100(**extra: Any) -> dict[str, Any]:
    """A GPU as the NVIDIA DRA driver publishes it in a ResourceSlice."""
    attributes: dict[str, Any] = {
        "type": {"string": "gpu"},
        "productName": {"string": "NVIDIA H100 80GB HBM3"},
        "architecture": {"string": "Hopper"},
        "cudaComputeCapability": {"version": "9.0.0"},
        "driverVersion": {"version": "570.124.6"},
        "resource.kubernetes.io/pciBusID": {"string": "0000:1b:00.0"},
        "index": {"int": 0},
        "x": {"bool": True},
    }
    attributes.update(extra)
    return {"name": "gpu-0", "attributes": attributes,
            "capacity": {"memory": {"value": "80Gi"}}, "allowMultipleAllocations": False}


def a100_40g() -> dict[str, Any]:
    return h100(productName={"string": "NVIDIA A100-SXM4-40GB"},
                cudaComputeCapability={"version": "8.0.0"}) | {
        "name": "gpu-1", "capacity": {"memory": {"value": "40Gi"}}}


CHANNEL_0 = {"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}}
DAEMON = {"name": "daemon-0", "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}}}


def matches(expression: str, device: dict[str, Any], driver: str = NV) -> bool:
    return compile_selector(expression).matches(driver, device)


# -- NVIDIA's own DeviceClasses ------------------------------------------------------------------

GPU_CLASS = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
CHANNEL_CLASS = ("device.attributes['compute-domain.nvidia.com'].type == 'channel' && "
                 "device.attributes['compute-domain.nvidia.com'].id == 0")


def test_the_gpu_class_takes_gpus_of_its_driver_only() -> None:
    assert matches(GPU_CLASS, h100())
    assert not matches(GPU_CLASS, h100(type={"string": "mig"}))
    # another driver's device stops at the driver test, before its domain is read
    assert not matches(GPU_CLASS, CHANNEL_0, driver=CD)


def test_the_default_channel_class_takes_channel_zero_only() -> None:
    assert matches(CHANNEL_CLASS, CHANNEL_0, driver=CD)
    assert not matches(CHANNEL_CLASS, DAEMON, driver=CD)
    assert not matches(CHANNEL_CLASS, {"name": "channel-1", "attributes": {
        "type": {"string": "channel"}, "id": {"int": 1}}}, driver=CD)


def test_a_class_selector_on_a_device_of_another_driver_is_an_error_not_a_mismatch() -> None:
    # The channel class reads `type` in its own domain: on a GPU that domain is unknown, so an
    # empty map, and the missing `type` fails as the scheduler's evaluation does.
    with pytest.raises(SelectorError, match="type"):
        matches(CHANNEL_CLASS, h100())


# -- what selectors test -------------------------------------------------------------------------


def test_product_names_filter_by_equality_and_string_functions() -> None:
    exact = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"
    assert matches(exact, h100())
    assert not matches(exact, a100_40g())
    contains = "device.attributes['gpu.nvidia.com'].productName.lowerAscii().contains('h100')"
    assert matches(contains, h100())
    assert not matches(contains, a100_40g())
    assert matches("device.attributes['gpu.nvidia.com'].productName.matches('^NVIDIA A100')",
                   a100_40g())


def test_memory_is_compared_as_a_quantity() -> None:
    at_least_48g = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('48Gi')) >= 0"
    assert matches(at_least_48g, h100())
    assert not matches(at_least_48g, a100_40g())
    assert matches("device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('40Gi'))",
                   h100())
    assert matches("device.capacity['gpu.nvidia.com'].memory.isLessThan(quantity('50G'))",
                   a100_40g())
    assert matches("device.capacity['gpu.nvidia.com'].memory == quantity('81920Mi')", h100())
    assert matches("device.capacity['gpu.nvidia.com'].memory.asInteger() == 85899345920", h100())
    assert matches("quantity('1.5').asApproximateFloat() == 1.5 && !quantity('1.5').isInteger()"
                   " && quantity('200M').compareTo(quantity('0.2G')) == 0"
                   " && quantity('50k').add(20).sub(quantity('100k')).sub(-50000)"
                   " == quantity('20') && isQuantity('1Gi') && !isQuantity('1GB')", h100())


def test_compute_capability_is_compared_as_a_semver() -> None:
    hopper = ("device.attributes['gpu.nvidia.com'].cudaComputeCapability"
              ".isGreaterThan(semver('8.9.0'))")
    assert matches(hopper, h100())
    assert not matches(hopper, a100_40g())
    assert matches("device.attributes['gpu.nvidia.com'].cudaComputeCapability"
                   ".compareTo(semver('8.0.0')) == 0", a100_40g())
    assert matches("device.attributes['gpu.nvidia.com'].driverVersion.major() >= 570 && "
                   "device.attributes['gpu.nvidia.com'].driverVersion.minor() == 124 && "
                   "device.attributes['gpu.nvidia.com'].driverVersion.patch() == 6", h100())
    # pre-releases sort before their release; normalization as Kubernetes' semver(s, true)
    assert matches("semver('1.0.0-rc.1').isLessThan(semver('1.0.0')) && "
                   "semver('1.0.0-alpha.2').isLessThan(semver('1.0.0-alpha.10')) && "
                   "semver('v1.2', true) == semver('1.2.0') && !isSemver('v1.2')", h100())


def test_quantities_and_semvers_are_not_compared_with_each_other() -> None:
    with pytest.raises(SelectorError, match="no such overload"):
        matches("device.capacity['gpu.nvidia.com'].memory"
                ".compareTo(device.attributes['gpu.nvidia.com'].cudaComputeCapability) == 0",
                h100())


def test_unqualified_names_live_in_the_drivers_domain_qualified_ones_in_theirs() -> None:
    device = h100()
    assert matches("device.attributes['gpu.nvidia.com'].index == 0 && "
                   "device.attributes['gpu.nvidia.com'].x", device)
    assert matches("device.attributes['resource.kubernetes.io'].pciBusID == '0000:1b:00.0'",
                   device)
    assert not matches("'pciBusID' in device.attributes['gpu.nvidia.com']", device)
    assert not matches("'resource.kubernetes.io/pciBusID' in device.attributes['gpu.nvidia.com']",
                       device)
    # the domain is the driver's name: the same device under another driver has no NV domain
    assert matches("device.attributes['example.com'].productName.startsWith('NVIDIA')", device,
                   driver="example.com")


def test_an_unknown_domain_reads_as_an_empty_map() -> None:
    assert not matches("'x' in device.attributes['other.example.com']", h100())
    assert matches("device.attributes['other.example.com'].size() == 0", h100())
    assert matches("device.capacity['other.example.com'].size() == 0", h100())
    assert not matches("'other.example.com' in device.attributes", h100())
    assert matches("cel.bind(nv, device.attributes['gpu.nvidia.com'], "
                   "nv.type == 'gpu' && nv.architecture == 'Hopper')", h100())


def test_a_missing_attribute_is_an_error_that_names_the_expression() -> None:
    expression = "device.attributes['gpu.nvidia.com'].memoryBandwidth > 1000"
    with pytest.raises(SelectorError) as raised:
        matches(expression, h100())
    assert raised.value.expression == expression
    assert expression in str(raised.value)
    assert "memoryBandwidth" in raised.value.message
    assert isinstance(raised.value, DeviceError)
    # also when the missing key is in an unknown domain
    with pytest.raises(SelectorError, match="productName"):
        matches("device.attributes['other.example.com'].productName == 'x'", h100())
    # `has` and `in` are how a selector asks without failing
    assert not matches("has(device.attributes['gpu.nvidia.com'].memoryBandwidth)", h100())


def test_allow_multiple_allocations_and_the_driver_are_visible() -> None:
    assert not matches("device.allowMultipleAllocations", h100())
    assert matches("device.allowMultipleAllocations",
                   h100() | {"allowMultipleAllocations": True})
    assert matches("device.driver.endsWith('nvidia.com')", h100())


# -- what is refused -----------------------------------------------------------------------------


@pytest.mark.parametrize("expression", [
    "device.driver ==",
    "device.attributes['gpu.nvidia.com'.type == 'gpu'",
    "'unterminated",
])
def test_a_syntax_error_is_refused_at_compile_time(expression: str) -> None:
    with pytest.raises(SelectorError, match="Syntax error") as raised:
        compile_selector(expression)
    assert raised.value.expression == expression


def test_a_result_that_is_not_a_bool_is_refused() -> None:
    with pytest.raises(SelectorError, match="must evaluate to bool, not INT"):
        compile_selector("1 + 1")
    # statically unknown types are checked when evaluated
    with pytest.raises(SelectorError, match="not bool"):
        matches("device.attributes['gpu.nvidia.com'].productName", h100())


def test_an_unsupported_kubernetes_function_is_refused_by_name() -> None:
    with pytest.raises(SelectorError, match="uses getHost, url, not a variable or function"):
        compile_selector("url('https://example.com').getHost() == 'example.com'")
    with pytest.raises(SelectorError, match="uses mul"):
        compile_selector("quantity('1Gi').mul(2).isGreaterThan(quantity('1Gi'))")


def test_an_expression_longer_than_the_api_allows_is_refused() -> None:
    long = "true && " * (MAX_EXPRESSION_LENGTH // 8) + "true"
    assert len(long) > MAX_EXPRESSION_LENGTH
    with pytest.raises(SelectorError, match="more than the 10240") as raised:
        compile_selector(long)
    assert len(str(raised.value)) < 400  # the expression is shown truncated


def test_a_runaway_comprehension_stops_with_an_error() -> None:
    items = "[" + ",".join(["1"] * 200) + "]"
    with pytest.raises(SelectorError, match="budget"):
        matches(f"{items}.all(a, {items}.all(b, a == b))", h100())


def test_an_attribute_value_the_scheduler_cannot_read_is_an_error() -> None:
    with pytest.raises(SelectorError, match="unsupported attribute value"):
        matches("true", h100(bogus={"strings": ["a"]}))
    with pytest.raises(SelectorError, match="not a semantic version"):
        matches("true", h100(cudaComputeCapability={"version": "9.0"}))


def test_compiled_selectors_are_cached_and_compare_by_expression() -> None:
    assert compile_selector(GPU_CLASS) is compile_selector(GPU_CLASS)
    assert compile_selector(GPU_CLASS) == Selector(GPU_CLASS)
    assert Selector(GPU_CLASS).matches(NV, h100())
