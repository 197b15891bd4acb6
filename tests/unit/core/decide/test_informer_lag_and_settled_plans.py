"""Two ways state drift could break all-or-nothing, found against the real kube-scheduler.

1. Informer lag: a JobSet's pod reaches filter before Muster has seen its Job or JobSet. Taken
   for a lone pod it would bind alone; it must wait instead.
2. A plan filled by bound pods must end: otherwise, once those pods are deleted, the plan
   reserves their capacity again for a gang that is already done.
"""

from __future__ import annotations

from typing import Any

from extender.core.decide.decisions import (
    BindOutcome,
    CoreSettings,
    FilterOutcome,
    decide_bind,
    decide_filter,
)
from extender.core.gang.ledger import Ledger, free_capacity
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import NodeName
from extender.core.workloads.cluster import build_snapshot
from tests.unit.core.builders import (
    make_gang,
    make_node,
    make_pod,
    make_shape,
    make_snapshot,
    uid,
)
from tests.unit.descriptors.examples import catalog

SETTINGS = CoreSettings(plan_ttl=60, bind_timeout=10)
NODES = [node for i in range(2) for node in [make_node(f"n{i}", gpus=8)]]


def _jobset_pod(name: str, *, job_known: bool, jobset_known: bool) -> ClusterSnapshot:
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": "train", "namespace": "ml", "uid": "uid-js"},
              "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {
                  "spec": {"parallelism": 2, "template": {"spec": {"containers": [
                      {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}}]}}
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "train-workers-0", "namespace": "ml", "uid": "uid-job",
                        "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                             "kind": "JobSet", "name": "train",
                                             "uid": "uid-js", "controller": True}]}}
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}",
                     "labels": {"jobset.sigs.k8s.io/jobset-name": "train",
                                "jobset.sigs.k8s.io/replicatedjob-name": "workers"},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                          "name": "train-workers-0", "uid": "uid-job",
                                          "controller": True}]},
        "spec": {"containers": [{"name": "c",
                                 "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}
    objects = [o for o, known in ((jobset, jobset_known), (job, job_known)) if known]
    return build_snapshot(nodes=NODES, pods=[pod], objects=objects, catalog=catalog())


def test_a_pod_whose_job_is_not_observed_yet_waits_instead_of_binding_alone() -> None:
    snapshot = _jobset_pod("w0", job_known=False, jobset_known=False)
    pod = snapshot.pods["uid-w0"]
    decision = decide_filter(pod, [NodeName("n0"), NodeName("n1")], snapshot=snapshot,
                             ledger=Ledger(), now=0.0, settings=SETTINGS)
    assert decision.outcome is FilterOutcome.WAITING and not decision.passed
    assert "Job ml/train-workers-0 is not observed yet" in decision.reason
    bind = decide_bind("uid-w0", NodeName("n0"), snapshot=snapshot, ledger=Ledger(), now=0.0,
                       settings=SETTINGS)
    assert bind.outcome is BindOutcome.REJECT


def test_a_pod_whose_jobset_is_not_observed_yet_waits_too() -> None:
    snapshot = _jobset_pod("w0", job_known=True, jobset_known=False)
    assert "JobSet ml/train is not observed yet" in snapshot.unresolved["uid-w0"]


def test_once_the_owners_are_seen_the_pod_is_a_gang_member() -> None:
    snapshot = _jobset_pod("w0", job_known=True, jobset_known=True)
    assert not snapshot.unresolved
    decision = decide_filter(snapshot.pods["uid-w0"], [NodeName("n0"), NodeName("n1")],
                             snapshot=snapshot, ledger=Ledger(), now=0.0, settings=SETTINGS)
    assert decision.outcome is FilterOutcome.PLANNED and decision.gang == "ml/train"


def test_a_pod_owned_by_a_kind_nobody_describes_is_simply_alone() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "ml", "uid": "uid-p",
                        "ownerReferences": [{"apiVersion": "argoproj.io/v1alpha1",
                                             "kind": "Workflow", "name": "wf", "uid": "u",
                                             "controller": True}]},
           "spec": {"containers": [{"name": "c"}]}}
    snapshot = build_snapshot(nodes=NODES, pods=[pod], objects=[], catalog=catalog())
    assert not snapshot.unresolved


def test_a_plan_filled_by_bound_pods_ends_and_reserves_nothing_after_they_go() -> None:
    gang = make_gang("story", roles=[("workers", 2, make_shape(gpus=8))])
    ledger = Ledger()
    pending = make_snapshot(NODES, gangs=[gang])
    decide_filter(pending.pods[uid(gang, "workers", 0)], [NodeName("n0"), NodeName("n1")],
                  snapshot=pending, ledger=ledger, now=0.0, settings=SETTINGS)
    assert ledger.plan_for(gang.key) is not None
    bound = make_snapshot(NODES, gangs=[gang],
                          bound={"story-workers-0": "n0", "story-workers-1": "n1"})
    assert ledger.settle(bound) == [gang.key]
    assert ledger.plan_for(gang.key) is None
    # The pods are deleted; the workload stays. Nothing may stay reserved for it.
    emptied = ClusterSnapshot.of(NODES, (), bound.workloads.values(), {})
    free = free_capacity(emptied, ledger)
    assert all(free[NodeName(n)].devices == (1000,) * 8 for n in ("n0", "n1"))


def test_a_plan_still_waiting_for_members_is_kept() -> None:
    gang = make_gang("half", roles=[("workers", 2, make_shape(gpus=8))])
    ledger = Ledger()
    pending = make_snapshot(NODES, gangs=[gang])
    decide_filter(pending.pods[uid(gang, "workers", 0)], [NodeName("n0"), NodeName("n1")],
                  snapshot=pending, ledger=ledger, now=0.0, settings=SETTINGS)
    one_bound = make_snapshot(NODES, gangs=[gang], bound={"half-workers-0": "n0"})
    assert ledger.settle(one_bound) == []
    assert ledger.plan_for(gang.key) is not None


def test_a_gang_whose_pods_are_all_gone_is_barred_again() -> None:
    gang = make_gang("again", roles=[("workers", 2, make_shape(gpus=8))])
    ledger = Ledger()
    ledger.admit(gang.key, now=0.0)
    emptied = make_snapshot(NODES, gangs=[gang])  # recreated pods, none bound
    ledger.settle(emptied)
    # The recreated gang's first member is held at the barrier again, not bound at once.
    first = decide_bind(uid(gang, "workers", 0), NodeName("n0"), snapshot=emptied,
                        ledger=ledger, now=1.0, settings=SETTINGS)
    assert first.outcome is BindOutcome.WAIT, first.reason
    assert not ledger.is_admitted(gang.key)


def test_a_plan_whose_pods_were_all_deleted_ends() -> None:
    gang = make_gang("gone", roles=[("workers", 2, make_shape(gpus=8))])
    ledger = Ledger()
    pending = make_snapshot(NODES, gangs=[gang])
    decide_filter(pending.pods[uid(gang, "workers", 0)], [NodeName("n0"), NodeName("n1")],
                  snapshot=pending, ledger=ledger, now=0.0, settings=SETTINGS)
    no_pods = ClusterSnapshot.of(NODES, (), pending.workloads.values(), {})
    assert ledger.settle(no_pods) == [gang.key]


def test_a_plan_ends_when_its_members_landed_on_other_planned_nodes_than_their_slots() -> None:
    """Seen against the real kube-scheduler: an LWS group's three workers, planned two on one
    node and one on the next, were offered both nodes (decided together) and all bound on
    one. Matched slot by slot, the empty slot kept its node's capacity from every other pod
    until the plan's TTL (a lone pod waited 26 s with that node free)."""
    nodes = [make_node("n0", gpus=8), make_node("n1", gpus=8)]
    gang = make_gang("group", roles=[("worker", 3, make_shape(gpus=2))])
    busy = [make_pod(f"other-{n}", shape=make_shape(gpus=4), node=n) for n in ("n0", "n1")]
    ledger = Ledger()
    pending = make_snapshot(nodes, gangs=[gang], pods=busy)  # 4 GPUs free on each node
    decide_filter(pending.pods[uid(gang, "worker", 0)], [NodeName("n0"), NodeName("n1")],
                  snapshot=pending, ledger=ledger, now=0.0, settings=SETTINGS)
    plan = ledger.plan_for(gang.key)
    assert plan is not None
    assert len({node for node, _role, _n in plan.slots}) == 2  # the plan spans both nodes
    crowded = next(node for node, _role, n in plan.slots if n == 1)
    # The other pods ended; kube-scheduler bound all three where the plan had one.
    bound = make_snapshot(nodes, gangs=[gang],
                          bound={f"group-worker-{i}": crowded for i in range(3)})
    assert ledger.settle(bound) == [gang.key]
    assert ledger.plan_for(gang.key) is None
    free = free_capacity(bound, ledger)
    assert sum(free[NodeName(n)].devices.count(1000) for n in ("n0", "n1")) == 16 - 6
