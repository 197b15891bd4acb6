"""Filter, prioritize, bind and preempt as kube-scheduler would call them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from extender.core.decide.decisions import (
    BindOutcome,
    CoreSettings,
    FilterOutcome,
    barrier_expired,
    decide_bind,
    decide_filter,
    decide_preempt,
    decide_prioritize,
    expired_barriers,
    withdraw,
)
from extender.core.gang.ledger import Ledger
from extender.core.gang.scoring import UnknownPolicyError
from extender.core.model.values import NodeName, PodPhase
from tests.unit.core.builders import make_gang, make_node, make_pod, make_shape, make_snapshot, uid

SETTINGS = CoreSettings(plan_ttl=30, bind_timeout=30)
TWO_BY_EIGHT = [make_node("n1", gpus=8), make_node("n2", gpus=8)]
ALL = [NodeName("n1"), NodeName("n2")]


def _filter(snap, ledger, pod_uid, now=0.0, candidates=ALL):  # type: ignore[no-untyped-def]
    return decide_filter(snap.pods[pod_uid], candidates, snapshot=snap, ledger=ledger, now=now,
                         settings=SETTINGS)


def _bound(snap, binds):  # type: ignore[no-untyped-def]
    """The snapshot after the given (uid, node) binds are observed."""
    pods = [replace(p, node_name=dict(binds).get(p.uid, p.node_name),
                    phase=PodPhase.RUNNING if p.uid in dict(binds) else p.phase)
            for p in snap.pods.values()]
    return type(snap).of(snap.nodes.values(), pods, snap.workloads.values(), snap.memberships)


def test_interleaved_gangs_end_with_one_placed_and_the_other_waiting() -> None:
    """scheduler-plugins#117: two gangs of 4 x 4 GPUs on 2 x 8-GPU nodes, members interleaved."""
    a = make_gang("a", roles=[("worker", 4, make_shape(gpus=4))], created=1.0)
    b = make_gang("b", roles=[("worker", 4, make_shape(gpus=4))], created=2.0)
    snap = make_snapshot(TWO_BY_EIGHT, gangs=[a, b])
    ledger = Ledger()
    outcomes = []
    binds: list[tuple[str, NodeName]] = []
    for i in range(4):
        for gang in (a, b):
            pod = uid(gang, "worker", i)
            decision = _filter(snap, ledger, pod, now=float(i))
            outcomes.append((gang.key, decision.outcome))
            if decision.passed:
                bind = decide_bind(pod, decision.passed[0], snapshot=snap, ledger=ledger,
                                   now=float(i), settings=SETTINGS)
                binds.extend(bind.release)
    assert outcomes[0] == ("ml/a", FilterOutcome.PLANNED)
    assert {o for g, o in outcomes if g == "ml/b"} == {FilterOutcome.WAITING}
    assert sorted(u for u, _ in binds) == sorted(uid(a, "worker", i) for i in range(4))
    per_node = {n: sum(1 for _, m in binds if m == n) for n in ALL}
    assert per_node == {"n1": 2, "n2": 2}
    b_reason = _filter(snap, ledger, uid(b, "worker", 0), now=4.0).reason
    # The GPUs are not used by anything running: a's pods hold them between bind and Binding.
    assert b_reason == ("gang ml/b: 0 of 4 pods fit; a worker needs 4 nvidia.com/gpu on one "
                        "node, the largest free is 0; 16 GPUs on n1, n2 are held by 4 pods of "
                        "gang ml/a in flight at bind")


def test_planned_members_are_pinned_to_their_nodes_only() -> None:
    gang = make_gang("g", roles=[("worker", 2, make_shape(gpus=8))])
    snap = make_snapshot(TWO_BY_EIGHT, gangs=[gang])
    ledger = Ledger()
    first = _filter(snap, ledger, uid(gang, "worker", 0))
    # One planned node, claimed: kube-scheduler binds there without scoring.
    assert first.outcome is FilterOutcome.PLANNED and first.passed == ("n1",)
    assert first.plan is not None and {n for n, _, _ in first.plan.slots} == {"n1", "n2"}
    decide_bind(uid(gang, "worker", 0), NodeName("n1"), snapshot=snap, ledger=ledger, now=1,
                settings=SETTINGS)
    second = _filter(snap, ledger, uid(gang, "worker", 1), now=1)
    assert second.outcome is FilterOutcome.PINNED
    assert second.passed == ("n2",)
    # Only the passed node matters to kube-scheduler; reasons for the rest cost time only.
    assert not second.unresolvable
    # Offered none of its planned nodes, the member fails them all, saying why.
    offered = _filter(snap, ledger, uid(gang, "worker", 1), now=1, candidates=("n1",))
    assert offered.passed == ()
    assert "elsewhere (reserved plan)" in offered.unresolvable["n1"]


