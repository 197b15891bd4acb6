"""The replay's ``muster+gates`` mode: new gang members wait behind Muster's gate and enter
kube-scheduler's queue only once an ungating look (the server's own) planned their gang whole;
a gang that never fits costs the queue nothing."""

from __future__ import annotations

import contextlib
from pathlib import Path
from unittest import mock

import pytest

from extender.core.decide.gating import GateBook
from extender.core.gang import bounds
from extender.core.model.values import NodeName, PodInfo
from extender.core.workloads.catalog import Catalog
from extender.files.catalog import packaged_catalog
from extender.files.snapshot import load_snapshot, parse_snapshot
from simulator.metrics import Report
from simulator.scheduler_values import Mode, SchedulerSettings
from simulator.simulation import Simulation, simulate
from simulator.snapshot_replay import scenario_from_objects
from simulator.synthetic import GPU_PRODUCT, SyntheticSpec, generate, gpu_model

EXAMPLE = Path(__file__).resolve().parents[3] / "docs" / "examples" / "gang-snapshot.yaml"


def _jobset(name: str, *, pods: int, gpus: int) -> str:
    return f"""---
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {{name: {name}, namespace: ml, uid: {name}-uid}}
spec:
  replicatedJobs:
  - {{name: w, replicas: 1, template: {{spec: {{parallelism: {pods}, template: {{spec: {{
      containers: [{{name: c, resources: {{requests: {{nvidia.com/gpu: "{gpus}"}}}}}}]}}}}}}}}}}
"""


# One node of 8 GPUs: a JobSet of 2 x 8 GPUs can never fit; one of 1 x 4 GPUs fits at once.
TOO_BIG = """
apiVersion: v1
kind: List
items:
- {apiVersion: v1, kind: Node, metadata: {name: n1},
   status: {allocatable: {cpu: "32", memory: 64Gi, nvidia.com/gpu: "8"}}}
""" + _jobset("big", pods=2, gpus=8) + _jobset("small", pods=1, gpus=4)


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return packaged_catalog()


