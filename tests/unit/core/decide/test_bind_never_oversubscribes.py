"""Bind re-checks room: a pod that passed filter earlier may have lost its place since.

Between filter and bind a plan can expire and its capacity go to another gang, or a gang can
be planned over a node a lone pod was filtered onto. Bind is the last moment to notice.
"""

from __future__ import annotations

from extender.core.decide.decisions import (
    BindOutcome,
    CoreSettings,
    FilterOutcome,
    decide_bind,
    decide_filter,
)
from extender.core.gang.ledger import Ledger, free_capacity
from extender.core.model.values import NodeName
from tests.unit.core.builders import make_gang, make_node, make_pod, make_shape, make_snapshot, uid

SETTINGS = CoreSettings(plan_ttl=30, bind_timeout=30)
ONE_GPU = [make_node("n1", gpus=1)]
N1 = NodeName("n1")


def _filter(snap, ledger, pod_uid, now):  # type: ignore[no-untyped-def]
    return decide_filter(snap.pods[pod_uid], [N1], snapshot=snap, ledger=ledger, now=now,
                         settings=SETTINGS)


def _bind(snap, ledger, pod_uid, now):  # type: ignore[no-untyped-def]
    return decide_bind(pod_uid, N1, snapshot=snap, ledger=ledger, now=now, settings=SETTINGS)


def test_a_member_whose_plan_expired_cannot_take_the_share_another_gang_was_planned() -> None:
    # The audit's reproduction: without the check both binds pass and device 0 ends at -200m.
    a = make_gang("a", roles=[("worker", 1, make_shape(share=600))])
    b = make_gang("b", roles=[("worker", 1, make_shape(share=600))])
    snap = make_snapshot(ONE_GPU, gangs=[a, b])
    ledger = Ledger()
    assert _filter(snap, ledger, uid(a, "worker", 0), now=0).outcome is FilterOutcome.PLANNED
    assert _filter(snap, ledger, uid(b, "worker", 0), now=31).outcome is FilterOutcome.PLANNED
    late = _bind(snap, ledger, uid(a, "worker", 0), now=31.5)
    assert late.outcome is BindOutcome.REJECT
    assert late.reason == ("pod ml/a-worker-0 no longer fits on n1: it needs 600m of one "
                           "nvidia.com/gpu device, the largest free device has 400m "
                           "(capacity reserved for gang ml/b)")
    assert ledger.in_flight() == {}  # the refused pod holds nothing
    assert _bind(snap, ledger, uid(b, "worker", 0), now=32).outcome is BindOutcome.BIND
    assert free_capacity(snap, ledger)[N1].oversubscribed() == {}


def test_the_gang_that_binds_first_keeps_the_device_and_the_other_is_refused() -> None:
    a = make_gang("a", roles=[("worker", 1, make_shape(share=600))])
    b = make_gang("b", roles=[("worker", 1, make_shape(share=600))])
    snap = make_snapshot(ONE_GPU, gangs=[a, b])
    ledger = Ledger()
    _filter(snap, ledger, uid(a, "worker", 0), now=0)
    _filter(snap, ledger, uid(b, "worker", 0), now=31)
    assert _bind(snap, ledger, uid(b, "worker", 0), now=32).outcome is BindOutcome.BIND
    assert _bind(snap, ledger, uid(a, "worker", 0), now=33).outcome is BindOutcome.REJECT


def test_a_lone_pod_filtered_before_a_gang_was_planned_is_refused_at_bind() -> None:
    gang = make_gang("g", roles=[("worker", 1, make_shape(share=600))])
    loner = make_pod("web", shape=make_shape(share=600))
    snap = make_snapshot(ONE_GPU, gangs=[gang], pods=[loner])
    ledger = Ledger()
    assert _filter(snap, ledger, loner.uid, now=0).passed == (N1,)
    assert _filter(snap, ledger, uid(gang, "worker", 0), now=1).outcome is FilterOutcome.PLANNED
    refused = _bind(snap, ledger, loner.uid, now=2)
    assert refused.outcome is BindOutcome.REJECT
    assert "capacity reserved for gang ml/g" in refused.reason
    assert _bind(snap, ledger, uid(gang, "worker", 0), now=3).outcome is BindOutcome.BIND


