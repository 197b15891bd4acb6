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

from .builders import make_gang, make_node, make_pod, make_shape, make_snapshot, uid

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


def test_a_member_whose_planned_node_still_has_room_stays_pinned_to_it() -> None:
    gang = make_gang("g", roles=[("worker", 2, make_shape(gpus=4))])
    ledger = Ledger()
    names = [NodeName(n.name) for n in NODES]
    snap = make_snapshot(NODES, gangs=[gang])
    first = decide_filter(snap.pods[uid(gang, "worker", 0)], names, snapshot=snap,
                          ledger=ledger, now=0.0, settings=SETTINGS)
    assert first.plan is not None
    slots = {n for n, _, _ in first.plan.slots}
    # A 4-GPU squatter leaves the planned node room for the member's 4 GPUs.
    squatter = make_pod("squatter", shape=make_shape(gpus=4), node=sorted(slots)[0], ns="o")
    after = make_snapshot(NODES, gangs=[gang], pods=[squatter])
    second = decide_filter(after.pods[uid(gang, "worker", 1)], names, snapshot=after,
                           ledger=ledger, now=1.0, settings=SETTINGS)
    assert second.outcome is FilterOutcome.PINNED and set(second.passed) <= slots