class _Watched(Simulation):
    """A replay that records each pod kube-scheduler runs a cycle for, and its gates then."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.cycles: list[tuple[str, tuple[str, ...]]] = []
        attempt = self.scheduler._attempt

        def watched(uid: str, now: float) -> None:
            self.cycles.append((uid, self.cluster.pods[uid].gates))
            attempt(uid, now)

        self.scheduler._attempt = watched  # type: ignore[method-assign]


def test_a_gang_that_never_fits_stays_gated_and_never_reaches_a_cycle(catalog: Catalog) -> None:
    scenario = scenario_from_objects(parse_snapshot(TOO_BIG), catalog=catalog)
    gated = _Watched(scenario, SchedulerSettings(mode=Mode.GATED))
    report = gated.run().report
    assert report["gangs"]["admitted"] == 1 and report["gangs"]["partial"] == 0
    assert report["pods"]["bound"] == 1
    tried = {uid for uid, _ in gated.cycles}
    big = {uid for uid, pod in gated.cluster.pods.items() if pod.name.startswith("big-")}
    assert len(big) == 2 and not tried & big  # never in the queue
    assert all(gated.cluster.pods[u].gates == (gated.settings.core.gate,) for u in big)
    assert gated.cluster.gated == big
    assert gated.scheduler.pending() == 2
    assert gated.scheduler.stats()["gated"] == 3 and gated.scheduler.stats()["ungated"] == 1
    # Without gates each of the gang's pods takes a cycle, and fails, to learn the same.
    plain = _Watched(scenario, SchedulerSettings(mode=Mode.MUSTER))
    plain.run()
    assert {uid for uid, _ in plain.cycles} >= big
    assert plain.scheduler.stats()["gated"] == 0


def test_gated_members_enter_the_queue_only_ungated_and_no_gang_is_partial(
        catalog: Catalog) -> None:
    spec = SyntheticSpec(nodes=8, workloads=40, arrival_rate=0.01, gpus_per_pod=(1, 2, 8),
                         elastic=0.5)
    scenario = generate(spec, seed=11, catalog=catalog)
    gated = _Watched(scenario, SchedulerSettings(mode=Mode.GATED))
    report = gated.run().report
    assert gated.cycles and all(gates == () for _, gates in gated.cycles)
    stats = gated.scheduler.stats()
    assert stats["gated"] > 0
    assert stats["ungated"] + len(gated.cluster.gated) == stats["gated"]
    assert report["gangs"]["partial"] == 0 and report["oversubscribed_nodes"] == 0
    assert report["gpu_hours_partial"] == 0.0
    plain = simulate(scenario, "muster")
    # The same gangs start; the gangs that wait, wait at the gate instead of in failed
    # cycles (what fails with gates are pods of no gang, which are never gated).
    assert report["gangs"] == plain.report["gangs"]
    assert stats["failed"] * 10 < plain.stats["failed"]
    for uid in gated.cluster.gated:
        assert gated.cluster.memberships[uid].gang is not None


def test_a_gated_replay_is_deterministic_and_named(catalog: Catalog) -> None:
    spec = SyntheticSpec(nodes=6, workloads=25, arrival_rate=0.02, gpus_per_pod=(1, 4, 8))
    scenario = generate(spec, seed=5, catalog=catalog)
    first = simulate(scenario, "muster+gates")
    second = simulate(scenario, "muster+gates")
    assert first.report == second.report and first.stats == second.stats
    assert first.report["scheduler"] == "muster+gates"


def test_gates_keep_the_order_gangs_arrived_in(catalog: Catalog) -> None:
    # Three 24-GPU gangs on 32 GPUs, a minute apart: one runs at a time. The snapshot has no
    # creationTimestamps; a gang is as old as its arrival, so when the first ends the looks
    # plan the second to arrive (finetune), not the first by name (inference/serve).
    scenario = scenario_from_objects(load_snapshot(EXAMPLE), catalog=catalog)
    gated = simulate(scenario, "muster+gates")
    plain = simulate(scenario, "muster")
    assert gated.report["gang_wait_seconds"] == plain.report["gang_wait_seconds"]
    assert gated.report["gang_wait_seconds"]["p95"] == 5280.0
    assert gated.stats["failed"] == 0 < plain.stats["failed"]


def test_a_day_of_two_gpu_models_binds_each_gang_on_its_model_and_looks_less(
        catalog: Catalog) -> None:
    """Nodes of two GPU models, each workload selecting one. Every GPU pod is bound on a node
    of its model; the fit bound, counting only the nodes each role may use, plans waiting
    gangs less often than over every node, and the replay decides the same either way."""
    spec = SyntheticSpec(nodes=8, workloads=60, arrival_rate=0.01, gang_sizes=(2, 4),
                         gpus_per_pod=(4, 8), gpu_types=2)
    scenario = generate(spec, seed=3, catalog=catalog)
    models = {n.label(GPU_PRODUCT) for n in scenario.nodes}
    assert models == {gpu_model(0), gpu_model(1)}

    def replay(*, eligible: bool) -> tuple[Report, GateBook, list[tuple[str, str]]]:
        sim = Simulation(scenario, SchedulerSettings(mode=Mode.GATED, seed=3))
        binds: list[tuple[str, str]] = []  # (model selected, model of the node bound to)
        bind = sim.cluster.bind

        def watched(uid: str, node: NodeName) -> PodInfo:
            pod = bind(uid, node)
            wanted = dict(pod.shape.node_selector).get(GPU_PRODUCT)
            if wanted is not None:  # a GPU pod (a Ray head takes none and selects none)
                binds.append((wanted, str(sim.cluster.nodes[node].label(GPU_PRODUCT))))
            return pod
        sim.cluster.bind = watched  # type: ignore[method-assign]
        with contextlib.ExitStack() as switched:
            if not eligible:
                switched.enter_context(mock.patch.object(bounds, "_within_eligible",
                                                         return_value=None))
            report = sim.run().report
        return report, sim.scheduler.extender.session.gates, binds

    report, looks, binds = replay(eligible=True)
    every_node, more, _ = replay(eligible=False)
    assert binds and all(wanted == model for wanted, model in binds)
    assert report == every_node and report["gangs"]["admitted"] == 60
    assert looks.evaluated < more.evaluated
    assert looks.bounded > more.bounded