def test_a_non_gang_pod_is_kept_off_reserved_capacity_only() -> None:
    gang = make_gang("g", roles=[("worker", 1, make_shape(gpus=8))])
    loner = make_pod("web", shape=make_shape(gpus=1))
    snap = make_snapshot(TWO_BY_EIGHT, gangs=[gang], pods=[loner])
    ledger = Ledger()
    planned = _filter(snap, ledger, uid(gang, "worker", 0))
    reserved = planned.passed[0]
    other = "n2" if reserved == "n1" else "n1"
    decision = _filter(snap, ledger, loner.uid)
    assert decision.outcome is FilterOutcome.NON_GANG
    assert decision.passed == (other,)
    # Unresolvable: preempting pods there would not free a reservation.
    assert decision.unresolvable[reserved] == f"capacity on {reserved} is reserved for gang ml/g"


def test_the_barrier_holds_members_until_the_minimum_arrives_then_releases_all() -> None:
    gang = make_gang("g", roles=[("worker", 3, make_shape(gpus=4))], minimum={"worker": 2})
    snap = make_snapshot(TWO_BY_EIGHT, gangs=[gang])
    ledger = Ledger()
    _filter(snap, ledger, uid(gang, "worker", 0))
    first = decide_bind(uid(gang, "worker", 0), NodeName("n1"), snapshot=snap, ledger=ledger,
                        now=1, settings=SETTINGS)
    assert first.outcome is BindOutcome.WAIT and first.release == ()
    second = decide_bind(uid(gang, "worker", 1), NodeName("n1"), snapshot=snap, ledger=ledger,
                         now=2, settings=SETTINGS)
    assert second.outcome is BindOutcome.BIND
    assert second.release == ((uid(gang, "worker", 0), "n1"), (uid(gang, "worker", 1), "n1"))
    # The reason a bound gang keeps (its Gang object, describe) says it is bound.
    assert second.reason == "gang ml/g: 2 of minimum 2 at bind; bound whole"
    late = decide_bind(uid(gang, "worker", 2), NodeName("n2"), snapshot=snap, ledger=ledger,
                       now=3, settings=SETTINGS)
    assert late.outcome is BindOutcome.BIND and late.release == ((uid(gang, "worker", 2), "n2"),)


def test_a_barrier_past_its_timeout_fails_every_held_member_and_frees_the_plan() -> None:
    gang = make_gang("g", roles=[("worker", 2, make_shape(gpus=8))])
    snap = make_snapshot(TWO_BY_EIGHT, gangs=[gang])
    ledger = Ledger()
    _filter(snap, ledger, uid(gang, "worker", 0))
    decide_bind(uid(gang, "worker", 0), NodeName("n1"), snapshot=snap, ledger=ledger, now=0,
                settings=SETTINGS)
    assert not barrier_expired(gang.key, ledger=ledger, now=29.9, settings=SETTINGS)
    assert expired_barriers(ledger=ledger, now=30.0, settings=SETTINGS) == [gang.key]
    out = withdraw(gang.key, ledger=ledger)
    assert out.outcome is BindOutcome.REJECT
    assert out.rejected == ((uid(gang, "worker", 0), "n1"),)
    assert ledger.plan_for(gang.key) is None
    assert ledger.in_flight() == {}


def test_the_barrier_waits_while_members_keep_coming_and_fails_when_the_next_does_not() -> None:
    # A large gang behind a busy scheduler queue: members reach bind 20 s apart, more than the
    # 30 s timeout in all. Each new member restarts the barrier's clock; a retry does not.
    gang = make_gang("g", roles=[("worker", 4, make_shape(gpus=4))])
    snap = make_snapshot(TWO_BY_EIGHT, gangs=[gang])
    ledger = Ledger()
    _filter(snap, ledger, uid(gang, "worker", 0))

    def bind(i: int, node: str, now: float) -> BindOutcome:
        return decide_bind(uid(gang, "worker", i), NodeName(node), snapshot=snap, ledger=ledger,
                           now=now, settings=SETTINGS).outcome

    assert bind(0, "n1", now=0) is BindOutcome.WAIT
    assert bind(1, "n1", now=20) is BindOutcome.WAIT
    assert bind(0, "n1", now=35) is BindOutcome.WAIT  # a retry, not progress
    assert ledger.barrier_started(gang.key) == 20
    assert not barrier_expired(gang.key, ledger=ledger, now=39.9, settings=SETTINGS)
    assert bind(2, "n2", now=40) is BindOutcome.WAIT
    assert expired_barriers(ledger=ledger, now=69.9, settings=SETTINGS) == []
    assert bind(3, "n2", now=60) is BindOutcome.BIND  # 60 s after the first, all released
    # The next member not coming within the timeout fails the barrier, as before.
    other = make_gang("h", roles=[("worker", 2, make_shape(gpus=8))])
    snap = make_snapshot(TWO_BY_EIGHT, gangs=[other])
    ledger = Ledger()
    _filter(snap, ledger, uid(other, "worker", 0))
    decide_bind(uid(other, "worker", 0), NodeName("n1"), snapshot=snap, ledger=ledger, now=0,
                settings=SETTINGS)
    decide_bind(uid(other, "worker", 0), NodeName("n1"), snapshot=snap, ledger=ledger, now=20,
                settings=SETTINGS)
    assert expired_barriers(ledger=ledger, now=30, settings=SETTINGS) == [other.key]


