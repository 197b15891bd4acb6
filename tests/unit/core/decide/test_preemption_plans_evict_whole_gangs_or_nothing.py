"""The preemption plan of a whole gang: the fewest, lowest-priority whole units, or none."""

from __future__ import annotations

from dataclasses import replace

from extender.core.decide.effects import Emit, Evict, Requeue
from extender.core.decide.preemption import plan_preemption
from extender.core.decide.session import GangSession
from extender.core.decide.settings import CoreSettings
from extender.core.gang.ledger import Ledger
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, NodeName
from tests.unit.core.builders import (
    gang_pods,
    make_gang,
    make_node,
    make_pod,
    make_shape,
    make_snapshot,
    tree_of,
)

SETTINGS = CoreSettings(plan_ttl=30, bind_timeout=30)
FOUR = [make_node(f"n{i}", gpus=8) for i in range(4)]


def _low(name: str, nodes: list[str], priority: int = 0) -> tuple[Gang, dict[str, str]]:
    """A gang of one 8-GPU worker per node, bound there."""
    gang = make_gang(name, roles=[("w", len(nodes), make_shape(gpus=8, priority=priority))],
                     priority=priority)
    return gang, {f"{name}-w-{i}": n for i, n in enumerate(nodes)}


def _cluster(*victims: tuple[Gang, dict[str, str]], high: Gang, pods=()):  # type: ignore[no-untyped-def]
    bound = {k: v for _, b in victims for k, v in b.items()}
    return make_snapshot(FOUR, gangs=[g for g, _ in victims] + [high], pods=pods, bound=bound)


def test_the_plan_evicts_the_lowest_priority_whole_gangs_that_make_room_and_no_more() -> None:
    a, b, c = _low("a", ["n0", "n1"], 1), _low("b", ["n2"], 0), _low("c", ["n3"], 2)
    high = make_gang("high", roles=[("w", 3, make_shape(gpus=8, priority=100))], priority=100)
    snap = _cluster(a, b, c, high=high)
    plan = plan_preemption(high, snapshot=snap, ledger=Ledger(), settings=SETTINGS, now=5)
    assert plan is not None
    # b (priority 0) and a (priority 1, two nodes) free 3 nodes; c (priority 2) is spared.
    assert sorted(v.key for v in plan.victims) == ["ml/a", "ml/b"]
    assert plan.pods() == {"uid-ml-a-w-0", "uid-ml-a-w-1", "uid-ml-b-w-0"}
    assert plan.pods_on("n1") == ("uid-ml-a-w-1",) and plan.deadline == 35
    assert plan.placement.pods == 3


def test_victims_already_chosen_but_not_needed_are_dropped_again() -> None:
    # The greedy takes the lone pod (priority 0) first, but its node keeps a pod the gang may
    # not evict; once b goes, the lone pod is not needed and is spared.
    lone = make_pod("lone", shape=make_shape(gpus=4, priority=0), node="n0")
    keeper = make_pod("keeper", shape=make_shape(gpus=4, priority=50), node="n0")
    b = _low("b", ["n1"], 1)
    full = [_low(n, [f"n{i}"], 50) for i, n in ((2, "c"), (3, "d"))]
    high = make_gang("high", roles=[("w", 1, make_shape(gpus=8, priority=10))], priority=10)
    snap = _cluster(b, *full, high=high, pods=[lone, keeper])
    plan = plan_preemption(high, snapshot=snap, ledger=Ledger(), settings=SETTINGS, now=0)
    assert plan is not None and [v.key for v in plan.victims] == ["ml/b"]
    assert plan.placement.slots == (("n1", "w", 1),)


def _plan_on_full_cluster(victim_priority: int, high: Gang, **kw):  # type: ignore[no-untyped-def]
    """Four one-node gangs of ``victim_priority`` fill the cluster; plan for ``high``."""
    snap = _cluster(*[_low(n, [f"n{i}"], victim_priority) for i, n in enumerate("abcd")],
                    high=high)
    return plan_preemption(high, snapshot=snap, ledger=Ledger(), settings=SETTINGS, now=0, **kw)


def _high(pods: int, priority: int, *, preempts: bool = True) -> Gang:
    shape = replace(make_shape(gpus=8, priority=priority), preempts=preempts)
    return make_gang("high", roles=[("w", pods, shape)], priority=priority)


