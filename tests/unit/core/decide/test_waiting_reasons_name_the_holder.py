"""A gang waiting for capacity says who holds it, not only "the largest free is 0": the
running workloads bound on the nodes it may use, and what Muster promised elsewhere."""

from __future__ import annotations

from dataclasses import replace

from extender.core.decide.decisions import CoreSettings, FilterOutcome, decide_filter
from extender.core.decide.holders import IN_FLIGHT, PLAN, RUNNING
from extender.core.gang.ledger import Ledger
from extender.core.model.values import NodeName, OwnerRef
from tests.unit.core.builders import make_gang, make_node, make_pod, make_shape, make_snapshot, uid

SETTINGS = CoreSettings(plan_ttl=30, bind_timeout=30)


def _filter(snap, ledger, pod_uid, now=0.0):  # type: ignore[no-untyped-def]
    return decide_filter(snap.pods[pod_uid], list(snap.nodes), snapshot=snap, ledger=ledger,
                         now=now, settings=SETTINGS)


def test_a_gang_behind_another_gangs_plan_names_that_plan_and_its_nodes() -> None:
    a = make_gang("a", roles=[("worker", 2, make_shape(gpus=8))], created=1.0)
    b = make_gang("b", roles=[("worker", 2, make_shape(gpus=8))], created=2.0)
    snap = make_snapshot([make_node("n1"), make_node("n2")], gangs=[a, b])
    ledger = Ledger()
    assert _filter(snap, ledger, uid(a, "worker", 0)).outcome is FilterOutcome.PLANNED
    waiting = _filter(snap, ledger, uid(b, "worker", 0), now=1.0)
    assert waiting.outcome is FilterOutcome.WAITING
    assert waiting.reason == ("gang ml/b: 0 of 2 pods fit; a worker needs 8 nvidia.com/gpu on "
                              "one node, the largest free is 0; 16 GPUs on n1, n2 are held for "
                              "gang ml/a's plan")
    assert [(h.kind, h.gang, h.nodes, h.gpu_milli, h.pods) for h in waiting.holders] == [
        (PLAN, "ml/a", ("n1", "n2"), 16000, 2)]
    # Every node kube-scheduler reports says the same.
    assert set(waiting.failed.values()) == {waiting.reason}


def test_plan_and_pods_in_flight_are_both_named_largest_first() -> None:
    a = make_gang("a", roles=[("worker", 1, make_shape(gpus=8))], created=1.0)
    c = make_gang("c", roles=[("worker", 1, make_shape(gpus=4))], created=1.5)
    b = make_gang("b", roles=[("worker", 2, make_shape(gpus=8))], created=2.0)
    running = make_pod("running", shape=make_shape(gpus=4), node="n2")
    snap = make_snapshot([make_node("n1"), make_node("n2")], gangs=[a, c, b], pods=[running])
    ledger = Ledger()
    _filter(snap, ledger, uid(a, "worker", 0))                   # a plans n1
    ledger.mark_bind_requested(uid(c, "worker", 0), NodeName("n2"), now=0.5)  # c at bind on n2
    waiting = _filter(snap, ledger, uid(b, "worker", 0), now=1.0)
    # Without a's plan and c's pod, b's two 8-GPU pods still do not fit: a running pod uses
    # half of n2. Nothing Muster promised stands in the way of what cannot fit anyway: only
    # the running pod is named.
    assert waiting.outcome is FilterOutcome.WAITING
    assert [(h.kind, h.name) for h in waiting.holders] == [(RUNNING, "ml/running")]
    assert "held for" not in waiting.reason and "in flight" not in waiting.reason
    assert waiting.reason.endswith("; held by ml/running (4 GPUs on n2)")
    big = make_snapshot([make_node("n1"), make_node("n2")], gangs=[a, c, b])
    ledger = Ledger()
    _filter(big, ledger, uid(a, "worker", 0))
    ledger.mark_bind_requested(uid(c, "worker", 0), NodeName("n2"), now=0.5)
    waiting = _filter(big, ledger, uid(b, "worker", 0), now=1.0)
    assert [(h.kind, h.gang, h.nodes) for h in waiting.holders] == [
        (PLAN, "ml/a", ("n1",)), (IN_FLIGHT, "ml/c", ("n2",))]
    assert waiting.reason.endswith("; 8 GPUs on n1 are held for gang ml/a's plan; 4 GPUs on n2 "
                                   "are held by 1 pod of gang ml/c in flight at bind")


