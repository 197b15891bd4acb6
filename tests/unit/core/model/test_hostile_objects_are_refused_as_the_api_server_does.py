"""Objects the API server would refuse are refused here too, naming the object and the field,
rather than read into something else (issue 16): ``str()`` of a label that is a list, half a
GPU rounded to nothing."""

from __future__ import annotations

from typing import Any

import pytest

from extender.core.model.objects import ObjectError, node_from_api, pod_from_api
from extender.core.model.podspec import PodSpecError, shape_of
from extender.core.model.quantity import QuantityError, parse_quantity
from extender.core.model.values import LabelError, freeze_labels


def _pod(meta: dict[str, Any] | None = None, **resources: object) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ml", **(meta or {})},
            "spec": {"containers": [{"name": "trainer", "resources": {"limits": resources}}]}}


@pytest.mark.parametrize("field", ["labels", "annotations"])
@pytest.mark.parametrize("value", [[1, 2], {"a": "b"}, 3, None, True])
def test_pod_labels_and_annotations_that_are_not_strings_are_refused_naming_pod_and_key(
        field: str, value: object):
    with pytest.raises(ObjectError, match=rf"^pod ml/p: metadata\.{field}: note: expected a "
                                          "string value"):
        pod_from_api(_pod({field: {"note": value}}))


def test_a_label_key_that_is_not_a_string_is_refused():
    with pytest.raises(ObjectError, match=r"node n: metadata\.labels: key 7: expected a string"):
        node_from_api({"metadata": {"name": "n", "labels": {7: "x"}}})


def test_freeze_labels_never_stringifies_a_nested_value():
    nested: list[object] = []
    for _ in range(50):  # what an alias chain would make str() walk
        nested = [nested] * 10
    with pytest.raises(LabelError):
        freeze_labels({"a": nested})
    assert freeze_labels({"b": "2", "a": "1"}) == (("a", "1"), ("b", "2"))


def test_a_node_selector_value_that_is_not_a_string_is_refused_with_its_path():
    with pytest.raises(PodSpecError, match=r"spec\.nodeSelector: zone: expected a string"):
        shape_of({"nodeSelector": {"zone": 1}, "containers": []})


@pytest.mark.parametrize("amount", ["0.5", 0.5, "500m", "1.5"])
def test_fractional_gpus_are_refused_naming_container_and_resource(amount: object):
    with pytest.raises(ObjectError) as err:
        pod_from_api(_pod(**{"nvidia.com/gpu": amount}))
    message = str(err.value)
    assert "spec.containers[0].resources.limits[nvidia.com/gpu]: must be a whole number" in message
    assert "(container 'trainer')" in message


@pytest.mark.parametrize("name", ["example.com/fpga", "rdma/hca"])
def test_every_extended_resource_must_be_whole(name: str):
    with pytest.raises(ObjectError, match="must be a whole number"):
        pod_from_api(_pod(**{name: "250m"}))


def test_native_resources_may_be_fractional_and_whole_gpus_still_count():
    pod = pod_from_api(_pod(**{"cpu": "250m", "memory": "1.5Gi", "ephemeral-storage": "0.5Gi",
                               "hugepages-2Mi": "1.5Mi", "nvidia.com/gpu": "2"}))
    assert pod.shape.requests["cpu"] == 250 and pod.shape.gpus == 2


@pytest.mark.parametrize("amount", ["1e999999999", "1e30", "9" * 40, 10**30, 2**63])
def test_quantities_beyond_int64_are_refused_not_expanded(amount: object):
    with pytest.raises(QuantityError, match="is too large"):
        parse_quantity(amount)


@pytest.mark.parametrize("amount", [float("inf"), float("nan"), "1" * 100])
def test_quantities_that_are_no_number_are_refused(amount: object):
    with pytest.raises(QuantityError, match="not a Kubernetes quantity"):
        parse_quantity(amount)


def test_the_largest_quantities_kubernetes_uses_still_parse():
    assert parse_quantity("1E") == 10**21 and parse_quantity("7Ei") == 7 * 2**60 * 1000
    assert parse_quantity(2**63 - 1) == (2**63 - 1) * 1000