def test_no_victim_has_the_preemptors_priority_or_more_so_nothing_is_planned() -> None:
    assert _plan_on_full_cluster(100, _high(1, 100)) is None
    assert _plan_on_full_cluster(99, _high(1, 100)) is not None


def test_a_gang_larger_than_the_cluster_gets_no_plan_and_evicts_nothing() -> None:
    assert _plan_on_full_cluster(0, _high(5, 9)) is None
    assert _plan_on_full_cluster(0, _high(4, 9)) is not None


def test_a_preemptor_with_preemption_policy_never_gets_no_plan() -> None:
    assert _plan_on_full_cluster(0, _high(1, 9, preempts=False)) is None


def test_units_on_nodes_with_pdb_violations_are_chosen_last() -> None:
    plan = _plan_on_full_cluster(0, _high(1, 9), pdb_nodes={"n0", "n1", "n2"})
    assert plan is not None and [v.key for v in plan.victims] == ["ml/d"]


def test_every_members_preempt_call_evicts_only_the_plans_whole_victims_and_says_so() -> None:
    a, b, c = _low("a", ["n0", "n1"], 1), _low("b", ["n2"], 0), _low("c", ["n3"], 2)
    high = make_gang("high", roles=[("w", 3, make_shape(gpus=8, priority=100))], priority=100)
    snap = _cluster(a, b, c, high=high)
    session = GangSession(SETTINGS)
    # kube-scheduler offers each node with its own per-pod victims, c's included.
    offered = {
        NodeName("n0"): ("uid-ml-a-w-0",), NodeName("n1"): ("uid-ml-a-w-1",),
        NodeName("n2"): ("uid-ml-b-w-0",), NodeName("n3"): ("uid-ml-c-w-0",)}
    step = session.preempt(snap.pods["uid-ml-high-w-0"], offered, snapshot=snap, now=0)
    assert step.victims == {"n0": ("uid-ml-a-w-0",), "n1": ("uid-ml-a-w-1",),
                            "n2": ("uid-ml-b-w-0",)}
    [event] = [e.event for e in step.effects if isinstance(e, Emit)]
    assert event.reason == "GangPreempting" and "ml/b, ml/a" in event.message
    # Every victim pod of the plan is evicted at once, not only those of the node kube-
    # scheduler picks: a victim gang spanning nodes is never left partly running.
    [evict] = [e for e in step.effects if isinstance(e, Evict)]
    assert evict.gang == "ml/high"
    assert sorted(p.uid for p in evict.pods) == ["uid-ml-a-w-0", "uid-ml-a-w-1",
                                                 "uid-ml-b-w-0"]
    # The next member gets the same plan (kept until its deadline), not a new per-pod choice,
    # and nothing is evicted twice.
    again = session.preempt(snap.pods["uid-ml-high-w-1"], offered, snapshot=snap, now=1)
    assert again.victims == step.victims
    assert not [e for e in again.effects if isinstance(e, Evict)]


def test_a_gang_no_plan_can_fit_evicts_nothing_even_where_kube_scheduler_offers_victims() -> None:
    victims = [_low(n, [f"n{i}"], 0) for i, n in enumerate("abcd")]
    high = _high(5, 9)
    snap = _cluster(*victims, high=high)
    offered = {NodeName("n0"): ("uid-ml-a-w-0",)}
    step = GangSession(SETTINGS).preempt(snap.pods["uid-ml-high-w-0"], offered, snapshot=snap,
                                         now=0)
    assert step.victims == {}
    assert [e.event.reason for e in step.effects if isinstance(e, Emit)] == ["GangNotPreempting"]
    assert not [e for e in step.effects if isinstance(e, Evict)]


