"""Gang replay: Muster never leaves a partial gang or an oversubscribed node; kube-scheduler
alone does leave partial gangs on a tight cluster; replays are deterministic."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.cli.main import main
from extender.core.gang.capacity import classes_of, index_of
from extender.core.gang.charging import node_capacity
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.workloads.catalog import Catalog
from extender.files.catalog import packaged_catalog
from extender.files.snapshot import load_snapshot, parse_snapshot
from simulator.engine import ClockError, EventQueue, Priority
from simulator.scheduler_values import Mode, SchedulerSettings
from simulator.simulation import Simulation, simulate
from simulator.snapshot_replay import ReplayInputError, scenario_from_objects
from simulator.synthetic import SyntheticSpec, generate

EXAMPLE = Path(__file__).resolve().parents[3] / "docs" / "examples" / "gang-snapshot.yaml"


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return packaged_catalog()


def test_events_at_one_instant_pop_by_priority_then_scheduling_order() -> None:
    queue: EventQueue[str] = EventQueue()
    queue.schedule(5.0, "retry-a", priority=Priority.RETRY)
    queue.schedule(5.0, "arrive-a", priority=Priority.ARRIVE)
    queue.schedule(5.0, "arrive-b", priority=Priority.ARRIVE)
    queue.schedule(5.0, "free", priority=Priority.FREE)
    queue.schedule(1.0, "early", priority=Priority.RETRY)
    order = [queue.pop().event]
    assert queue.now == 1.0
    order += [item.event for item in queue.pop_due()]
    assert order == ["early", "free", "arrive-a", "arrive-b", "retry-a"]
    assert queue.now == 5.0


def test_an_event_in_the_past_is_refused() -> None:
    queue: EventQueue[str] = EventQueue()
    queue.schedule(3.0, "x")
    queue.pop()
    with pytest.raises(ClockError, match="before the clock"):
        queue.schedule(2.0, "late")


def test_tight_snapshot_muster_admits_whole_gangs_default_strands_part_of_one(
        catalog: Catalog) -> None:
    scenario = scenario_from_objects(load_snapshot(EXAMPLE), catalog=catalog)
    muster = simulate(scenario, "muster").report
    default = simulate(scenario, "default").report
    assert muster["gangs"] == {"total": 3, "admitted": 3, "partial": 0, "waiting": 0}
    assert muster["oversubscribed_nodes"] == 0
    assert muster["gpu_hours_partial"] == 0.0
    assert default["gangs"]["partial"] >= 1
    assert default["gpu_hours_partial"] > 0
    # Partial gangs hold GPUs that do no work: bound share exceeds the working share.
    assert default["gpu_utilization"] > default["gpu_utilization_working"]
    assert muster["gpu_utilization"] == muster["gpu_utilization_working"]


def test_recorded_bound_pods_keep_their_capacity_and_gang_completes(catalog: Catalog) -> None:
    # A JobSet of 2 x 8 GPUs with one pod already bound (recorded) on a 2-node cluster with
    # one node busy with a bare pod: the missing member has nowhere to go, and Muster must
    # not bind anything more; the recorded member counts toward the gang.
    text = """
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: n1},
   status: {allocatable: {cpu: "32", memory: 64Gi, nvidia.com/gpu: "8"}}}
- {apiVersion: v1, kind: Node, metadata: {name: n2},
   status: {allocatable: {cpu: "32", memory: 64Gi, nvidia.com/gpu: "8"}}}
- apiVersion: v1
  kind: Pod
  metadata: {name: other, namespace: x, uid: u-other}
  spec:
    nodeName: n2
    containers: [{name: c, resources: {requests: {nvidia.com/gpu: "8"}}}]
  status: {phase: Running}
---
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: js, namespace: ml, uid: js-uid}
spec:
  replicatedJobs:
  - name: w
    replicas: 1
    template:
      spec:
        parallelism: 2
        template:
          spec:
            containers: [{name: c, resources: {requests: {nvidia.com/gpu: "8"}}}]
