"""A JobSet whose workers dependsOn the leader being Ready starts: leader first, workers after.

The JobSet controller creates the workers' Jobs only once the leader is Ready, so the whole
gang never exists at once. Muster plans the whole gang on the leader's filter (its later
stage's capacity held by the plan), releases the leader at once, keeps other gangs off the
workers' capacity, and releases the workers together when they come. A gang whose whole
capacity does not fit does not start its first stage; a stage that never comes gives its
capacity back with an event on the workload.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from extender.server.service import GangService
from extender.server.settings import Settings
from extender.server.wire import parse_binding_args, parse_extender_args
from extender.state.memory import MemoryBinder
from extender.state.ports import MemoryEvents
from extender.state.store import StateStore, source_of
from tests.unit.server.builders import (
    Clock,
    bind_body,
    container,
    filter_body,
    gpu_node,
    job_of,
    jobset,
    jobset_pod,
    store_of,
)

NODES = ["n0", "n1", "n2"]


def story(name: str, *, workers: int = 2, gpus: int = 4, status: str = "Ready",
          ) -> dict[str, Any]:
    """The story JobSet of the docs: 1 leader, then workers dependsOn the leader."""
    def rjob(role: str, pods: int, depends: bool) -> dict[str, Any]:
        job: dict[str, Any] = {"name": role, "replicas": 1, "template": {"spec": {
            "parallelism": pods, "completions": pods,
            "template": {"spec": {"containers": [container(gpus)]}}}}}
        if depends:
            job["dependsOn"] = [{"name": "leader", "status": status}]
        return job

    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": "ml", "uid": f"js-{name}",
                         "creationTimestamp": "2026-12-01T10:00:00Z"},
            "spec": {"replicatedJobs": [rjob("leader", 1, False),
                                        rjob("workers", workers, True)]}}


def job(js: str, role: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{js}-{role}-0", "namespace": "ml", "uid": f"job-{js}-{role}",
                         "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                              "kind": "JobSet", "name": js, "uid": f"js-{js}",
                                              "controller": True}]},
            "spec": {"parallelism": 1, "template": {"spec": {"containers": []}}}}


def pod(js: str, role: str, index: int, *, gpus: int = 4) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{js}-{role}-0-{index}", "namespace": "ml",
                         "uid": f"uid-{js}-{role}-{index}",
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                              "name": f"{js}-{role}-0", "uid": f"job-{js}-{role}",
                                              "controller": True}],
                         "labels": {"jobset.sigs.k8s.io/jobset-name": js,
                                    "jobset.sigs.k8s.io/replicatedjob-name": role,
                                    "jobset.sigs.k8s.io/job-index": "0"}},
            "spec": {"schedulerName": "muster", "containers": [container(gpus)]},
            "status": {"phase": "Pending"}}


class Rig:
    def __init__(self, objects: list[dict[str, Any]], *, nodes: int = 3) -> None:
        self.clock = Clock()
        self.store: StateStore = store_of([*(gpu_node(f"n{i}", gpus=4) for i in range(nodes)),
                                           *objects])
        self.events = MemoryEvents()
        self.svc = GangService(self.store, settings=Settings(bind_timeout=5.0, plan_ttl=30.0,
                                                             stage_ttl=120.0),
                               clock=self.clock, binder=MemoryBinder(self.store),
                               events=self.events)
        self.nodes = [f"n{i}" for i in range(nodes)]

    def add(self, *objects: dict[str, Any]) -> None:
        """Objects created now, as their informers' watch events deliver them."""
        for obj in objects:
            self.store.apply(source_of(obj), "ADDED", obj)

    def filter(self, raw: dict[str, Any]) -> list[str]:
        answer = self.svc.filter(parse_extender_args(filter_body(raw, self.nodes)))
        return list(answer["NodeNames"] or [])

    def bind(self, raw: dict[str, Any], node: str) -> str:
        return str(self.svc.bind(parse_binding_args(bind_body(raw, node)))["Error"])

    def node_of(self, raw: dict[str, Any]) -> str | None:
        stored = self.store.pod("ml", raw["metadata"]["name"])
        assert stored is not None
        node: str | None = (stored.get("spec") or {}).get("nodeName")
        return node


