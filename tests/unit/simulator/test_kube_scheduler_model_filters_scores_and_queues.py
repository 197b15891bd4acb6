"""The kube-scheduler model: its filters, its default scores with their weights, its seeded
draw among equal scores, and its queue (priority, then queue time, which a failure refreshes)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from extender.core.model.values import NodeSelectorRequirement, NodeSelectorTerm, Taint, Toleration
from simulator.cluster import ClusterModel
from simulator.kube_scoring import (
    Weights,
    balanced_allocation,
    candidate,
    intolerable_taints,
    least_allocated,
    normalize,
    pick,
    preferred_weight,
)
from simulator.preferences import PreferenceError, preferred_affinity
from simulator.scheduler_values import Flush
from tests.unit.simulator.builders import Recorder, label_in, make_node, make_pod, make_shape

PREFER = "PreferNoSchedule"


@pytest.fixture
def mixed() -> Recorder:
    """Nodes that each fail a different filter, plus one with one device half shared."""
    model = Recorder([
        make_node("a", labels={"zone": "a"}),
        make_node("b", labels={"zone": "b"}),
        make_node("cordoned", labels={"zone": "a"}, cordoned=True),
        make_node("tainted", labels={"zone": "a"},
                  taints=[Taint("dedicated", "infer", "NoSchedule")]),
        make_node("preferred-off", labels={"zone": "b"},
                  taints=[Taint("spot", "", PREFER)]),
        make_node("small", gpus=2, labels={"zone": "b"}),
        make_node("shared", gpus=1, labels={"zone": "b"}),
    ])
    model.add(make_pod("half", make_shape(share=500), node="shared", devices=(0,)))
    return model


def test_resource_fit_counts_whole_free_devices(mixed: Recorder) -> None:
    assert mixed.feasible(make_shape(gpus=4)) == ["a", "b", "preferred-off"]
    assert mixed.feasible(make_shape(gpus=2)) == ["a", "b", "preferred-off", "small"]
    assert mixed.feasible(make_shape(gpus=1)) == ["a", "b", "preferred-off", "small"]


def test_a_share_needs_room_on_one_device(mixed: Recorder) -> None:
    assert "shared" in mixed.feasible(make_shape(share=400))
    assert "shared" not in mixed.feasible(make_shape(share=600))


def test_cpu_and_memory_fit_per_node(mixed: Recorder) -> None:
    assert mixed.feasible(make_shape(gpus=1, cpu=65)) == []
    assert mixed.feasible(make_shape(gpus=1, memory_gi=600)) == []


def test_node_selector_and_required_affinity_choose_nodes(mixed: Recorder) -> None:
    assert mixed.feasible(make_shape(gpus=1, selector={"zone": "a"})) == ["a"]
    assert mixed.feasible(make_shape(gpus=1, affinity=[label_in("zone", "b")])) == [
        "b", "preferred-off", "small"]
    # A per-node label (the hostname) is checked node by node, not per kind of node.
    assert mixed.feasible(make_shape(gpus=1, selector={"kubernetes.io/hostname": "b"})) == ["b"]


def test_taints_and_cordons_keep_pods_off_unless_tolerated(mixed: Recorder) -> None:
    tolerate = [Toleration("dedicated", "Equal", "infer", "NoSchedule")]
    assert "tainted" in mixed.feasible(make_shape(gpus=1, tolerations=tolerate))
    cordon = [Toleration("node.kubernetes.io/unschedulable", "Exists", "", "NoSchedule")]
    assert "cordoned" in mixed.feasible(make_shape(gpus=1, tolerations=cordon))
    # PreferNoSchedule only lowers the score.
    assert "preferred-off" in mixed.feasible(make_shape(gpus=1))


def test_feasible_among_agrees_with_the_class_by_class_filter(mixed: Recorder) -> None:
    for shape in (make_shape(gpus=4), make_shape(share=600), make_shape(gpus=1,
                  selector={"kubernetes.io/hostname": "b"})):
        every = sorted(mixed.cluster.nodes)
        among = mixed.cluster.feasible_among(shape, mixed.cluster.demand(shape), every)
        assert among == mixed.feasible(shape)


def test_scores_follow_the_go_plugins_integer_arithmetic() -> None:
    node = make_node("n", gpus=8, cpu=64, memory_gi=512)
    model = ClusterModel([node])
    shape = make_shape(gpus=2, cpu=16, memory_gi=64)
    c = candidate(model.cache["n"], model.empty["n"], model.demand(shape), node)
    # (48/64*100 + 448/512*100) / 2 = (75 + 87) / 2 = 81 (87.5 truncated, as Go does)
    assert least_allocated(c) == 81
    # fractions 0.25 and 0.125: std 0.0625 -> int(93.75) = 93
    assert balanced_allocation(c, model.demand(shape)) == 93
    assert balanced_allocation(c, model.demand(make_shape(cpu=0, memory_gi=0))) == 0


def test_taint_toleration_and_node_affinity_normalise_over_the_scored_nodes() -> None:
    clean, spot = make_node("clean"), make_node("spot", taints=[Taint("spot", "", PREFER)])
    pod = make_shape(gpus=1)
    raw = [intolerable_taints(pod, n) for n in (clean, spot)]
    assert raw == [0, 1]
    assert normalize(raw, reverse=True) == [100, 0]
    tolerant = make_shape(gpus=1, tolerations=[Toleration("spot", "Exists", "", PREFER)])
    assert intolerable_taints(tolerant, spot) == 0
    assert normalize([0, 0], reverse=True) == [100, 100]
    preferred = ((30, label_in("zone", "a")), (10, label_in("disk", "ssd")))
    both = make_node("both", labels={"zone": "a", "disk": "ssd"})
    one = make_node("one", labels={"disk": "ssd"})
    scores = [preferred_weight(preferred, n) for n in (both, one, clean)]
    assert scores == [40, 10, 0]
    assert normalize(scores, reverse=False) == [100, 25, 0]


def test_default_weights_are_kube_schedulers() -> None:
    assert Weights() == Weights(least_allocated=1, balanced_allocation=1, taint_toleration=3,
                                node_affinity=2)


def test_a_prefer_no_schedule_taint_outweighs_a_freer_node() -> None:
    model = Recorder([make_node("busy"), make_node("spot", taints=[Taint("spot", "", PREFER)])])
    model.add(make_pod("filler", make_shape(gpus=4, cpu=32, memory_gi=256), node="busy",
                       devices=(0, 1, 2, 3)))
    model.add(make_pod("p", make_shape(gpus=1)))
    model.scheduler.run(0.0)
    assert model.bound == [("p", "busy")]


def test_preferred_affinity_from_the_pod_spec_steers_the_pod() -> None:
    spec = {"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 50, "preference": {"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["b"]}]}}]}}}
    preferred = preferred_affinity(spec)
    assert preferred == ((50, label_in("zone", "b")),)
    model = Recorder([make_node("a", labels={"zone": "a"}), make_node("b", labels={"zone": "b"}),
                      make_node("c", labels={"zone": "a"})])
    pod = make_pod("p", make_shape(gpus=1))
    model.cluster.add_pod(pod, None, preferred=preferred)
    model.scheduler.enqueue(pod.uid, 0.0)
    model.scheduler.run(0.0)
    assert model.bound == [("p", "b")]
    with pytest.raises(PreferenceError, match=r"\[0\]\.weight"):
        preferred_affinity({"affinity": {"nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": "high"}]}}})


def test_equal_scores_are_drawn_with_the_seed_uniformly() -> None:
    # Three candidates standing for 1, 2 and 1 nodes, all tied: each node is equally likely.
    rng = random.Random(3)
    drawn = Counter(pick([7, 7, 7], [1, 2, 1], rng) for _ in range(4000))
    assert set(drawn) == {(0, 0), (1, 0), (1, 1), (2, 0)}
    assert all(900 < n < 1100 for n in drawn.values()), drawn
    assert pick([5, 9, 9], [4, 1, 1], random.Random(1)) in {(1, 0), (2, 0)}
    assert pick([5, 9, 2], [4, 1, 1], random.Random(1)) == (1, 0)


def _placements(seed: int) -> list[tuple[str, str]]:
    model = Recorder([make_node(f"n{i}") for i in range(6)], seed=seed)
    for i in range(4):
        model.add(make_pod(f"p{i}", make_shape(gpus=8)))
    model.scheduler.run(0.0)
    return model.bound


def test_the_draw_is_the_same_for_a_seed_and_differs_between_seeds() -> None:
    first = _placements(1)
    assert first == _placements(1)
    assert len({n for _, n in first}) == 4
    assert any(_placements(s) != first for s in range(2, 8))


def test_the_queue_takes_priority_then_queue_time() -> None:
    model = Recorder([make_node("n")])
    model.add(make_pod("early-low", make_shape(gpus=1)), now=0.0)
    model.add(make_pod("late-high", make_shape(gpus=1, priority=1000)), now=5.0)
    model.add(make_pod("late-low", make_shape(gpus=1)), now=5.0)
    model.add(make_pod("early-mid", make_shape(gpus=1, priority=10)), now=1.0)
    assert model.scheduler.queued() == ["uid-late-high", "uid-early-mid", "uid-early-low",
                                        "uid-late-low"]
    model.scheduler.run(5.0)
    assert [name for name, _ in model.bound] == ["late-high", "early-mid", "early-low",
                                                 "late-low"]


def test_a_failed_attempt_refreshes_the_queue_time() -> None:
    # kube-scheduler stamps a pod it puts back after a failed cycle with that cycle's time:
    # "a" was created first, but failed again after "b" last failed, so "b" goes first.
    model = Recorder([make_node("n")])
    model.add(make_pod("blocker", make_shape(gpus=8), node="n", devices=tuple(range(8))))
    model.add(make_pod("a", make_shape(gpus=8)), now=0.0)
    model.scheduler.run(0.0)
    model.add(make_pod("b", make_shape(gpus=8)), now=100.0)
    model.scheduler.run(100.0)
    model.scheduler.handle(Flush(), 300.0)  # "a" has been unschedulable for five minutes
    assert model.scheduler.queued() == ["uid-a"]
    model.scheduler.run(300.0)
    assert model.bound == []
    model.cluster.remove_pod("uid-blocker")
    model.scheduler.cluster_changed(350.0)
    assert model.scheduler.queued() == ["uid-b", "uid-a"]
    model.scheduler.run(350.0)
    assert model.bound == [("b", "n")]
    assert model.scheduler.stats()["failed"] == 4


def test_match_fields_terms_score_node_by_node() -> None:
    term = NodeSelectorTerm(match_fields=(
        NodeSelectorRequirement(key="metadata.name", operator="In", values=("n2",)),))
    model = Recorder([make_node(f"n{i}") for i in range(4)])
    pod = make_pod("p", make_shape(gpus=1))
    model.cluster.add_pod(pod, None, preferred=((1, term),))
    model.scheduler.enqueue(pod.uid, 0.0)
    model.scheduler.run(0.0)
    assert model.bound == [("p", "n2")]
