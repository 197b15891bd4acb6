"""Free capacity is per node and, for GPUs, per device; nothing is summed across nodes."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from extender.core.gang.capacity import index_of
from extender.core.gang.charging import count_fitting, node_capacity, take
from extender.core.gang.nodecapacity import DEVICE, demand_of, describe_free, empty_capacity
from extender.core.gang.placement import plan_gang
from extender.core.gang.plans import Infeasible
from extender.core.model.resources import Resources
from extender.core.model.values import NodeInfo, NodeName, PodPhase
from tests.unit.core.builders import make_gang, make_node, make_pod, make_shape, make_snapshot


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


def test_every_pod_takes_one_of_the_nodes_pod_slots() -> None:
    node = make_node("n1", gpus=0, cpu=64, max_pods=2)
    full = [make_pod(f"p{i}", shape=make_shape(cpu=1), node="n1") for i in range(2)]
    cap = node_capacity(node, full)
    assert cap.pods == 0
    assert count_fitting(cap, demand_of(make_shape(cpu=1))) == 0
    assert count_fitting(empty_capacity(node), demand_of(make_shape(cpu=1))) == 2


def test_a_node_declaring_no_pods_allocatable_has_no_pod_limit() -> None:
    node = NodeInfo(name=NodeName("trace"), allocatable=Resources.of(cpu=8))
    assert empty_capacity(node).pods is None
    assert count_fitting(empty_capacity(node), demand_of(make_shape(cpu=1))) == 8


def test_a_full_node_shows_no_pod_slots_and_too_many_pods_show_as_oversubscribed() -> None:
    node = make_node("n1", gpus=0, max_pods=1)
    pods = [make_pod(f"p{i}", shape=make_shape(cpu=1), node="n1") for i in range(2)]
    assert node_capacity(node, pods).oversubscribed() == {"pods": -1}
    assert describe_free(node_capacity(node, pods[:1])).endswith("0 pod slots")


def test_gangs_are_not_planned_onto_a_node_whose_pod_slots_are_used_up() -> None:
    nodes = [make_node("n1", gpus=8, max_pods=2)]
    busy = [make_pod(f"ds{i}", shape=make_shape(cpu=1), node="n1", ns="kube-system")
            for i in range(2)]
    gang = make_gang("g", roles=[("worker", 2, make_shape(gpus=1))])
    snap = make_snapshot(nodes, gangs=[gang], pods=busy)
    result = plan_gang(gang, snapshot=snap, capacity=index_of(snap).base)
    assert isinstance(result, Infeasible)
    assert result.reason == ("gang ml/g: 0 of 2 pods fit; a worker needs a pod slot on one "
                             "node, and every eligible node has reached its pods limit")
    roomier = make_snapshot([make_node("n1", gpus=8, max_pods=3)], gangs=[gang], pods=busy)
    half = plan_gang(gang, snapshot=roomier, capacity=index_of(roomier).base)
    assert isinstance(half, Infeasible) and half.placed == 1


def test_a_pod_listing_fewer_devices_than_its_whole_gpus_is_charged_them_all() -> None:
    node = make_node("n1", gpus=8)
    pod = make_pod("w", shape=make_shape(gpus=4), node="n1", devices=(5,))
    cap = node_capacity(node, [pod])
    assert cap.whole_free == 4  # not 7
    assert cap.devices[5] == 0  # the listed device is among them
    assert sum(1 for d in cap.devices if d == 0) == 4


def test_a_pod_listing_its_devices_is_charged_exactly_those() -> None:
    node = make_node("n1", gpus=4)
    pod = make_pod("w", shape=make_shape(gpus=2), node="n1", devices=(1, 3))
    assert node_capacity(node, [pod]).devices == (DEVICE, 0, DEVICE, 0)


def test_a_capacity_is_one_key_by_value_in_this_process_and_in_another() -> None:
    """Capacities key capacity classes and per-call memos with a hash kept from construction;
    one unpickled in another process (string hashes differ there) is keyed by value too."""
    node = make_node("n1", gpus=8, cpu=64)
    pods = [make_pod("a", shape=make_shape(gpus=4, cpu=8), node="n1")]
    one, two = node_capacity(node, pods), node_capacity(node, list(pods))
    assert one is not two and {one: "class"}[two] == "class"
    assert take(one, demand_of(make_shape(gpus=1)), 1) not in {one}
    script = (
        "import pickle, sys\n"
        "from extender.core.gang.capacity import node_capacity\n"
        "from tests.unit.core.builders import make_node, make_pod, make_shape\n"
        "sent = pickle.loads(sys.stdin.buffer.read())\n"
        "node = make_node('n1', gpus=8, cpu=64)\n"
        "here = node_capacity(node, [make_pod('a', shape=make_shape(gpus=4, cpu=8), "
        "node='n1')])\n"
        "print({here: 'class'}.get(sent), sent.whole_free)\n")
    done = subprocess.run([sys.executable, "-c", script], input=pickle.dumps(one),
                          capture_output=True, check=True, cwd=Path(__file__).parents[4],
                          env={**os.environ, "PYTHONHASHSEED": "12345"})
    assert done.stdout.decode().split() == ["class", "4"]