def test_the_story_jobset_binds_its_leader_first_then_both_workers_onto_the_held_capacity(
        ) -> None:
    leader = pod("story", "leader", 0)
    rig = Rig([story("story"), job("story", "leader"), leader])
    [first] = rig.filter(leader)
    assert rig.bind(leader, first) == ""  # stage 0 is the leader alone: released at once
    assert rig.node_of(leader) == first
    [shown] = [g for g in rig.svc.inspect_gangs() if g["gang"] == "ml/story"]
    assert shown["releasedStage"] == 0
    assert [(st["roles"], st["bound"], st["state"]) for st in shown["stages"]] == [
        (["leader"], 1, "released"), (["workers"], 0, "held")]
    # A second JobSet submitted meanwhile cannot take the capacity held for the workers.
    rival = jobset_pod("rival", 0, gpus=4)
    rig.add(jobset("rival", workers=1, gpus=4), job_of("rival"), rival)
    assert rig.filter(rival) == []
    # The JobSet controller creates the workers once the leader is Ready.
    workers = [pod("story", "workers", i) for i in range(2)]
    rig.add(job("story", "workers"), *workers)
    held = {n for n in rig.nodes if n != first}
    w0 = rig.filter(workers[0])
    assert set(w0) <= held and w0
    w1 = rig.filter(workers[1])
    assert set(w1) <= held and w1
    reasons = [e.message for e in rig.events.workload_events() if e.reason == "GangAdmitted"]
    assert reasons  # the leader's stage said so
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(rig.bind, workers[0], w0[0])
        rig.clock.now += 1
        second = sorted(set(w1) - {w0[0]}) or w1
        assert rig.bind(workers[1], second[0]) == ""
        assert waiting.result(timeout=5) == ""
    assert {rig.node_of(w) for w in workers} == held
    assert rig.filter(rival) == []  # the cluster is full now, not held
    [shown] = [g for g in rig.svc.inspect_gangs() if g["gang"] == "ml/story"]
    assert shown["lastReason"] == \
        "gang ml/story: stage 1 (workers) 2 of 2 at bind; stage 1 bound whole"


def test_a_staged_jobset_whose_later_stage_cannot_fit_binds_nothing_and_says_why() -> None:
    leader = pod("big", "leader", 0)
    rig = Rig([story("big", workers=3), job("big", "leader"), leader])
    assert rig.filter(leader) == []  # 4 pods of 4 GPUs on 3 nodes of 4 GPUs: never started
    waiting = [e for e in rig.events.events() if e.reason == "GangWaiting"]
    assert waiting and "big" in waiting[-1].message
    assert rig.node_of(leader) is None


def test_a_stage_that_never_comes_gives_its_capacity_back_with_an_event_on_the_workload(
        ) -> None:
    leader = pod("story", "leader", 0)
    rig = Rig([story("story"), job("story", "leader"), leader])
    [first] = rig.filter(leader)
    assert rig.bind(leader, first) == ""
    rival = jobset_pod("rival", 0, gpus=4)
    rig.add(jobset("rival", workers=1, gpus=4), job_of("rival"), rival)
    assert rig.filter(rival) == []
    rig.clock.now += 121  # past --stage-ttl: the workers never appeared (the leader failed)
    rig.svc.housekeep()
    told = [e for e in rig.events.workload_events() if e.reason == "GangStageExpired"]
    assert [e.name for e in told] == ["story"]
    assert "stage 1 (workers) did not appear within 120s" in told[0].message
    assert rig.filter(rival) != []  # the held capacity is free again


def test_a_jobset_whose_workers_wait_for_the_leader_to_complete_is_two_gangs() -> None:
    leader = pod("init", "leader", 0)
    rig = Rig([story("init", status="Complete"), job("init", "leader"), leader])
    gangs = rig.store.snapshot().gangs
    assert sorted(gangs) == ["ml/init", "ml/init/workers"]
    assert gangs["ml/init"].pods == 1 and gangs["ml/init/workers"].min_member == 2
    [first] = rig.filter(leader)
    assert rig.bind(leader, first) == ""
    # Nothing is held for the workers while the leader runs to completion.
    rival = jobset_pod("rival", 0, gpus=4)
    rig.add(jobset("rival", workers=1, gpus=4), job_of("rival"), rival)
    assert rig.filter(rival) != []


def test_after_a_restart_between_stages_the_workers_capacity_is_still_held_for_them() -> None:
    leader = pod("story", "leader", 0)
    rig = Rig([story("story"), job("story", "leader"), leader])
    [first] = rig.filter(leader)
    assert rig.bind(leader, first) == ""
    # Muster restarts while the leader starts: the new session rebuilds from the cluster.
    rig.svc = GangService(rig.store, settings=Settings(bind_timeout=5.0, plan_ttl=30.0,
                                                       stage_ttl=120.0),
                          clock=rig.clock, binder=MemoryBinder(rig.store), events=rig.events)
    rig.svc.housekeep()  # its first look at the cluster
    rival = jobset_pod("rival", 0, gpus=4)
    rig.add(jobset("rival", workers=1, gpus=4), job_of("rival"), rival)
    rig.clock.now += 60  # past the plan TTL, within the stage TTL
    assert rig.filter(rival) == []  # still held for the workers, not given away
