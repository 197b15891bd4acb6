"""Gangs held at the bind barrier that wait for each other: one yields, the other completes.

Two gangs of 2 x 8-GPU workers are planned on 4 nodes and each has one member held at the
barrier. Then the node each planned for its second member goes (lost, or filled by a pod
another scheduler placed). Each gang's second member now needs the node the other gang's held
member sits on: a deadlock, until one barrier times out and both fail together.
"""

from __future__ import annotations

from dataclasses import replace

from extender.core.decide.decisions import (
    BindOutcome,
    CoreSettings,
    FilterOutcome,
    decide_bind,
    decide_filter,
    withdraw,
)
from extender.core.decide.graph import blocked_gangs, deadlocks, wait_for_graph
from extender.core.decide.yields import decide_yields
from extender.core.gang.ledger import Ledger
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, NodeName
from tests.unit.core.builders import make_gang, make_node, make_pod, make_shape, make_snapshot, uid

SETTINGS = CoreSettings(plan_ttl=60, bind_timeout=60)
NODES = [make_node(f"n{i}", gpus=8) for i in range(1, 5)]


def _two_gangs(*, old_priority: int = 0, new_priority: int = 0) -> tuple[Gang, Gang]:
    old = make_gang("old", roles=[("worker", 2, make_shape(gpus=8))], created=1.0,
                    priority=old_priority)
    new = make_gang("new", roles=[("worker", 2, make_shape(gpus=8))], created=2.0,
                    priority=new_priority)
    return old, new


def _held_halfway(snap: ClusterSnapshot, ledger: Ledger, gangs: tuple[Gang, Gang],
                  ) -> dict[str, tuple[NodeName, NodeName]]:
    """Plan both gangs; bind the first member of each (held at the barrier). Returns each
    gang's (held node, node planned for its second member)."""
    out = {}
    for gang in gangs:
        first = snap.pods[uid(gang, "worker", 0)]
        decision = decide_filter(first, list(snap.nodes), snapshot=snap, ledger=ledger, now=0,
                                 settings=SETTINGS)
        assert decision.outcome is FilterOutcome.PLANNED
        plan = ledger.plan_for(gang.key)
        assert plan is not None
        held, second = plan.nodes_for("worker")
        bind = decide_bind(first.uid, held, snapshot=snap, ledger=ledger, now=1,
                           settings=SETTINGS)
        assert bind.outcome is BindOutcome.WAIT
        out[gang.key] = (held, second)
    return out


def _finish(snap: ClusterSnapshot, ledger: Ledger, gang: Gang, *, now: float) -> BindOutcome:
    second = snap.pods[uid(gang, "worker", 1)]
    decision = decide_filter(second, list(snap.nodes), snapshot=snap, ledger=ledger, now=now,
                             settings=SETTINGS)
    if not decision.passed:
        return BindOutcome.WAIT
    return decide_bind(second.uid, decision.passed[0], snapshot=snap, ledger=ledger, now=now,
                       settings=SETTINGS).outcome


def test_after_node_loss_the_younger_gang_yields_and_the_older_completes() -> None:
    gangs = _two_gangs()
    old, new = gangs
    snap = make_snapshot(NODES, gangs=list(gangs))
    ledger = Ledger()
    where = _held_halfway(snap, ledger, gangs)
    lost = {where[old.key][1], where[new.key][1]}
    after = ClusterSnapshot.of([n for n in NODES if n.name not in lost], snap.pods.values(),
                               snap.workloads.values(), snap.memberships)
    assert blocked_gangs(after, ledger) == [new.key, old.key]
    assert deadlocks(wait_for_graph(after, ledger)) == [[new.key, old.key]]

    yields = decide_yields(snapshot=after, ledger=ledger, now=5, settings=SETTINGS)
    assert [(y.gang, y.cycle) for y in yields] == [(new.key, (new.key, old.key))]
    assert yields[0].reason.startswith(
        "gang ml/new yields to end a deadlock at the bind barrier (ml/new -> ml/old -> ml/new")

    out = withdraw(new.key, ledger=ledger, reason=yields[0].reason)
    assert out.rejected == ((uid(new, "worker", 0), where[new.key][0]),)
    assert _finish(after, ledger, old, now=6) is BindOutcome.BIND  # released with its first
    assert decide_yields(snapshot=after, ledger=ledger, now=6, settings=SETTINGS) == []
    waiting = decide_filter(after.pods[uid(new, "worker", 0)], list(after.nodes),
                            snapshot=after, ledger=ledger, now=7, settings=SETTINGS)
    assert waiting.outcome is FilterOutcome.WAITING and not waiting.passed


def test_the_lower_priority_gang_yields_even_if_it_is_older() -> None:
    gangs = _two_gangs(old_priority=0, new_priority=10)
    snap = make_snapshot(NODES, gangs=list(gangs))
    ledger = Ledger()
    where = _held_halfway(snap, ledger, gangs)
    lost = {w[1] for w in where.values()}
    after = ClusterSnapshot.of([n for n in NODES if n.name not in lost], snap.pods.values(),
                               snap.workloads.values(), snap.memberships)
    assert [y.gang for y in decide_yields(snapshot=after, ledger=ledger, now=5,
                                          settings=SETTINGS)] == ["ml/old"]