def test_a_member_sent_onto_its_plan_restarts_the_barriers_clock_as_one_at_bind_does() -> None:
    # With claims, a member passes filter, then waits for kube-scheduler's PreBind to write
    # its claims before its bind comes: on a busy API server, seconds. Its filter is progress.
    gang = make_gang("g", roles=[("worker", 2, make_shape(gpus=8))])
    snap = make_snapshot(TWO_BY_EIGHT, gangs=[gang])
    ledger = Ledger()
    _filter(snap, ledger, uid(gang, "worker", 0))
    decide_bind(uid(gang, "worker", 0), NodeName("n1"), snapshot=snap, ledger=ledger, now=0,
                settings=SETTINGS)
    sent = _filter(snap, ledger, uid(gang, "worker", 1), now=25.0)
    assert sent.outcome is FilterOutcome.PINNED and sent.passed == ("n2",)
    assert ledger.barrier_started(gang.key) == 25.0
    _filter(snap, ledger, uid(gang, "worker", 1), now=50.0)  # a retry: not progress
    assert not barrier_expired(gang.key, ledger=ledger, now=54.9, settings=SETTINGS)
    assert expired_barriers(ledger=ledger, now=55.0, settings=SETTINGS) == [gang.key]


def test_bind_verifies_the_pod_and_is_idempotent_for_bound_pods() -> None:
    pod = make_pod("p", shape=make_shape(gpus=1), node="n1")
    snap = make_snapshot(TWO_BY_EIGHT, pods=[pod])
    ledger = Ledger()
    kw = {"snapshot": snap, "ledger": ledger, "now": 0.0, "settings": SETTINGS}
    assert decide_bind("nope", NodeName("n1"), **kw).outcome is BindOutcome.REJECT  # type: ignore[arg-type]
    same = decide_bind(pod.uid, NodeName("n1"), **kw)  # type: ignore[arg-type]
    assert same.outcome is BindOutcome.BIND and same.release == ()
    assert decide_bind(pod.uid, NodeName("n2"), **kw).outcome is BindOutcome.REJECT  # type: ignore[arg-type]


def test_a_gang_that_could_never_fit_is_rejected_as_unresolvable() -> None:
    gang = make_gang("g", roles=[("worker", 1, make_shape(gpus=16))])
    snap = make_snapshot(TWO_BY_EIGHT, gangs=[gang])
    decision = _filter(snap, Ledger(), uid(gang, "worker", 0))
    assert decision.outcome is FilterOutcome.REJECTED
    assert set(decision.unresolvable) == set(ALL) and not decision.passed


def test_expired_plans_stop_reserving_capacity() -> None:
    gang = make_gang("g", roles=[("worker", 2, make_shape(gpus=8))])
    loner = make_pod("web", shape=make_shape(gpus=8))
    snap = make_snapshot(TWO_BY_EIGHT, gangs=[gang], pods=[loner])
    ledger = Ledger()
    _filter(snap, ledger, uid(gang, "worker", 0), now=0)
    assert _filter(snap, ledger, loner.uid, now=29).passed == ()
    assert _filter(snap, ledger, loner.uid, now=30).passed == ("n1", "n2")


def test_prioritize_scores_planned_nodes_highest() -> None:
    gang = make_gang("g", roles=[("worker", 1, make_shape(gpus=8))])
    snap = make_snapshot(TWO_BY_EIGHT, gangs=[gang])
    ledger = Ledger()
    planned = _filter(snap, ledger, uid(gang, "worker", 0)).passed
    scores = dict(decide_prioritize(snap.pods[uid(gang, "worker", 0)], ALL, snapshot=snap,
                                    ledger=ledger, now=0, settings=SETTINGS))
    assert scores[planned[0]] == 10
    assert sorted(scores.values()) == [0, 10]


