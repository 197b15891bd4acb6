"""Snapshot replay as a cluster would run it: priorities come from PriorityClasses (as the API
server's admission resolves them, globalDefault included) and order kube-scheduler's queue;
without a Timeline, workloads and pending pods arrive at their creation times."""

from __future__ import annotations

from typing import Any

import pytest

from extender.core.workloads.catalog import Catalog
from extender.files.catalog import packaged_catalog
from simulator.simulation import simulate
from simulator.snapshot_replay import ReplayInputError, scenario_from_objects


def node(name: str = "n1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8",
                                       "pods": "110"}}}


NODE = node()


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return packaged_catalog()


def jobset(name: str, *, pods: int = 2, gpus: int = 4, priority_class: str | None = None,
           created: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {
        "requests": {"cpu": "1", "nvidia.com/gpu": gpus}, "limits": {"nvidia.com/gpu": gpus}}}]}
    if priority_class:
        spec["priorityClassName"] = priority_class
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "uid": f"uid-{name}"}
    if created:
        meta["creationTimestamp"] = created
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta,
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
                "parallelism": pods, "completions": pods, "template": {"spec": spec}}}}]}}


def priority_class(name: str, value: int, *, default: bool = False) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value, "globalDefault": default}


def bare_pod(name: str, *, created: str | None = None, node: str | None = None,
             owner: str | None = None, **spec: Any) -> dict[str, Any]:
    """A pod; with ``owner``, one of a DaemonSet (a kind no descriptor describes)."""
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "uid": f"uid-{name}"}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": owner,
                                    "uid": f"uid-{owner}", "controller": True}]
    if created:
        meta["creationTimestamp"] = created
    body: dict[str, Any] = {"containers": [{"name": "c", "resources": {
        "requests": {"cpu": "1"}}}], **spec}
    if node:
        body["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body,
            "status": {"phase": "Running" if node else "Pending"}}


def test_templates_get_their_class_value_and_gangs_the_highest(catalog: Catalog) -> None:
    scenario = scenario_from_objects([
        NODE, priority_class("train-high", 1000), priority_class("batch", 10, default=True),
        jobset("named", priority_class="train-high"), jobset("unnamed"),
        jobset("critical", priority_class="system-cluster-critical"),
    ], catalog=catalog)
    by_name = {w.tree.ref.name: w.tree for w in scenario.workloads}
    assert by_name["named"].roles[0].shape.priority == 1000
    assert by_name["named"].gangs[0].priority == 1000
    assert by_name["named"].gangs[0].members[0].shape.priority == 1000
    assert by_name["unnamed"].roles[0].shape.priority == 10  # the globalDefault class
    assert by_name["critical"].roles[0].shape.priority == 2_000_000_000


def test_a_pod_keeps_the_priority_admission_gave_it(catalog: Catalog) -> None:
    scenario = scenario_from_objects([
        NODE, priority_class("low", 1, default=True), priority_class("lower", 0, default=True),
        priority_class("high", 500),
        bare_pod("recorded", priority=7, priorityClassName="high"),
        bare_pod("hand-written", priorityClassName="high"), bare_pod("plain"),
    ], catalog=catalog)
    # Bare pods are workloads of kind Pod; their recorded pod and their template agree.
    pods = {p.name: p.shape.priority for w in scenario.workloads for p, _ in w.pods}
    templates = {w.tree.ref.name: w.tree.roles[0].shape.priority for w in scenario.workloads}
    # Recorded from a cluster: spec.priority was set there. Several defaults: the lowest.
    assert pods == templates == {"recorded": 7, "hand-written": 500, "plain": 0}


def test_an_unknown_class_names_the_workload_and_role(catalog: Catalog) -> None:
    with pytest.raises(ReplayInputError, match=r"JobSet/ml/x role w: priorityClassName 'gold'"):
        scenario_from_objects([NODE, jobset("x", priority_class="gold")], catalog=catalog)
    with pytest.raises(ReplayInputError, match="PriorityClass bad: value must be an integer"):
        scenario_from_objects([NODE, {"kind": "PriorityClass", "metadata": {"name": "bad"},
                                      "value": "high"}], catalog=catalog)


