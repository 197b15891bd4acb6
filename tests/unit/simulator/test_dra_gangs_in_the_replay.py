"""The gang replay counts GPUs that pods take through ResourceClaims, through the same session
the extender runs: a recorded cluster's ResourceSlices are the nodes' devices, a JobSet's
ResourceClaimTemplate its pods' demand. Gangs start whole, one after another, never two on one
node's devices; a device-plugin node never takes a claim pod."""

from __future__ import annotations

from typing import Any

from extender.core.model.values import PodInfo
from extender.files.catalog import packaged_catalog
from simulator.scheduler_values import Mode, SchedulerSettings
from simulator.simulation import Simulation
from simulator.snapshot_replay import scenario_from_objects
from tests.unit.core.devices.dra_objects import device_class, gpu_node_slice, node, template


def jobset(name: str, workers: int, *, created: str) -> dict[str, Any]:
    pod = {"schedulerName": "muster",
           "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "eight"}],
           "containers": [{"name": "c", "resources": {"claims": [{"name": "gpus"}]}}]}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}",
                         "creationTimestamp": created},
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
                "parallelism": workers, "completions": workers,
                "template": {"spec": pod}}}}]}}


def timeline(runtimes: dict[str, float]) -> dict[str, Any]:
    return {"apiVersion": "muster.dev/v1alpha1", "kind": "Timeline",
            "metadata": {"name": "t"},
            "spec": {"entries": [{"workload": f"JobSet/ml/{n}", "arrival": 0, "runtime": r}
                                   for n, r in runtimes.items()]}}


class Recording(Simulation):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bound_at: list[tuple[float, str, str]] = []

    def _bound(self, pod: PodInfo, now: float) -> None:
        self.bound_at.append((now, pod.name, pod.node_name or ""))
        super()._bound(pod, now)


def test_claim_gangs_take_only_dra_nodes_whole_and_in_turn() -> None:
    objects = [device_class(), template("eight", "ml", count=8),
               *(node(f"dra-{i}") for i in range(3)),
               *(gpu_node_slice(f"dra-{i}") for i in range(3)),
               node("plugin-0", gpus=8),
               jobset("first", 3, created="2026-01-01T00:00:00Z"),
               jobset("second", 2, created="2026-01-01T00:00:01Z"),
               timeline({"first": 100, "second": 50})]
    scenario = scenario_from_objects(objects, catalog=packaged_catalog())
    sim = Recording(scenario, SchedulerSettings(mode=Mode.MUSTER, exhaustive=True))
    sim.run(horizon=1000)
    first = [(t, n) for t, p, n in sim.bound_at if p.startswith("first")]
    second = [(t, n) for t, p, n in sim.bound_at if p.startswith("second")]
    assert len(first) == 3 and len(second) == 2
    assert {n for _, n in first} == {"dra-0", "dra-1", "dra-2"}
    assert all(n.startswith("dra-") for _, n in second)
    # The second gang waited whole for the first's devices, then started whole.
    assert min(t for t, _ in second) >= max(t for t, _ in first) + 100
    assert len({t for t, _ in second}) == 1