def _after_eviction() -> tuple[GangSession, Gang, Gang]:
    """The plan of ``high`` evicted a and b (n0-n2); c still runs on n3. ``late`` (priority 0,
    one 8-GPU pod) arrives and would fit in what the eviction freed."""
    a, b, c = _low("a", ["n0", "n1"], 1), _low("b", ["n2"], 0), _low("c", ["n3"], 2)
    high = make_gang("high", roles=[("w", 3, make_shape(gpus=8, priority=100))], priority=100)
    session = GangSession(SETTINGS)
    before = _cluster(a, b, c, high=high)
    offered = {NodeName("n0"): ("uid-ml-a-w-0",)}
    assert session.preempt(before.pods["uid-ml-high-w-0"], offered, snapshot=before, now=0).victims
    late = make_gang("late", roles=[("w", 1, make_shape(gpus=8, priority=0))], priority=0)
    return session, high, late


def test_the_capacity_a_preemption_frees_is_held_for_the_preemptor_not_taken_by_others() -> None:
    session, high, late = _after_eviction()
    c = _low("c", ["n3"], 2)
    after = make_snapshot(FOUR, gangs=[c[0], high, late], bound=c[1])
    nodes = list(after.nodes)
    refused = session.filter(after.pods["uid-ml-late-w-0"], nodes, snapshot=after, now=2)
    assert not refused.decision.passed
    assert "held for gang ml/high, which preempts" in refused.decision.reason
    # The preemptor itself fits in what was freed and is planned there.
    planned = session.filter(after.pods["uid-ml-high-w-0"], nodes, snapshot=after, now=3)
    assert planned.decision.passed and set(planned.decision.passed) <= {"n0", "n1", "n2"}
    assert session.ledger.holds() == [] and session.ledger.plan_for(high.key) is not None
    # Its plan now holds the capacity: the late gang still waits.
    again = session.filter(after.pods["uid-ml-late-w-0"], nodes, snapshot=after, now=4)
    assert not again.decision.passed


def test_a_hold_the_preemptor_never_uses_lapses_at_its_deadline_and_requeues_who_it_kept_off(
) -> None:
    session, high, late = _after_eviction()
    c = _low("c", ["n3"], 2)
    after = make_snapshot(FOUR, gangs=[c[0], high, late], bound=c[1])
    nodes = list(after.nodes)
    assert not session.filter(after.pods["uid-ml-late-w-0"], nodes, snapshot=after,
                              now=2).decision.passed
    early = session.tick(after, now=SETTINGS.plan_ttl - 1)
    assert not [e for e in early if isinstance(e, Requeue)] and session.ledger.holds()
    effects = session.tick(after, now=SETTINGS.plan_ttl + 1)
    [requeue] = [e for e in effects if isinstance(e, Requeue)]
    assert [p.uid for p in requeue.pods] == ["uid-ml-late-w-0"]
    assert session.ledger.holds() == []
    assert session.filter(after.pods["uid-ml-late-w-0"], nodes, snapshot=after,
                          now=SETTINGS.plan_ttl + 2).decision.passed


def test_the_preemptor_preempts_with_its_pods_admitted_priority_not_its_templates() -> None:
    """An operator's template names only ``priorityClassName``; admission writes the number
    (and ``preemptionPolicy``) into each pod. The pods' values are the preemptor's."""
    template = make_gang("high", roles=[("w", 1, make_shape(gpus=8, priority=0))], priority=0)
    victims = [_low(n, [f"n{i}"], 5) for i, n in enumerate("abcd")]
    admitted = make_snapshot(FOUR, gangs=[g for g, _ in victims],
                             bound={k: v for _, b in victims for k, v in b.items()})
    pods, members = gang_pods(template)
    as_admitted = [replace(p, shape=replace(p.shape, priority=100)) for p in pods]
    snap = ClusterSnapshot.of(FOUR, [*admitted.pods.values(), *as_admitted],
                              [*admitted.workloads.values(), tree_of(template)],
                              {**admitted.memberships, **members})
    plan = plan_preemption(template, snapshot=snap, ledger=Ledger(), settings=SETTINGS, now=0)
    assert plan is not None and plan.preemptor_priority == 100 and len(plan.victims) == 1
    never = [replace(p, shape=replace(p.shape, preempts=False)) for p in as_admitted]
    snap = ClusterSnapshot.of(FOUR, [*admitted.pods.values(), *never],
                              [*admitted.workloads.values(), tree_of(template)],
                              {**admitted.memberships, **members})
    assert plan_preemption(template, snapshot=snap, ledger=Ledger(), settings=SETTINGS,
                           now=0) is None
