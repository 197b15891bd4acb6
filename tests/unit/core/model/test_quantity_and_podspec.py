"""Quantities parse exactly; pod demand is computed the way kube-scheduler computes it."""

from __future__ import annotations

import pytest

from extender.core.model.podspec import PodSpecError, shape_of
from extender.core.model.quantity import QuantityError, format_quantity, parse_quantity
from extender.core.model.resources import GPU, Resources


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("500m", 500),
        ("2", 2000),
        (4, 4000),
        (0.5, 500),
        ("1Gi", 2**30 * 1000),
        ("1.5", 1500),
        ("1e3", 1_000_000),
        ("100M", 100_000_000_000),
        ("1n", 1),  # below a milli-unit rounds up, as the API server does
    ],
)
def test_quantities_parse_to_exact_milli_units(text: object, milli: int) -> None:
    assert parse_quantity(text) == milli


@pytest.mark.parametrize("bad", ["", "4 GPUs", "1.2.3", "Gi", True, None, [1]])
def test_malformed_quantities_are_rejected_by_name(bad: object) -> None:
    with pytest.raises(QuantityError, match="not a Kubernetes quantity"):
        parse_quantity(bad)


def test_quantities_render_back_for_people() -> None:
    assert format_quantity(1500) == "1500m"
    assert format_quantity(2000) == "2"
    assert format_quantity(16 * 2**30 * 1000, binary=True) == "16Gi"


def _container(**requests: object) -> dict[str, object]:
    return {"name": "c", "resources": {"requests": dict(requests)}}


def test_containers_add_up() -> None:
    spec = {"containers": [_container(cpu="1", **{GPU: 4}), _container(cpu="500m")]}
    assert shape_of(spec).requests == Resources({"cpu": 1500, GPU: 4000})


def test_a_big_init_container_dominates_the_containers() -> None:
    spec = {
        "initContainers": [_container(cpu="8", memory="1Gi")],
        "containers": [_container(cpu="1", memory="4Gi", **{GPU: 1})],
    }
    shape = shape_of(spec)
    assert shape.requests["cpu"] == 8000
    assert shape.requests["memory"] == 4 * 2**30 * 1000
    assert shape.gpus == 1


def test_sidecars_add_to_containers_and_to_later_init_containers() -> None:
    sidecar = {**_container(cpu="1"), "restartPolicy": "Always"}
    spec = {
        "initContainers": [sidecar, _container(cpu="2")],
        "containers": [_container(cpu="1")],
    }
    # containers 1 + sidecar 1 = 2; the init container runs beside the sidecar: 2 + 1 = 3
    assert shape_of(spec).requests["cpu"] == 3000


def test_limits_stand_in_for_missing_requests_and_overhead_is_added() -> None:
    spec = {
        "containers": [{"name": "c", "resources": {"limits": {GPU: "8", "cpu": "2"},
                                                   "requests": {"cpu": "1"}}}],
        "overhead": {"cpu": "250m"},
    }
    assert shape_of(spec).requests == Resources({"cpu": 1250, GPU: 8000})


def test_pod_level_resources_replace_the_container_sum() -> None:
    spec = {"resources": {"requests": {"cpu": "4"}}, "containers": [_container(cpu="1")]}
    assert shape_of(spec).requests["cpu"] == 4000


def test_constraints_and_gpu_fraction_are_read() -> None:
    spec = {
        "nodeSelector": {"gpu": "a100"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "rack", "operator": "In", "values": ["r1", "r2"]}]}]}}},
        "containers": [_container()],
    }
    shape = shape_of(spec, annotations={"gpu-fraction": "0.5"})
    assert shape.node_selector == (("gpu", "a100"),)
    assert shape.tolerations[0].operator == "Exists"
    assert shape.affinity[0].match_expressions[0].values == ("r1", "r2")
    assert shape.gpu_share == 500


def test_bad_fields_name_their_path() -> None:
    with pytest.raises(PodSpecError, match=r"spec.containers\[0\].resources.requests"):
        shape_of({"containers": [_container(cpu="lots")]})
    with pytest.raises(PodSpecError, match=r"spec.containers: expected a list"):
        shape_of({"containers": {"name": "x"}})


def test_preemption_policy_never_marks_a_shape_that_may_not_preempt() -> None:
    spec = {"containers": [_container(cpu="1")], "priority": 7}
    assert shape_of(spec).preempts and shape_of(spec).priority == 7
    assert not shape_of({**spec, "preemptionPolicy": "Never"}).preempts
    assert shape_of({**spec, "preemptionPolicy": "PreemptLowerPriority"}).preempts