def test_the_higher_priority_gang_goes_first_on_a_full_node(catalog: Catalog) -> None:
    # Both want the whole node at time 0; "a-low" sorts first by name, "b-high" wins by class.
    scenario = scenario_from_objects([
        NODE, priority_class("high", 100),
        jobset("a-low"), jobset("b-high", priority_class="high"),
        {"apiVersion": "muster.dev/v1alpha1", "kind": "Timeline", "metadata": {"name": "t"},
         "spec": {"entries": [{"workload": "JobSet/ml/a-low", "runtime": 600},
                              {"workload": "JobSet/ml/b-high", "runtime": 600}]}},
    ], catalog=catalog)
    for mode in ("default", "muster"):
        report = simulate(scenario, mode).report
        assert report["gang_wait_seconds"] == {"p50": 0.0, "p95": 600.0, "max": 600.0}, mode


def test_without_a_timeline_workloads_arrive_at_their_creation_times(catalog: Catalog) -> None:
    scenario = scenario_from_objects([
        NODE, node("n2"), node("n3"),
        jobset("first", created="2026-03-02T10:00:00Z"),
        jobset("second", created="2026-03-02T10:01:30Z"),
        jobset("no-stamp"),
        bare_pod("late", created="2026-03-02T10:00:30Z"),
        bare_pod("running", created="2026-01-01T00:00:00Z", node="n1"),
        bare_pod("agent", created="2026-03-02T10:00:45Z", owner="node-agent"),
        bare_pod("agent-running", created="2026-01-01T00:00:00Z", owner="node-agent",
                 node="n1"),
    ], catalog=catalog)
    arrivals = {w.tree.ref.name: w.arrival for w in scenario.workloads}
    # Bare pods are workloads of kind Pod: one pending arrives at its time, one running at 0.
    assert arrivals == {"first": 0.0, "second": 90.0, "no-stamp": 0.0, "late": 30.0,
                        "running": 0.0}
    # A pending pod outside any workload arrives at its own time; a running one is there at 0.
    assert {p.name for p in scenario.loose_pods} == {"agent", "agent-running"}
    assert dict(scenario.loose_arrivals) == {"uid-agent": 45.0}
    result = simulate(scenario, "muster")
    assert result.report["gangs"]["admitted"] == 3
    # Six gang members, the two pending pods, and the recorded pod of the running Pod workload
    # (a recorded pod outside workloads is in place from the start, not bound in the replay).
    assert result.report["pods"]["bound"] == 3 * 2 + 2 + 1


def test_a_timeline_entry_wins_over_the_creation_time(catalog: Catalog) -> None:
    scenario = scenario_from_objects([
        NODE,
        jobset("first", created="2026-03-02T10:00:00Z"),
        jobset("second", created="2026-03-02T10:01:30Z"),
        {"apiVersion": "muster.dev/v1alpha1", "kind": "Timeline", "metadata": {"name": "t"},
         "spec": {"entries": [{"workload": "JobSet/ml/second", "arrival": 5}]}},
    ], catalog=catalog)
    assert {w.tree.ref.name: w.arrival for w in scenario.workloads} == {"first": 0.0,
                                                                      "second": 5.0}


def test_a_workload_already_running_arrives_at_zero(catalog: Catalog) -> None:
    running = jobset("running", pods=1, created="2026-01-01T00:00:00Z")
    member = bare_pod("running-w-0-0", created="2026-01-01T00:00:05Z", node="n1")
    member["metadata"]["ownerReferences"] = [{
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "running",
        "uid": "uid-running", "controller": True}]
    member["metadata"]["labels"] = {"jobset.sigs.k8s.io/jobset-name": "running",
                                    "jobset.sigs.k8s.io/replicatedjob-name": "w"}
    member["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = 4
    scenario = scenario_from_objects([
        NODE, running, member, jobset("new", created="2026-03-02T10:00:00Z"),
        jobset("newer", created="2026-03-02T10:10:00Z"),
    ], catalog=catalog)
    by_name = {w.tree.ref.name: w for w in scenario.workloads}
    assert len(by_name["running"].pods) == 1
    assert {n: w.arrival for n, w in by_name.items()} == {"running": 0.0, "new": 0.0,
                                                         "newer": 600.0}
