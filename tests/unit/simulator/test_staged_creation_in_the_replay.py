"""The gang replay creates a staged workload's pods as its operator does, through the session.

The story JobSet's workers dependsOn the leader being Ready: the replay creates them only once
the leader is bound (Running, Ready), the same session as the server's releases the leader at
once and then the workers onto the capacity held for them, in the order the sandbox's real
JobSet controller shows. A staged JobSet whose later stage cannot fit never starts.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from extender.core.model.values import PodInfo
from extender.files.catalog import packaged_catalog
from simulator.scheduler_values import Mode, SchedulerSettings
from simulator.simulation import Simulation
from simulator.snapshot_replay import scenario_from_objects

REPO = Path(__file__).resolve().parents[3]
STORY = REPO / "tests" / "unit" / "cli" / "data" / "story-jobset.yaml"


def node(name: str, gpus: int = 4) -> dict[str, Any]:
    alloc = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus), "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": alloc, "capacity": alloc}}


def story(workers: int = 2, worker_gpus: int = 4) -> dict[str, Any]:
    js = copy.deepcopy(yaml.safe_load(STORY.read_text()))
    js["metadata"]["uid"] = "js-story"
    spec = js["spec"]["replicatedJobs"][1]["template"]["spec"]
    spec["parallelism"] = spec["completions"] = workers
    spec["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = \
        worker_gpus
    return js


class Recording(Simulation):
    """The replay, noting when each pod was created and bound."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bound_at: list[tuple[float, str]] = []

    def _bound(self, pod: PodInfo, now: float) -> None:
        self.bound_at.append((now, pod.name))
        super()._bound(pod, now)


def replay(objects: list[dict[str, Any]]) -> Recording:
    scenario = scenario_from_objects(objects, catalog=packaged_catalog())
    sim = Recording(scenario, SchedulerSettings(mode=Mode.MUSTER, exhaustive=True))
    sim.run(horizon=600)
    return sim


def test_the_replay_creates_the_workers_once_the_leader_is_bound_and_binds_them_whole() -> None:
    sim = replay([node("n0"), node("n1"), node("n2"), story()])
    order = [name.split("-")[1] for _, name in sorted(sim.bound_at)]
    assert order == ["leader", "workers", "workers"]
    pods = {p.name: p for p in sim.cluster.pods.values()}
    leader_bound = min(t for t, n in sim.bound_at if "-leader-" in n)
    assert all(p.created >= leader_bound for n, p in pods.items() if "-workers-" in n)
    assert len({p.node_name for p in pods.values()}) == 3
    assert sim.metrics.gangs["ml/story"].bound == 3


def test_a_staged_jobset_whose_later_stage_cannot_fit_never_starts_in_the_replay() -> None:
    sim = replay([node("n0"), node("n1"), node("n2"), story(workers=3)])
    assert sim.bound_at == []
    assert [p.name.split("-")[1] for p in sim.cluster.pods.values()] == ["leader"]