def test_whole_gpus_and_cpu_are_rechecked_too() -> None:
    nodes = [make_node("n1", gpus=8, cpu=8)]
    a = make_gang("a", roles=[("worker", 1, make_shape(gpus=8, cpu=2))])
    loner = make_pod("cpu-hog", shape=make_shape(gpus=0, cpu=8))
    snap = make_snapshot(nodes, gangs=[a], pods=[loner])
    ledger = Ledger()
    assert _filter(snap, ledger, loner.uid, now=0).passed == (N1,)
    _filter(snap, ledger, uid(a, "worker", 0), now=1)
    refused = _bind(snap, ledger, loner.uid, now=2)
    assert refused.outcome is BindOutcome.REJECT
    assert "needs cpu=8, free is cpu=6" in refused.reason


def test_members_binding_into_their_live_plan_still_pass_the_barrier() -> None:
    nodes = [make_node("n1", gpus=8)]
    gang = make_gang("g", roles=[("worker", 4, make_shape(share=500)),
                                 ("head", 1, make_shape(gpus=2))])
    snap = make_snapshot(nodes, gangs=[gang])
    ledger = Ledger()
    _filter(snap, ledger, uid(gang, "worker", 0), now=0)
    pods = [uid(gang, "worker", i) for i in range(4)] + [uid(gang, "head", 0)]
    outcomes = [_bind(snap, ledger, p, now=1).outcome for p in pods]
    assert outcomes == [BindOutcome.WAIT] * 4 + [BindOutcome.BIND]


def test_a_retried_bind_of_a_held_member_does_not_count_the_member_twice() -> None:
    gang = make_gang("g", roles=[("worker", 2, make_shape(share=500))])
    snap = make_snapshot(ONE_GPU, gangs=[gang])
    ledger = Ledger()
    _filter(snap, ledger, uid(gang, "worker", 0), now=0)
    assert _bind(snap, ledger, uid(gang, "worker", 0), now=1).outcome is BindOutcome.WAIT
    assert _bind(snap, ledger, uid(gang, "worker", 0), now=2).outcome is BindOutcome.WAIT
    assert _bind(snap, ledger, uid(gang, "worker", 1), now=3).outcome is BindOutcome.BIND


def test_shares_held_in_any_arrival_order_pack_as_the_plan_packed_them() -> None:
    # 2 devices: 600+400 on each. Charged in arrival order (400, 400 first) a naive picture
    # puts both 400s on device 0 and then has no room for the second 600.
    nodes = [make_node("n1", gpus=2)]
    gang = make_gang("g", roles=[("big", 2, make_shape(share=600)),
                                 ("small", 2, make_shape(share=400))])
    snap = make_snapshot(nodes, gangs=[gang])
    ledger = Ledger()
    _filter(snap, ledger, uid(gang, "small", 0), now=0)
    order = [uid(gang, "small", 0), uid(gang, "small", 1), uid(gang, "big", 0),
             uid(gang, "big", 1)]
    outcomes = [_bind(snap, ledger, p, now=1).outcome for p in order]
    assert outcomes == [BindOutcome.WAIT] * 3 + [BindOutcome.BIND]


def test_shares_already_on_a_node_are_packed_largest_first_before_another_is_let_in() -> None:
    # Found by the long property run: bound shares of 300, 300, 700 and 500 milli fill two
    # devices to 1800m. Charged in name order, best fit left device 0 at -100m and device 1 at
    # 300m, so one more 300m share looked as if it fitted: 2100m on 2000m of GPU.
    two = [make_node("n1", gpus=2)]
    bound = [make_pod(name, shape=make_shape(share=share), node="n1")
             for name, share in [("a", 300), ("b", 300), ("c", 700), ("d", 500)]]
    late = make_pod("e", shape=make_shape(share=300))
    snap = make_snapshot(two, pods=[*bound, late])
    ledger = Ledger()
    assert free_capacity(snap, ledger)[N1].devices == (0, 200)
    assert _bind(snap, ledger, late.uid, now=0).outcome is BindOutcome.REJECT
    assert _filter(snap, ledger, late.uid, now=0).passed == ()


