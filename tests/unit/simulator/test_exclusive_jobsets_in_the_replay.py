"""The gang replay runs a JobSet under ``exclusive-topology`` as its controller does: each
Job's leader is created first, its followers once the leader is bound, pinned to the leader's
rack (JobSet's pod webhook); every Job lands whole in a rack of its own. A JobSet needing more
racks than are free never starts."""

from __future__ import annotations

from typing import Any

from extender.core.model.values import PodInfo
from extender.files.catalog import packaged_catalog
from simulator.scheduler_values import Mode, SchedulerSettings
from simulator.simulation import Simulation
from simulator.snapshot_replay import scenario_from_objects

RACK = "example.com/rack"


def node(name: str, rack: str, gpus: int = 8) -> dict[str, Any]:
    alloc = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus), "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {RACK: rack}},
            "status": {"allocatable": alloc, "capacity": alloc}}


def jobset(name: str, jobs: int, *, pods: int = 4, gpus: int = 4,
           created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}",
                         "creationTimestamp": created,
                         "annotations": {"alpha.jobset.sigs.k8s.io/exclusive-topology": RACK}},
            "spec": {"replicatedJobs": [{"name": "w", "replicas": jobs, "template": {"spec": {
                "parallelism": pods, "completions": pods, "template": {"spec": {
                    "schedulerName": "muster", "containers": [{"name": "c", "resources": {
                        "limits": {"nvidia.com/gpu": gpus}}}]}}}}}]}}


class Recording(Simulation):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bound_at: list[tuple[float, str, str]] = []

    def _bound(self, pod: PodInfo, now: float) -> None:
        member = self.cluster.memberships[pod.uid]
        self.bound_at.append((now, member.role, pod.name))
        super()._bound(pod, now)


RACKS = [node(f"{r}{i}", r) for r in "xyz" for i in range(2)]


def replay(objects: list[dict[str, Any]]) -> Recording:
    scenario = scenario_from_objects(objects, catalog=packaged_catalog())
    sim = Recording(scenario, SchedulerSettings(mode=Mode.MUSTER, exhaustive=True))
    sim.run(horizon=600)
    return sim


def racks_by_job(sim: Simulation, workload: str) -> dict[tuple[str, int], set[str]]:
    """Per Job (replicatedJob, index), the racks its bound pods are in."""
    out: dict[tuple[str, int], set[str]] = {}
    for uid, pod in sim.cluster.pods.items():
        member = sim.cluster.memberships[uid]
        if member.workload.name == workload and pod.node_name is not None:
            job = (member.role.removesuffix("/followers"), member.replica or 0)
            out.setdefault(job, set()).add(pod.node_name[0])
    return out


def test_each_job_lands_whole_in_a_rack_of_its_own_leaders_first() -> None:
    sim = replay([*RACKS, jobset("js", 2)])
    assert len(sim.bound_at) == 8
    roles = [role for _, role, _ in sorted(sim.bound_at)]
    assert roles[:2] == ["w", "w"] and set(roles[2:]) == {"w/followers"}
    first_follower = min(t for t, r, _ in sim.bound_at if r == "w/followers")
    leaders_bound = max(t for t, r, _ in sim.bound_at if r == "w")
    assert first_follower >= leaders_bound
    per_job = racks_by_job(sim, "js")
    assert all(len(racks) == 1 for racks in per_job.values())
    assert len({next(iter(r)) for r in per_job.values()}) == 2  # a different rack per Job


def test_a_jobset_needing_more_racks_than_are_free_never_starts() -> None:
    sim = replay([*RACKS, jobset("js", 2),
                  jobset("big", 2, pods=1, gpus=1, created="2026-01-01T00:00:01Z")])
    assert racks_by_job(sim, "big") == {}
    assert sim.metrics.gangs["ml/big"].bound == 0
    assert sim.metrics.gangs["ml/js"].bound == 8


def test_a_job_that_depends_on_an_exclusive_job_comes_after_its_followers_too() -> None:
    js = jobset("js", 2)
    js["spec"]["replicatedJobs"].insert(0, {**jobset("x", 1, pods=2, gpus=8)["spec"][
        "replicatedJobs"][0], "name": "lead"})
    js["spec"]["replicatedJobs"][1]["dependsOn"] = [{"name": "lead", "status": "Ready"}]
    sim = replay([*RACKS, js])
    assert len(sim.bound_at) == 10
    order = list(dict.fromkeys(role for _, role, _ in sim.bound_at))
    assert order == ["lead", "lead/followers", "w", "w/followers"]
    per_job = racks_by_job(sim, "js")
    assert sorted(per_job) == [("lead", 0), ("w", 0), ("w", 1)]
    assert all(len(racks) == 1 for racks in per_job.values())
    assert len({next(iter(r)) for r in per_job.values()}) == 3  # a rack per Job
