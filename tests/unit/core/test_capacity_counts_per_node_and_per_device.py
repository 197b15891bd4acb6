"""Free capacity is per node and, for GPUs, per device; nothing is summed across nodes."""

from __future__ import annotations

import pytest

from extender.core.capacity import (
    DEVICE,
    count_fitting,
    demand_of,
    empty_capacity,
    index_of,
    node_capacity,
    take,
)
from extender.core.model import PodPhase
from extender.core.resources import Resources

from .builders import make_node, make_pod, make_shape, make_snapshot


def test_bound_pods_are_subtracted_but_terminal_and_pending_pods_are_not() -> None:
    node = make_node("n1", gpus=8, cpu=64)
    pods = [
        make_pod("a", shape=make_shape(gpus=4, cpu=8), node="n1"),
        make_pod("done", shape=make_shape(gpus=4, cpu=8), node="n1", phase=PodPhase.SUCCEEDED),
        make_pod("pending", shape=make_shape(gpus=4, cpu=8)),
    ]
    cap = index_of(make_snapshot([node], pods=pods)).base[node.name]
    assert cap.whole_free == 4
    assert cap.free.get("cpu") == 56_000


def test_extended_resources_other_than_gpus_are_counted() -> None:
    node = make_node("n1", gpus=0)
    node = type(node)(name=node.name, allocatable=node.allocatable + Resources({"rdma/hca": 2000}))
    shape = make_shape(cpu=1)
    shape = type(shape)(requests=shape.requests + Resources({"rdma/hca": 1000}))
    assert count_fitting(empty_capacity(node), demand_of(shape)) == 2


def test_sharing_pods_take_milli_from_one_device_best_fit() -> None:
    cap = empty_capacity(make_node(gpus=2))
    half = demand_of(make_shape(share=500))
    quarter = demand_of(make_shape(share=250))
    cap = take(cap, half)
    assert cap.devices == (500, DEVICE)
    cap = take(cap, quarter)  # best fit: the half-used device, keeping device 1 whole
    assert cap.devices == (250, DEVICE)
    assert cap.whole_free == 1


def test_two_half_used_devices_do_not_hold_one_whole_gpu_pod() -> None:
    cap = empty_capacity(make_node(gpus=2))
    cap = take(take(cap, demand_of(make_shape(share=600))), demand_of(make_shape(share=600)))
    assert cap.devices == (400, 400)
    assert count_fitting(cap, demand_of(make_shape(gpus=1))) == 0
    assert count_fitting(cap, demand_of(make_shape(share=400))) == 2


def test_known_device_indexes_are_charged_where_the_pod_runs() -> None:
    node = make_node("n1", gpus=4)
    pod = make_pod("s", shape=make_shape(share=500), node="n1", devices=(3,))
    assert node_capacity(node, [pod]).devices == (DEVICE, DEVICE, DEVICE, 500)


def test_observed_oversubscription_shows_instead_of_vanishing() -> None:
    node = make_node("n1", gpus=2, cpu=4)
    pods = [make_pod(f"p{i}", shape=make_shape(gpus=1, cpu=2), node="n1") for i in range(3)]
    cap = node_capacity(node, pods)
    over = cap.oversubscribed()
    assert over["cpu"] == -2000
    assert any(k.startswith("gpu[") for k in over)


def test_take_refuses_what_does_not_fit() -> None:
    cap = empty_capacity(make_node(gpus=4))
    with pytest.raises(ValueError, match="do not fit"):
        take(cap, demand_of(make_shape(gpus=1)), 5)


def test_the_index_is_computed_once_per_snapshot_object() -> None:
    snap = make_snapshot([make_node()])
    assert index_of(snap) is index_of(snap)
