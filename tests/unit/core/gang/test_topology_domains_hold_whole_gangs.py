"""Placement by domain: a required gang lands in one domain that holds it whole, says which
domains were tried and why each failed, and exclusive gangs keep their domain to themselves."""

from __future__ import annotations

from extender.core.decide.decisions import BindOutcome, FilterOutcome, decide_bind, decide_filter
from extender.core.decide.settings import CoreSettings
from extender.core.gang.ledger import Ledger
from extender.core.model.values import NodeName, TopologyConstraint
from tests.unit.core.builders import make_gang, make_node, make_pod, make_shape, make_snapshot, uid

# Two racks of two 8-GPU nodes.
RACKS = [make_node(f"{r}{i}", gpus=8, labels={"rack": r}) for r in "xy" for i in range(2)]
NAMES = [n.name for n in RACKS]
EXCLUSIVE = TopologyConstraint("rack", required=True, exclusive=True)


def _filter(snap, gang, ledger, role="worker", i=0):  # type: ignore[no-untyped-def]
    return decide_filter(snap.pods[uid(gang, role, i)], NAMES, snapshot=snap, ledger=ledger,
                         now=0, settings=CoreSettings())


def test_a_required_gang_that_no_rack_holds_waits_naming_each_rack_and_its_largest_free() -> None:
    busy = [make_pod("x0-busy", shape=make_shape(gpus=6), node="x0", ns="other"),
            make_pod("y1-busy", shape=make_shape(gpus=4), node="y1", ns="other")]
    gang = make_gang("g", roles=[("worker", 2, make_shape(gpus=8))],
                     topology=TopologyConstraint("rack", required=True))
    snap = make_snapshot(RACKS, gangs=[gang], pods=busy)
    decision = _filter(snap, gang, Ledger())
    assert decision.outcome is FilterOutcome.WAITING and decision.passed == ()
    # Two whole 8-GPU nodes are free in the cluster (x1, y0), but in different racks.
    assert decision.reason == (
        "gang ml/g: no single rack domain holds it; the best, x, fits 1 of 2 pods; the worker "
        "pod left needs 8 nvidia.com/gpu on one node, the largest free is 2 once those that "
        "fit are placed. Domains tried: x: 1 of 2 fit, the worker pod left needs 8 "
        "nvidia.com/gpu on one node, the largest free is 2 once those that fit are placed; y: "
        "1 of 2 fit, the worker pod left needs 8 nvidia.com/gpu on one node, the largest free "
        "is 4 once those that fit are placed; held by other/x0-busy (6 GPUs on x0) and "
        "other/y1-busy (4 on y1)")


def test_a_required_gang_that_fits_one_rack_is_planned_whole_inside_it() -> None:
    busy = [make_pod("x0-busy", shape=make_shape(gpus=2), node="x0", ns="other")]
    gang = make_gang("g", roles=[("worker", 3, make_shape(gpus=4))],
                     topology=TopologyConstraint("rack", required=True))
    snap = make_snapshot(RACKS, gangs=[gang], pods=busy)
    ledger = Ledger()
    _filter(snap, gang, ledger)
    plan = ledger.plan_for(gang.key)
    assert plan is not None and plan.required == 3
    assert {n[0] for n, _, _ in plan.slots} == {plan.domain}  # all on x* or all on y*


def test_an_exclusive_gang_skips_the_fuller_rack_another_gang_runs_in() -> None:
    other = make_gang("other", roles=[("worker", 1, make_shape(gpus=4))])
    gang = make_gang("g", roles=[("worker", 2, make_shape(gpus=4))], topology=EXCLUSIVE)
    snap = make_snapshot(RACKS, gangs=[other, gang], bound={"other-worker-0": "x0"})
    ledger = Ledger()
    decision = _filter(snap, gang, ledger)
    assert decision.outcome is FilterOutcome.PLANNED
    plan = ledger.plan_for(gang.key)
    # Binpack alone would choose rack x (fuller); exclusivity leaves it to the other gang.
    assert plan is not None and plan.domain == "y"


def test_an_exclusive_gang_waits_when_every_rack_holds_another_gang_and_says_so() -> None:
    a = make_gang("a", roles=[("worker", 1, make_shape(gpus=1))])
    b = make_gang("b", roles=[("worker", 1, make_shape(gpus=1))])
    gang = make_gang("g", roles=[("worker", 1, make_shape(gpus=4))], topology=EXCLUSIVE)
    snap = make_snapshot(RACKS, gangs=[a, b, gang],
                         bound={"a-worker-0": "x1", "b-worker-0": "y0"})
    decision = _filter(snap, gang, Ledger())
    assert decision.outcome is FilterOutcome.WAITING
    assert decision.reason == ("gang ml/g: every rack domain is taken: x (gang ml/a is there); "
                               "y (gang ml/b is there); held by ml/a (1 GPU on x1) and ml/b "
                               "(1 on y0)")