def test_pods_outside_any_gang_in_flight_are_named_as_such() -> None:
    b = make_gang("b", roles=[("worker", 1, make_shape(gpus=8))])
    loner = make_pod("loner", shape=make_shape(gpus=1))
    snap = make_snapshot([make_node("n1")], gangs=[b], pods=[loner])
    ledger = Ledger()
    ledger.mark_bind_requested(loner.uid, NodeName("n1"), now=0.0)
    waiting = _filter(snap, ledger, uid(b, "worker", 0), now=1.0)
    assert waiting.reason.endswith("; 1 GPU on n1 is held by 1 pod outside any gang in flight "
                                   "at bind")


def test_many_holders_are_named_a_few_at_a_time() -> None:
    small = [make_gang(f"s{i}", roles=[("worker", 1, make_shape(gpus=8 - i))], created=float(i))
             for i in range(5)]
    big = make_gang("big", roles=[("worker", 5, make_shape(gpus=8))], created=10.0)
    nodes = [make_node(f"n{i}") for i in range(5)]
    snap = make_snapshot(nodes, gangs=[*small, big])
    ledger = Ledger()
    for gang in small:
        assert _filter(snap, ledger, uid(gang, "worker", 0)).outcome is FilterOutcome.PLANNED
    waiting = _filter(snap, ledger, uid(big, "worker", 0), now=1.0)
    assert len(waiting.holders) == 5
    assert [h.gang for h in waiting.holders] == ["ml/s0", "ml/s1", "ml/s2", "ml/s3", "ml/s4"]
    tail = waiting.reason.split("largest free is ", 1)[1]
    assert tail.count("held for gang") == 3
    assert tail.endswith("; and 2 more holders")


def test_a_gang_that_cannot_fit_an_empty_cluster_names_no_holder() -> None:
    a = make_gang("a", roles=[("worker", 1, make_shape(gpus=8))], created=1.0)
    huge = make_gang("huge", roles=[("worker", 3, make_shape(gpus=8))], created=2.0)
    snap = make_snapshot([make_node("n1"), make_node("n2")], gangs=[a, huge])
    ledger = Ledger()
    _filter(snap, ledger, uid(a, "worker", 0))
    rejected = _filter(snap, ledger, uid(huge, "worker", 0), now=1.0)
    assert rejected.outcome is FilterOutcome.REJECTED
    assert rejected.holders == () and "held for" not in rejected.reason


def test_asking_who_holds_leaves_the_ledger_as_it_was() -> None:
    a = make_gang("a", roles=[("worker", 2, make_shape(gpus=8))], created=1.0)
    b = make_gang("b", roles=[("worker", 2, make_shape(gpus=8))], created=2.0)
    snap = make_snapshot([make_node("n1"), make_node("n2")], gangs=[a, b])
    ledger = Ledger()
    _filter(snap, ledger, uid(a, "worker", 0))
    ledger.mark_bind_requested(uid(a, "worker", 0), NodeName("n1"), now=0.5)
    before = (ledger.reservations(), dict(ledger.in_flight()), ledger.version)
    _filter(snap, ledger, uid(b, "worker", 0), now=1.0)
    assert (ledger.reservations(), dict(ledger.in_flight()), ledger.version) == before


def _serving(name: str, node: str, *, gpus: int = 8):  # type: ignore[no-untyped-def]
    """A pod of no gang, owned by a ReplicaSet ``serve-7d``."""
    pod = make_pod(name, shape=make_shape(gpus=gpus), node=node)
    return replace(pod, owners=(OwnerRef("apps/v1", "ReplicaSet", "serve-7d", controller=True),))


