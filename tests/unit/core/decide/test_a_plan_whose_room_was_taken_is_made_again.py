"""A planned member whose slots' room was taken behind Muster's back is planned again at once.

A pod of another scheduler, or one bound by hand, can fill a node after a gang's plan named it.
kube-scheduler then never offers that node to the member again, and the member would fail
every filter until the plan's TTL (a minute) ran out. Its filter plans the gang again instead,
around the members already placed.
"""

from __future__ import annotations

from extender.core.decide.decisions import CoreSettings, FilterOutcome, decide_filter
from extender.core.gang.ledger import Ledger
from extender.core.model.values import NodeName
from tests.unit.core.builders import make_gang, make_node, make_pod, make_shape, make_snapshot, uid

SETTINGS = CoreSettings(plan_ttl=60, bind_timeout=3)
NODES = [make_node(f"n{i}", gpus=8) for i in range(3)]


def test_a_member_whose_planned_node_was_filled_by_hand_is_planned_again_elsewhere() -> None:
    gang = make_gang("g", roles=[("worker", 2, make_shape(gpus=8))])
    ledger = Ledger()
    names = [NodeName(n.name) for n in NODES]
    before = make_snapshot(NODES, gangs=[gang])
    first = decide_filter(before.pods[uid(gang, "worker", 0)], names, snapshot=before,
                          ledger=ledger, now=0.0, settings=SETTINGS)
    assert first.outcome is FilterOutcome.PLANNED and first.plan is not None
    planned = sorted(n for n, _, _ in first.plan.slots)
    bound = {"g-worker-0": planned[0]}
    squatter = make_pod("squatter", shape=make_shape(gpus=8), node=planned[1], ns="other")
    after = make_snapshot(NODES, gangs=[gang], pods=[squatter], bound=bound)
    second = decide_filter(after.pods[uid(gang, "worker", 1)], names, snapshot=after,
                           ledger=ledger, now=1.0, settings=SETTINGS)
    spare = next(n for n in names if n not in planned)
    assert (second.outcome, second.passed) == (FilterOutcome.PLANNED, (spare,)), second.reason


def _planned_then_squatted(squatter_gpus: int) -> tuple[FilterOutcome, set[str], set[str]]:
    """Two 2-GPU workers planned together on one node, then a pod of another scheduler
    takes ``squatter_gpus`` of that node's 8: worker 1's outcome, what it was passed, and the
    plan's nodes."""
    gang = make_gang("g", roles=[("worker", 2, make_shape(gpus=2))])
    ledger = Ledger()
    names = [NodeName(n.name) for n in NODES]
    snap = make_snapshot(NODES, gangs=[gang])
    first = decide_filter(snap.pods[uid(gang, "worker", 0)], names, snapshot=snap,
                          ledger=ledger, now=0.0, settings=SETTINGS)
    assert first.plan is not None
    slots = {n for n, _, _ in first.plan.slots}
    assert len(slots) == 1
    squatter = make_pod("squatter", shape=make_shape(gpus=squatter_gpus),
                        node=sorted(slots)[0], ns="o")
    after = make_snapshot(NODES, gangs=[gang], pods=[squatter])
    second = decide_filter(after.pods[uid(gang, "worker", 1)], names, snapshot=after,
                           ledger=ledger, now=1.0, settings=SETTINGS)
    return second.outcome, set(second.passed), slots


def test_a_member_whose_planned_node_still_has_room_stays_pinned_to_it() -> None:
    # 4 of 8 GPUs taken: the node still holds both planned workers.
    outcome, passed, slots = _planned_then_squatted(4)
    assert outcome is FilterOutcome.PINNED and passed <= slots


def test_a_plan_whose_node_holds_only_some_of_its_open_slots_is_made_again() -> None:
    # 6 of 8 GPUs taken: the node holds worker 1 but not worker 0 beside it. Pinning worker
    # 1 there as planned would leave worker 0 nowhere: the gang is planned again, whole,
    # in what is free now.
    outcome, passed, _ = _planned_then_squatted(6)
    assert outcome is FilterOutcome.PLANNED and len(passed) == 1
