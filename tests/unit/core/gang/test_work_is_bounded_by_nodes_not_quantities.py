"""Capacity and placement cost grows with nodes and devices, never with a requested quantity.

The API server accepts a pod asking for a billion GPUs and a node reporting a billion; bound by
hand (``spec.nodeName``), such a pod is charged like any other. A loop per GPU would hold the
service lock for seconds per million GPUs, so every filter would time out.
"""

from __future__ import annotations

import time

from extender.core.decide.decisions import CoreSettings, FilterOutcome, decide_filter
from extender.core.gang.charging import node_capacity, take
from extender.core.gang.ledger import Ledger, free_capacity
from extender.core.gang.nodecapacity import (
    DEVICE,
    MAX_DEVICES,
    Demand,
    NodeCapacity,
    empty_capacity,
)
from extender.core.model.resources import EMPTY
from extender.core.model.values import NodeName
from tests.unit.core.builders import make_gang, make_node, make_pod, make_shape, make_snapshot, uid

BILLION = 10**9
SETTINGS = CoreSettings(plan_ttl=30, bind_timeout=30)


def _timed(fn):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def test_a_pod_bound_with_a_billion_gpus_is_charged_at_once_and_leaves_its_node_full() -> None:
    node = make_node("n1", gpus=8)
    hog = make_pod("hog", shape=make_shape(gpus=BILLION), node="n1")
    cap, seconds = _timed(lambda: node_capacity(node, [hog]))
    assert seconds < 0.5  # a loop per GPU takes about 1.8 s per million
    assert cap.whole_free == 0
    assert sum(cap.devices) == 8 * DEVICE - BILLION * DEVICE  # nothing vanishes
    assert cap.oversubscribed()  # and the excess shows on the devices


def test_a_small_overcharge_still_lands_on_the_emptiest_devices_first() -> None:
    cap = NodeCapacity(free=EMPTY, devices=(DEVICE, 500, 0, 0))
    after = take(cap, Demand(scalar=EMPTY, whole=3), 1, force=True)
    # the free device, then the half-used one, then the emptiest again (ties: lowest index)
    assert after.devices == (-DEVICE, -500, 0, 0)


def test_many_observed_pods_charged_at_once_cost_no_more_than_one() -> None:
    cap = NodeCapacity(free=EMPTY, devices=(DEVICE,) * 8)
    after, seconds = _timed(lambda: take(cap, Demand(scalar=EMPTY, whole=1), BILLION, force=True))
    assert seconds < 0.5
    assert sum(after.devices) == 8 * DEVICE - BILLION * DEVICE
    shared = take(cap, Demand(scalar=EMPTY, share=500), BILLION, force=True)
    assert sum(shared.devices) <= 8 * DEVICE - BILLION * 500


def test_a_node_reporting_a_billion_gpus_is_modelled_with_a_bounded_device_list() -> None:
    cap, seconds = _timed(lambda: empty_capacity(make_node("huge", gpus=BILLION)))
    assert seconds < 0.5
    assert len(cap.devices) == MAX_DEVICES  # fewer than reported: never oversubscribes


def test_filters_keep_answering_and_treat_the_hogs_node_as_full() -> None:
    nodes = [make_node("n1", gpus=8), make_node("n2", gpus=8)]
    hog = make_pod("hog", shape=make_shape(gpus=BILLION), node="n1")
    gang = make_gang("a", roles=[("worker", 2, make_shape(gpus=4))])
    snap = make_snapshot(nodes, gangs=[gang], pods=[hog])
    ledger = Ledger()
    decision, seconds = _timed(lambda: decide_filter(
        snap.pods[uid(gang, "worker", 0)], [NodeName("n1"), NodeName("n2")], snapshot=snap,
        ledger=ledger, now=0, settings=SETTINGS))
    assert seconds < 0.5
    assert decision.outcome is FilterOutcome.PLANNED
    assert decision.passed == (NodeName("n2"),)
    assert free_capacity(snap, ledger)[NodeName("n1")].whole_free == 0


def test_many_shares_charged_at_once_pack_as_one_by_one_best_fit_would() -> None:
    # Other gangs' reservations are charged as "left" pods of one shape in one call: 16
    # quarter-GPU shares on 8 devices fill 4 devices, not every device a little.
    cap = NodeCapacity(free=EMPTY, devices=(DEVICE,) * 8)
    packed = take(cap, Demand(scalar=EMPTY, share=250), 16, force=True)
    assert packed.devices == (0, 0, 0, 0, DEVICE, DEVICE, DEVICE, DEVICE)
    assert not packed.unpacked and packed.whole_free == 4


def test_a_billion_gpu_pod_on_the_largest_modelled_node_is_charged_in_milliseconds() -> None:
    cap = NodeCapacity(free=EMPTY, devices=(DEVICE,) * MAX_DEVICES)
    after, seconds = _timed(lambda: take(cap, Demand(scalar=EMPTY, whole=BILLION), 1,
                                         force=True))
    assert seconds < 0.1
    assert sum(after.devices) == MAX_DEVICES * DEVICE - BILLION * DEVICE