def test_prioritize_packs_non_gang_pods_onto_the_fuller_node() -> None:
    busy = make_pod("busy", shape=make_shape(gpus=4), node="n2")
    pod = make_pod("p", shape=make_shape(gpus=2))
    snap = make_snapshot(TWO_BY_EIGHT, pods=[busy, pod])
    scores = dict(decide_prioritize(pod, ALL, snapshot=snap, ledger=Ledger(), now=0,
                                    settings=SETTINGS))
    assert scores["n2"] > scores["n1"]
    assert all(0 <= s <= 10 for s in scores.values())


def test_preemption_takes_whole_gangs_or_no_gang_member() -> None:
    victim_gang = make_gang("v", roles=[("worker", 2, make_shape(gpus=4))])
    spanning = make_gang("s", roles=[("worker", 2, make_shape(gpus=4))])
    bound = {"v-worker-0": "n1", "v-worker-1": "n1", "s-worker-0": "n2", "s-worker-1": "n1"}
    plain = make_pod("plain", shape=make_shape(gpus=1), node="n2")
    pod = make_pod("hi", shape=make_shape(gpus=8, priority=100))
    snap = make_snapshot(TWO_BY_EIGHT, gangs=[victim_gang, spanning], pods=[plain, pod],
                         bound=bound)
    out = decide_preempt(pod, {NodeName("n1"): [uid(victim_gang, "worker", 0)],
                               NodeName("n2"): [plain.uid, uid(spanning, "worker", 0)]},
                         snapshot=snap, ledger=Ledger(), settings=SETTINGS)
    assert out == {"n1": (uid(victim_gang, "worker", 0), uid(victim_gang, "worker", 1))}
    only_plain = decide_preempt(pod, {NodeName("n2"): [plain.uid]}, snapshot=snap,
                                ledger=Ledger(), settings=SETTINGS)
    assert only_plain == {"n2": (plain.uid,)}


def test_settings_name_what_is_wrong() -> None:
    with pytest.raises(UnknownPolicyError, match="unknown scoring policy 'pack'; known: binpack"):
        CoreSettings(scoring="pack")
    with pytest.raises(ValueError, match="plan_ttl must be positive"):
        CoreSettings(plan_ttl=0)


def test_several_gangs_compete_and_the_first_planned_keeps_its_capacity() -> None:
    a = make_gang("a", roles=[("worker", 1, make_shape(gpus=8))])
    b = make_gang("b", roles=[("worker", 1, make_shape(gpus=8))])
    c = make_gang("c", roles=[("worker", 1, make_shape(gpus=8))])
    snap = make_snapshot(TWO_BY_EIGHT, gangs=[a, b, c])
    ledger = Ledger()
    results = [_filter(snap, ledger, uid(g, "worker", 0)).outcome for g in (a, b, c)]
    assert results == [FilterOutcome.PLANNED, FilterOutcome.PLANNED, FilterOutcome.WAITING]
    observed = _bound(snap, [(uid(a, "worker", 0), ledger.plan_for(a.key).slots[0][0])])  # type: ignore[union-attr]
    ledger.confirm_bound(uid(a, "worker", 0), NodeName("n1"))
    assert _filter(observed, ledger, uid(c, "worker", 0)).outcome is FilterOutcome.WAITING


def test_a_plan_lives_while_new_members_keep_arriving_and_expires_when_they_stop() -> None:
    # A slow scheduler queue: members reach filter 20 s apart, 60 s in all, past the 30 s
    # plan TTL. Each new member is progress and keeps the plan; a retry is not.
    gang = make_gang("g", roles=[("worker", 4, make_shape(gpus=4))])
    snap = make_snapshot(TWO_BY_EIGHT, gangs=[gang])
    ledger = Ledger()
    assert _filter(snap, ledger, uid(gang, "worker", 0), now=0).outcome is FilterOutcome.PLANNED
    for i, now in ((1, 20.0), (2, 40.0), (3, 55.0)):
        decision = _filter(snap, ledger, uid(gang, "worker", i), now=now)
        assert decision.outcome is FilterOutcome.PINNED, (i, decision.reason)
    _filter(snap, ledger, uid(gang, "worker", 3), now=80)  # a retry: no longer than 55 + 30
    reservation = ledger.reservation(gang.key)
    assert reservation is not None and reservation.deadline == 85
    # Reaching bind is progress too, once per member.
    assert decide_bind(uid(gang, "worker", 0), NodeName("n1"), snapshot=snap, ledger=ledger,
                       now=84, settings=SETTINGS).outcome is BindOutcome.WAIT
    assert ledger.reservation(gang.key).deadline == 114  # type: ignore[union-attr]
    ledger.expire(114)
    assert ledger.plan_for(gang.key) is None
