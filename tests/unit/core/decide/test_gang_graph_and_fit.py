"""The wait-for graph (deadlocks, who yields) and fit_workload (would it start, where?)."""

from __future__ import annotations

from dataclasses import replace

from extender.core.decide.decisions import CoreSettings, decide_bind, decide_filter
from extender.core.decide.fit import fit_workload
from extender.core.decide.graph import deadlocks, wait_for_graph, yielder
from extender.core.gang.ledger import Ledger
from extender.core.gang.plans import Plan
from extender.core.model.values import GangKey, NodeName, Taint
from tests.unit.core.builders import (
    make_gang,
    make_node,
    make_pod,
    make_shape,
    make_snapshot,
    tree_of,
    uid,
)


def test_two_gangs_holding_each_others_nodes_deadlock_and_the_younger_yields() -> None:
    # Crafted after a restart-like state: each gang has one member held at the barrier on
    # one node and reserves the other node, so neither can reach its minimum.
    nodes = [make_node("n1", gpus=8), make_node("n2", gpus=8)]
    old = make_gang("old", roles=[("worker", 2, make_shape(gpus=8))], created=1.0)
    new = make_gang("new", roles=[("worker", 2, make_shape(gpus=8))], created=2.0)
    snap = make_snapshot(nodes, gangs=[old, new])
    ledger = Ledger()
    ledger.mark_bind_requested(uid(old, "worker", 0), NodeName("n1"), now=0)
    ledger.arrive(old.key, uid(old, "worker", 0), NodeName("n1"), now=0)
    ledger.mark_bind_requested(uid(new, "worker", 0), NodeName("n2"), now=0)
    ledger.arrive(new.key, uid(new, "worker", 0), NodeName("n2"), now=0)
    g = wait_for_graph(snap, ledger)
    assert deadlocks(g) == [["ml/new", "ml/old"]]
    assert yielder(deadlocks(g)[0], snap.gangs) == "ml/new"
    high = replace(new, priority=10)
    assert yielder([GangKey("ml/old"), GangKey("ml/new")], {old.key: old, new.key: high}) == (
        "ml/old")


def test_the_core_itself_never_builds_that_deadlock() -> None:
    nodes = [make_node("n1", gpus=8), make_node("n2", gpus=8)]
    a = make_gang("a", roles=[("worker", 2, make_shape(gpus=8))])
    b = make_gang("b", roles=[("worker", 2, make_shape(gpus=8))])
    snap = make_snapshot(nodes, gangs=[a, b])
    ledger = Ledger()
    settings = CoreSettings()
    for i in range(2):
        for gang in (a, b):
            pod = uid(gang, "worker", i)
            d = decide_filter(snap.pods[pod], [NodeName("n1"), NodeName("n2")], snapshot=snap,
                              ledger=ledger, now=0, settings=settings)
            if d.passed:
                decide_bind(pod, d.passed[0], snapshot=snap, ledger=ledger, now=0,
                            settings=settings)
    assert deadlocks(wait_for_graph(snap, ledger)) == []


def test_fit_answers_no_when_free_gpus_are_fragmented_across_nodes() -> None:
    nodes = [make_node("a", gpus=8), make_node("b", gpus=8)]
    busy = [make_pod("x", shape=make_shape(gpus=4), node="a"),
            make_pod("y", shape=make_shape(gpus=4), node="b")]
    gang = make_gang("llama", roles=[("worker", 1, make_shape(gpus=8))])
    result = fit_workload(tree_of(gang), make_snapshot(nodes, pods=busy))
    assert not result.fits
    assert result.gangs[0].reason.endswith("needs 8 nvidia.com/gpu on one node, the largest free "
                                           "is 4")


def test_fit_sees_taints_and_cpu_limits() -> None:
    tainted = [make_node("a", gpus=8, taints=[Taint("gpu", "", "NoSchedule")])]
    gang = make_gang("g", roles=[("worker", 1, make_shape(gpus=1))])
    assert "taint gpu:NoSchedule" in fit_workload(tree_of(gang),
                                                  make_snapshot(tainted)).gangs[0].reason
    small_cpu = [make_node("a", gpus=8, cpu=4)]
    hungry = make_gang("h", roles=[("worker", 1, make_shape(gpus=1, cpu=8))])
    reason = fit_workload(tree_of(hungry), make_snapshot(small_cpu)).gangs[0].reason
    assert "needs cpu=8 on one node, the largest free is 4" in reason


def test_fit_places_gangs_in_order_each_seeing_what_the_earlier_took() -> None:
    nodes = [make_node("a", gpus=8), make_node("b", gpus=8)]
    first = make_gang("first", roles=[("worker", 1, make_shape(gpus=8))])
    second = make_gang("second", roles=[("worker", 1, make_shape(gpus=8))])
    third = make_gang("third", roles=[("worker", 1, make_shape(gpus=8))])
    tree = replace(tree_of(first), gangs=(first, second, third))
    result = fit_workload(tree, make_snapshot(nodes))
    assert [g.fits for g in result.gangs] == [True, True, False]
    assert not result.fits
    assert dict(result.gangs[0].plan) == {"a": {"worker": 1}}
    assert "largest free is 0" in result.gangs[2].reason


def test_fit_counts_bound_members_toward_the_minimum() -> None:
    nodes = [make_node("a", gpus=8), make_node("b", gpus=8)]
    gang = make_gang("g", roles=[("worker", 2, make_shape(gpus=8))])
    snap = make_snapshot(nodes, gangs=[gang], bound={"g-worker-0": "a"})
    result = fit_workload(tree_of(gang), snap)
    (fit,) = result.gangs
    assert result.fits and fit.placed == 2
    # The plan shows where every placed pod is, the bound member included: it adds up.
    assert dict(fit.plan) == {"a": {"worker": 1}, "b": {"worker": 1}}
    assert sum(n for roles in fit.plan.values() for n in roles.values()) == fit.placed
    assert fit.reason == "gang ml/g: 2 pods placed (minimum 2; 1 already bound) on a: 1, b: 1"


def test_fit_of_a_gang_that_does_not_fit_shows_only_its_bound_members_in_the_plan() -> None:
    nodes = [make_node("a", gpus=8), make_node("b", gpus=4)]
    gang = make_gang("g", roles=[("worker", 3, make_shape(gpus=8))])
    snap = make_snapshot(nodes, gangs=[gang], bound={"g-worker-0": "a"})
    (fit,) = fit_workload(tree_of(gang), snap).gangs
    assert not fit.fits
    assert fit.placed == 1  # the bound member; no other pod of 8 GPUs fits
    assert dict(fit.plan) == {"a": {"worker": 1}}


def test_fit_places_pods_of_a_gangless_workload_one_by_one() -> None:
    nodes = [make_node("a", gpus=8)]
    gang = make_gang("web", roles=[("replica", 3, make_shape(gpus=4))])
    tree = replace(tree_of(gang), gangs=())
    result = fit_workload(tree, make_snapshot(nodes))
    assert not result.fits
    assert result.gangs[0].placed == 2
    assert result.gangs[0].reason.startswith("role replica: 2 of 3 pods fit;")


def test_plans_are_values_that_compare_equal() -> None:
    p = Plan(GangKey("ml/g"), ((NodeName("a"), "w", 1),))
    assert p == Plan(GangKey("ml/g"), ((NodeName("a"), "w", 1),))
    assert p.nodes_for("w") == ("a",)
