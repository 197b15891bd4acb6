"""The ledger: reservations with deadlines, pods in flight, and rebuilding after a restart."""

from __future__ import annotations

from extender.core.gang.capacity import index_of
from extender.core.gang.ledger import Ledger, free_capacity
from extender.core.gang.placement import plan_gang
from extender.core.gang.plans import Plan
from extender.core.model.values import NodeName
from tests.unit.core.builders import make_gang, make_node, make_pod, make_shape, make_snapshot, uid

NODES = [make_node("n1", gpus=8), make_node("n2", gpus=8)]


def _plan(gang, snap) -> Plan:  # type: ignore[no-untyped-def]
    plan = plan_gang(gang, snapshot=snap, capacity=index_of(snap).base)
    assert isinstance(plan, Plan)
    return plan


def test_reservations_are_charged_until_their_deadline_then_expire() -> None:
    gang = make_gang("g", roles=[("worker", 1, make_shape(gpus=8))])
    snap = make_snapshot(NODES, gangs=[gang])
    ledger = Ledger()
    ledger.reserve(_plan(gang, snap), now=10, ttl=5)
    assert sum(c.whole_free for c in free_capacity(snap, ledger).values()) == 8
    assert ledger.expire(14.9) == []
    assert ledger.expire(15.0) == [gang.key]
    assert ledger.plan_for(gang.key) is None
    assert sum(c.whole_free for c in free_capacity(snap, ledger).values()) == 16


def test_a_reservation_shrinks_as_its_members_arrive_so_nothing_is_counted_twice() -> None:
    gang = make_gang("g", roles=[("worker", 2, make_shape(gpus=4))])
    snap = make_snapshot(NODES, gangs=[gang])
    ledger = Ledger()
    plan = _plan(gang, snap)
    ledger.reserve(plan, now=0, ttl=30)
    node = plan.slots[0][0]
    before = free_capacity(snap, ledger)[node].whole_free
    ledger.mark_bind_requested(uid(gang, "worker", 0), node, now=1)
    assert free_capacity(snap, ledger)[node].whole_free == before


def test_in_flight_pods_are_charged_until_observed_and_then_by_the_snapshot_only() -> None:
    pod = make_pod("p", shape=make_shape(gpus=3))
    snap = make_snapshot(NODES, pods=[pod])
    ledger = Ledger()
    ledger.mark_bind_requested(pod.uid, NodeName("n1"), now=0)
    assert free_capacity(snap, ledger)["n1"].whole_free == 5
    observed = make_snapshot(NODES, pods=[make_pod("p", shape=make_shape(gpus=3), node="n1")])
    assert free_capacity(observed, ledger)["n1"].whole_free == 5  # not 2
    ledger.confirm_bound(pod.uid, NodeName("n1"))
    assert ledger.in_flight() == {}


def test_stale_in_flight_pods_are_forgotten() -> None:
    ledger = Ledger()
    ledger.mark_bind_requested("u", NodeName("n1"), now=0, ttl=10)
    ledger.expire(10)
    assert ledger.in_flight() == {}


def test_rebuild_plans_the_rest_of_a_gang_left_half_bound_by_a_crash() -> None:
    gang = make_gang("g", roles=[("worker", 3, make_shape(gpus=8))])
    third = make_node("n3", gpus=8)
    snap = make_snapshot([*NODES, third], gangs=[gang], bound={"g-worker-0": "n1"})
    ledger = Ledger()
    ledger.rebuild(snap, now=100, ttl=30)
    plan = ledger.plan_for(gang.key)
    assert plan is not None and plan.pods == 2
    assert {n for n, _, _ in plan.slots} == {"n2", "n3"}
    assert ledger.is_admitted(gang.key)
    reservation = ledger.reservation(gang.key)
    assert reservation is not None and reservation.deadline == 130


def test_rebuild_leaves_untouched_gangs_unplanned() -> None:
    gang = make_gang("g", roles=[("worker", 1, make_shape(gpus=8))])
    ledger = Ledger()
    ledger.rebuild(make_snapshot(NODES, gangs=[gang]), now=0, ttl=30)
    assert ledger.plan_for(gang.key) is None and not ledger.is_admitted(gang.key)