def test_shares_forced_onto_a_full_device_stop_further_shares_but_listed_devices_do_not() -> None:
    # Pods listing their devices are charged there, even past full: device 1 is still free.
    two = [make_node("n1", gpus=2)]
    listed = [make_pod(name, shape=make_shape(share=600), node="n1", devices=(0,))
              for name in ("a", "b")]
    late = make_pod("late", shape=make_shape(share=300))
    snap = make_snapshot(two, pods=[*listed, late])
    assert free_capacity(snap, Ledger())[N1].devices == (-200, 1000)
    assert _filter(snap, Ledger(), late.uid, now=0).passed == (N1,)
    # Shares without devices that no order of charging packs: where another would go is
    # unknown, so none is let in, though a device shows room.
    unlisted = [make_pod(name, shape=make_shape(share=share), node="n1")
                for name, share in [("a", 700), ("b", 700), ("c", 700)]]
    snap = make_snapshot(two, pods=[*unlisted, late])
    ledger = Ledger()
    cap = free_capacity(snap, ledger)[N1]
    assert cap.unpacked and max(cap.devices) == 300
    assert _filter(snap, ledger, late.uid, now=0).passed == ()
    assert _bind(snap, ledger, late.uid, now=0).outcome is BindOutcome.REJECT


def test_free_capacity_is_kept_only_while_the_snapshot_and_the_ledger_are_unchanged() -> None:
    # Every filter asks for free capacity; it is memoised, and any change must show at once.
    snap = make_snapshot([make_node("n1", gpus=2)], pods=[make_pod("p", shape=make_shape(gpus=1))])
    ledger = Ledger()
    assert free_capacity(snap, ledger)[N1].whole_free == 2
    ledger.mark_bind_requested("uid-ml-p", N1, now=0)
    assert free_capacity(snap, ledger)[N1].whole_free == 1
    assert free_capacity(snap, ledger, without="uid-ml-p")[N1].whole_free == 2
    ledger.forget_pod("uid-ml-p")
    assert free_capacity(snap, ledger)[N1].whole_free == 2
    other = make_snapshot([make_node("n1", gpus=2)],
                          pods=[make_pod("q", shape=make_shape(gpus=2), node="n1")])
    assert free_capacity(other, ledger)[N1].whole_free == 0


def test_the_member_completing_a_gang_whose_held_member_lost_its_node_fails_it_whole() -> None:
    gang = make_gang("a", roles=[("worker", 2, make_shape(gpus=8))])
    nodes = [make_node("n1", gpus=8), make_node("n2", gpus=8)]
    snap = make_snapshot(nodes, gangs=[gang])
    ledger = Ledger()
    first = decide_filter(snap.pods[uid(gang, "worker", 0)], [N1, NodeName("n2")],
                          snapshot=snap, ledger=ledger, now=0, settings=SETTINGS)
    assert first.outcome is FilterOutcome.PLANNED
    assert first.plan is not None
    [held_on] = first.passed
    [other] = {n for n, _, _ in first.plan.slots} - {held_on}
    w0, w1 = uid(gang, "worker", 0), uid(gang, "worker", 1)
    assert decide_bind(w0, held_on, snapshot=snap, ledger=ledger, now=1,
                       settings=SETTINGS).outcome is BindOutcome.WAIT
    # The held member's node is deleted; the next snapshot no longer has it.
    without = make_snapshot([n for n in nodes if n.name != held_on], gangs=[gang])
    last = decide_bind(w1, other, snapshot=without, ledger=ledger, now=2, settings=SETTINGS)
    assert last.outcome is BindOutcome.REJECT
    assert last.reason.startswith(f"gang ml/a: node {held_on} was deleted while member "
                                  "ml/a-worker-0 was held at the bind barrier")
    assert sorted(u for u, _ in last.rejected) == [w0, w1]  # nothing of the gang binds
    assert ledger.in_flight() == {} and ledger.plan_for(gang.key) is None