def test_capacity_taken_behind_musters_back_deadlocks_the_same_way() -> None:
    gangs = _two_gangs()
    old, new = gangs
    snap = make_snapshot(NODES, gangs=list(gangs))
    ledger = Ledger()
    where = _held_halfway(snap, ledger, gangs)
    # Another scheduler fills the nodes planned for the second members.
    foreign = [make_pod(f"other-{i}", shape=make_shape(gpus=8), node=w[1], ns="batch")
               for i, w in enumerate(sorted(where.values()))]
    drifted = ClusterSnapshot.of(NODES, [*snap.pods.values(), *foreign],
                                 snap.workloads.values(), snap.memberships)
    # The second member's bind is refused there, and its gang's stale plan ends.
    second = uid(old, "worker", 1)
    refused = decide_bind(second, where[old.key][1], snapshot=drifted, ledger=ledger, now=3,
                          settings=SETTINGS)
    assert refused.outcome is BindOutcome.REJECT
    assert refused.reason.endswith("gang ml/old is planned again")
    assert ledger.plan_for(old.key) is None
    yields = decide_yields(snapshot=drifted, ledger=ledger, now=4, settings=SETTINGS)
    assert [y.gang for y in yields] == [new.key]
    withdraw(new.key, ledger=ledger, reason=yields[0].reason)
    assert _finish(drifted, ledger, old, now=5) is BindOutcome.BIND


def test_a_stuck_gang_waiting_for_one_that_can_complete_is_left_to_wait() -> None:
    # new's second node is lost: new is stuck, but old (whose plan still holds) is not, so
    # there is no cycle: old completes and new waits or times out, nobody is made to yield.
    gangs = _two_gangs()
    old, new = gangs
    snap = make_snapshot(NODES, gangs=list(gangs))
    ledger = Ledger()
    where = _held_halfway(snap, ledger, gangs)
    after = ClusterSnapshot.of([n for n in NODES if n.name != where[new.key][1]],
                               snap.pods.values(), snap.workloads.values(), snap.memberships)
    assert blocked_gangs(after, ledger) == [new.key]
    assert decide_yields(snapshot=after, ledger=ledger, now=5, settings=SETTINGS) == []
    assert _finish(after, ledger, old, now=6) is BindOutcome.BIND


def test_the_normal_interleaving_needs_no_yield() -> None:
    gangs = _two_gangs()
    snap = make_snapshot(NODES[:2], gangs=list(gangs))
    ledger = Ledger()
    for i in range(2):
        for gang in gangs:
            pod = snap.pods[uid(gang, "worker", i)]
            d = decide_filter(pod, list(snap.nodes), snapshot=snap, ledger=ledger, now=i,
                              settings=SETTINGS)
            if d.passed:
                decide_bind(pod.uid, d.passed[0], snapshot=snap, ledger=ledger, now=i,
                            settings=SETTINGS)
            assert decide_yields(snapshot=snap, ledger=ledger, now=i, settings=SETTINGS) == []


def test_bound_members_are_not_holdings_a_yield_could_free() -> None:
    # After a restart two gangs each have one member bound and no room for the second: they
    # are not at the barrier (bound pods cannot be withdrawn), so nothing yields.
    gangs = _two_gangs()
    old, new = gangs
    bound = {f"{g.key.split('/')[1]}-worker-0": f"n{i}" for i, g in enumerate(gangs, 1)}
    snap = make_snapshot(NODES[:2], gangs=list(gangs), bound=bound)
    ledger = Ledger()
    ledger.rebuild(snap, now=0, ttl=60)
    assert ledger.is_admitted(old.key) and ledger.is_admitted(new.key)
    assert decide_yields(snapshot=snap, ledger=ledger, now=1, settings=SETTINGS) == []


def test_priority_admitted_into_the_pods_counts_where_the_templates_name_only_a_class() -> None:
    """Both gangs' templates say priority 0 (an operator's template names a
    ``priorityClassName``); admission gave the new gang's pods 10. The old gang yields."""
    gangs = _two_gangs()
    snap = make_snapshot(NODES, gangs=list(gangs))
    ledger = Ledger()
    where = _held_halfway(snap, ledger, gangs)
    lost = {w[1] for w in where.values()}
    admitted = [replace(p, shape=replace(p.shape, priority=10)) if "-new-" in p.uid else p
                for p in snap.pods.values()]
    after = ClusterSnapshot.of([n for n in NODES if n.name not in lost], admitted,
                               snap.workloads.values(), snap.memberships)
    assert [y.gang for y in decide_yields(snapshot=after, ledger=ledger, now=5,
                                          settings=SETTINGS)] == ["ml/old"]