def test_a_waiting_gangs_reason_names_the_bound_jobset_holding_its_gpus() -> None:
    train = make_gang("train", roles=[("worker", 2, make_shape(gpus=8))], created=1.0)
    x = make_gang("x", roles=[("worker", 2, make_shape(gpus=8))], created=2.0)
    nodes = [make_node(f"n{i}") for i in range(1, 5)]
    snap = make_snapshot(nodes, gangs=[train, x], pods=[_serving("serve-a", "n3")],
                         bound={"train-worker-0": "n1", "train-worker-1": "n2"})
    waiting = _filter(snap, Ledger(), uid(x, "worker", 0))
    assert waiting.outcome is FilterOutcome.WAITING
    assert waiting.reason.endswith("; held by ml/train (16 GPUs on 2 nodes) and ml/serve-7d "
                                   "(8 on n3)")
    train_holder = waiting.holders[0]
    assert (train_holder.kind, train_holder.gang, train_holder.nodes, train_holder.pods) == (
        RUNNING, "ml/train", ("n1", "n2"), 2)


def test_running_workloads_on_nodes_the_gang_may_not_use_are_not_named() -> None:
    x = make_gang("x", roles=[("worker", 2, make_shape(gpus=8, selector={"pool": "a"}))])
    nodes = [make_node("a1", labels={"pool": "a"}), make_node("a2", labels={"pool": "a"}),
             make_node("b1", labels={"pool": "b"})]
    elsewhere = make_pod("other", shape=make_shape(gpus=8), node="b1")
    snap = make_snapshot(nodes, gangs=[x], pods=[_serving("serve-a", "a2"), elsewhere])
    waiting = _filter(snap, Ledger(), uid(x, "worker", 0))
    assert [h.name for h in waiting.holders] == ["ml/serve-7d"]
    assert "ml/other" not in waiting.reason


def test_many_running_workloads_are_named_largest_first_a_few_at_a_time() -> None:
    x = make_gang("x", roles=[("worker", 1, make_shape(gpus=8))])
    nodes = [make_node(f"n{i}") for i in range(5)]
    pods = [make_pod(f"p{i}", shape=make_shape(gpus=i + 4), node=f"n{i}") for i in range(5)]
    snap = make_snapshot(nodes, gangs=[x], pods=pods)
    waiting = _filter(snap, Ledger(), uid(x, "worker", 0))
    assert waiting.reason.endswith("; held by ml/p4 (8 GPUs on n4), ml/p3 (7 on n3), ml/p2 "
                                   "(6 on n2) and 2 more")
    assert len(waiting.holders) == 5


def test_the_waiting_gangs_own_bound_members_are_not_its_holders() -> None:
    x = make_gang("x", roles=[("worker", 3, make_shape(gpus=8))])
    snap = make_snapshot([make_node("n1"), make_node("n2"), make_node("n3")], gangs=[x],
                         pods=[_serving("serve-a", "n3")], bound={"x-worker-0": "n1"})
    waiting = _filter(snap, Ledger(), uid(x, "worker", 1))
    assert waiting.outcome is FilterOutcome.WAITING
    assert [h.name for h in waiting.holders] == ["ml/serve-7d"]


def test_gangs_waiting_on_one_snapshot_each_name_the_other_not_themselves() -> None:
    x = make_gang("x", roles=[("worker", 2, make_shape(gpus=8))])
    y = make_gang("y", roles=[("worker", 2, make_shape(gpus=8))])
    snap = make_snapshot([make_node("n1"), make_node("n2")], gangs=[x, y],
                         bound={"x-worker-0": "n1", "y-worker-0": "n2"})
    for gang, other in ((x, "ml/y"), (y, "ml/x"), (x, "ml/y")):
        waiting = _filter(snap, Ledger(), uid(gang, "worker", 1))
        assert waiting.outcome is FilterOutcome.WAITING
        assert [h.name for h in waiting.holders] == [other]