"""
    scenario = scenario_from_objects(parse_snapshot(text), catalog=catalog)
    report = simulate(scenario, "muster").report
    assert report["gangs"]["total"] == 1
    assert report["gangs"]["admitted"] == 0
    assert report["gangs"]["partial"] == 0
    assert report["pods"]["bound"] == 1  # only the bare pod that was already running
    assert report["oversubscribed_nodes"] == 0


def test_same_input_gives_identical_json(catalog: Catalog) -> None:
    spec = SyntheticSpec(nodes=6, workloads=25, arrival_rate=0.02, gang_sizes=(1, 2, 4, 8))
    first = simulate(generate(spec, seed=3, catalog=catalog), "muster")
    second = simulate(generate(spec, seed=3, catalog=catalog), "muster")
    assert json.dumps(first.report, sort_keys=True) == json.dumps(second.report, sort_keys=True)
    assert first.utilization == second.utilization
    other = simulate(generate(spec, seed=4, catalog=catalog), "muster")
    assert other.report != first.report


def test_timeline_naming_an_absent_workload_is_an_error(catalog: Catalog) -> None:
    objects = load_snapshot(EXAMPLE)
    objects.append({"apiVersion": "muster.dev/v1alpha1", "kind": "Timeline",
                    "metadata": {"name": "second"}, "spec": {"entries": []}})
    with pytest.raises(ReplayInputError, match="one Timeline"):
        scenario_from_objects(objects, catalog=catalog)
    objects = [o for o in load_snapshot(EXAMPLE) if o["kind"] != "JobSet"]
    with pytest.raises(ReplayInputError, match="JobSet/ml/pretrain"):
        scenario_from_objects(objects, catalog=catalog)


def test_timeline_runtime_must_be_seconds(catalog: Catalog) -> None:
    objects = [o for o in load_snapshot(EXAMPLE) if o["kind"] != "Timeline"]
    objects.append({"apiVersion": "muster.dev/v1alpha1", "kind": "Timeline",
                    "metadata": {"name": "t"},
                    "spec": {"entries": [{"workload": "JobSet/ml/pretrain", "runtime": "1h"}]}})
    with pytest.raises(ReplayInputError, match=r"entries\[0\]\.runtime"):
        scenario_from_objects(objects, catalog=catalog)


def test_cli_compare_prints_one_report_per_scheduler(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:
    plot = tmp_path / "replay.png"
    code = main(["simulate", str(EXAMPLE), "--compare", "default,muster", "-o", "json",
                 "--plot", str(plot)])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data["schedulers"]) == {"default", "muster"}
    assert data["schedulers"]["muster"]["gangs"]["partial"] == 0
    assert data["schedulers"]["default"]["gangs"]["partial"] >= 1
    assert {"p50", "p95"} <= set(data["schedulers"]["muster"]["gang_wait_seconds"])
    assert plot.stat().st_size > 10_000


def test_cli_rejects_unknown_scheduler_and_bad_synthetic_key(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(EXAMPLE), "--compare", "default,volcano"]) == 1
    assert "schedulers are default, muster, muster+gates" in capsys.readouterr().err
    assert main(["simulate", "--synthetic", "zones=3"]) == 1
    assert "KEY one of" in capsys.readouterr().err


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), nodes=st.integers(2, 6), workloads=st.integers(3, 10),
       rate=st.sampled_from([0.002, 0.01, 0.05]))
def test_muster_never_leaves_a_partial_gang_on_random_days(
        seed: int, nodes: int, workloads: int, rate: float) -> None:
    spec = SyntheticSpec(nodes=nodes, workloads=workloads, arrival_rate=rate,
                         gang_sizes=(1, 2, 3, 4, 6), gpus_per_pod=(1, 2),
                         runtime=(60.0, 1800.0))
    scenario = generate(spec, seed=seed, catalog=packaged_catalog())
    report = simulate(scenario, "muster").report
    assert report["gangs"]["partial"] == 0
    assert report["gpu_hours_partial"] == 0.0
    assert report["oversubscribed_nodes"] == 0
    # At most 12 GPUs per gang on at least 16: each fits alone, so each is admitted in time.
    assert report["gangs"]["admitted"] == report["gangs"]["total"]


@pytest.mark.parametrize("horizon", [5_000.0, 20_000.0])
def test_incremental_index_equals_the_one_the_core_derives(catalog: Catalog,
                                                           horizon: float) -> None:
    spec = SyntheticSpec(nodes=8, workloads=40, arrival_rate=0.01, gpus_per_pod=(1, 2, 8),
                         elastic=0.5)
    sim = Simulation(generate(spec, seed=11, catalog=catalog),
                     SchedulerSettings(mode=Mode.MUSTER))
    sim.run(horizon=horizon)
    model = sim.cluster
    kept = index_of(model.snapshot())
    fresh_snapshot = ClusterSnapshot.of(model.nodes.values(), dict(model.pods).values(),
                                        dict(model.workloads).values(), dict(model.memberships))
    fresh = index_of(fresh_snapshot)
    assert any(model.base[n] != model.empty[n] for n in model.nodes)  # something is bound
    assert dict(kept.base) == dict(fresh.base)
    assert dict(kept.gang_pods) == dict(fresh.gang_pods)
    assert dict(kept.pods_on) == dict(fresh.pods_on)
    assert classes_of(kept.base) == {c: tuple(n) for c, n in classes_of(fresh.base).items()}
    # The scheduler cache (bound + assumed pods), kept as pods bind and leave, is the same as
    # recomputed from each node's pods; so is the oversubscription check read from it.
    for name in model.nodes:
        placed = [replace(model.pods[u], node_name=name) for u in model.on_node[name]]
        assert model.cache[name] == node_capacity(model.nodes[name], placed)
        assert model.oversubscribed(name) == model.oversubscribed_from_scratch(name) == {}