def test_no_other_gang_is_planned_into_the_rack_an_exclusive_gang_holds() -> None:
    held = make_gang("held", roles=[("worker", 1, make_shape(gpus=2))], topology=EXCLUSIVE)
    gang = make_gang("g", roles=[("worker", 2, make_shape(gpus=8))])
    snap = make_snapshot(RACKS, gangs=[held, gang], bound={"held-worker-0": "y0"})
    ledger = Ledger()
    _filter(snap, gang, ledger)
    plan = ledger.plan_for(gang.key)
    # y1 is empty and large enough, but it is in the rack the exclusive gang holds.
    assert plan is not None and {n for n, _, _ in plan.slots} == {"x0", "x1"}
    bigger = make_gang("big", roles=[("worker", 3, make_shape(gpus=8))])
    snap = make_snapshot(RACKS, gangs=[held, bigger], bound={"held-worker-0": "y0"})
    decision = _filter(snap, bigger, Ledger())
    assert decision.outcome is FilterOutcome.WAITING
    assert decision.reason.endswith("(2 nodes are in a domain an exclusive gang holds); held by "
                                    "ml/held (2 GPUs on y0)")


def test_a_planned_exclusive_gang_holds_its_rack_before_any_pod_binds() -> None:
    gang = make_gang("g", roles=[("worker", 1, make_shape(gpus=1))], topology=EXCLUSIVE)
    late = make_gang("late", roles=[("worker", 1, make_shape(gpus=1))])
    snap = make_snapshot(RACKS, gangs=[gang, late])
    ledger = Ledger()
    _filter(snap, gang, ledger)
    held = ledger.plan_for(gang.key)
    assert held is not None and held.domain is not None
    _filter(snap, late, ledger)
    planned = ledger.plan_for(late.key)
    assert planned is not None
    assert all(not n.startswith(held.domain) for n, _, _ in planned.slots)


def test_a_bind_into_a_rack_an_exclusive_gang_took_since_the_filter_is_refused() -> None:
    # g's filter passed y0, then its plan expired; the exclusive gang planned rack y meanwhile.
    gang = make_gang("g", roles=[("worker", 2, make_shape(gpus=1))])
    held = make_gang("held", roles=[("worker", 1, make_shape(gpus=1))], topology=EXCLUSIVE)
    snap = make_snapshot(RACKS, gangs=[gang, held], bound={"held-worker-0": "y1"})
    ledger = Ledger()
    decision = decide_bind(uid(gang, "worker", 0), NodeName("y0"), snapshot=snap,
                           ledger=ledger, now=0, settings=CoreSettings())
    assert decision.outcome is BindOutcome.REJECT
    assert decision.reason == ("pod ml/g-worker-0: node y0 is in a domain an exclusive gang "
                               "holds")
    assert not ledger.in_flight()
    fine = decide_bind(uid(gang, "worker", 0), NodeName("x0"), snapshot=snap, ledger=ledger,
                       now=0, settings=CoreSettings())
    assert fine.outcome is BindOutcome.WAIT


def test_an_exclusive_gangs_late_bind_into_a_rack_another_gang_came_into_is_refused() -> None:
    # The exclusive gang's filter passed y0, then its plan expired; another gang was bound in
    # rack y meanwhile. Found by the stateful property test: binding there would share it.
    gang = make_gang("g", roles=[("worker", 1, make_shape(gpus=1))], topology=EXCLUSIVE)
    other = make_gang("other", roles=[("worker", 1, make_shape(gpus=1))])
    snap = make_snapshot(RACKS, gangs=[gang, other], bound={"other-worker-0": "y1"})
    ledger = Ledger()
    decision = decide_bind(uid(gang, "worker", 0), NodeName("y0"), snapshot=snap,
                           ledger=ledger, now=0, settings=CoreSettings())
    assert decision.outcome is BindOutcome.REJECT
    assert decision.reason == ("pod ml/g-worker-0: node y0 is in rack y, which gang ml/g must "
                               "hold alone, and gang ml/other is there")
    assert not ledger.in_flight()
    fine = decide_bind(uid(gang, "worker", 0), NodeName("x0"), snapshot=snap, ledger=ledger,
                       now=0, settings=CoreSettings())
    assert fine.outcome is BindOutcome.BIND
