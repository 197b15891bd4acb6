"""``/inspect/gangs`` and the ``muster_gangs`` gauge count only gangs whose pods name a
scheduler profile this Muster serves (``--scheduler-names``), and show who holds what a
waiting gang needs."""

from __future__ import annotations

import time
from typing import Any

import pytest

from extender.server.service import GangService
from extender.server.settings import Settings, SettingsError, build_settings
from extender.server.wire import parse_extender_args
from extender.state.memory import MemoryBinder
from extender.state.ports import MemoryEvents
from tests.unit.server.builders import filter_body, gpu_node, job_of, jobset, jobset_pod, store_of


def _pods(js: str, workers: int, *, scheduler: str | None) -> list[dict[str, Any]]:
    pods = [jobset_pod(js, i, gpus=8) for i in range(workers)]
    for pod in pods:
        if scheduler is None:
            pod["spec"].pop("schedulerName")
        else:
            pod["spec"]["schedulerName"] = scheduler
    return pods


def _service(objects: list[dict[str, Any]], **settings: Any) -> GangService:
    store = store_of([gpu_node("n0"), gpu_node("n1"), *objects])
    return GangService(store, settings=Settings(**settings), clock=time.time,
                       binder=MemoryBinder(store), events=MemoryEvents())


def _two_jobsets() -> list[dict[str, Any]]:
    return [jobset("ours", workers=2, gpus=8), job_of("ours"),
            *_pods("ours", 2, scheduler="muster"),
            jobset("theirs", workers=2, gpus=8), job_of("theirs"),
            *_pods("theirs", 2, scheduler=None)]


def test_a_gang_of_pods_left_to_another_scheduler_is_neither_listed_nor_counted() -> None:
    svc = _service(_two_jobsets())
    assert [g["gang"] for g in svc.inspect_gangs()] == ["ml/ours"]
    assert svc.gang_counts() == {"waiting": 1, "planned": 0, "bound": 0, "finished": 0,
                                 "expired": 0}


def test_every_profile_named_is_served() -> None:
    svc = _service(_two_jobsets(), scheduler_names=("muster", "default-scheduler"))
    assert [g["gang"] for g in svc.inspect_gangs()] == ["ml/ours", "ml/theirs"]
    assert svc.gang_counts()["waiting"] == 2


def test_a_gang_without_pods_yet_is_judged_by_its_pod_template() -> None:
    js = jobset("early", workers=2, gpus=8)
    svc = _service([js])
    assert svc.inspect_gangs() == []  # the template names no scheduler: default-scheduler's
    template = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    template["spec"]["schedulerName"] = "muster"
    assert [g["gang"] for g in _service([js]).inspect_gangs()] == ["ml/early"]


def test_a_waiting_gang_shows_who_holds_its_capacity() -> None:
    objects = [jobset("first", workers=2, gpus=8), job_of("first"),
               *_pods("first", 2, scheduler="muster"),
               jobset("second", workers=2, gpus=8), job_of("second"),
               *_pods("second", 2, scheduler="muster")]
    svc = _service(objects)
    for pod in (objects[2], objects[6]):  # each gang's first pod
        svc.filter(parse_extender_args(filter_body(pod, ["n0", "n1"])))
    gangs = {g["gang"]: g for g in svc.inspect_gangs()}
    assert gangs["ml/first"]["state"] == "planned" and gangs["ml/first"]["heldBy"] == []
    second = gangs["ml/second"]
    assert second["state"] == "waiting"
    assert second["heldBy"] == [{"kind": "plan", "gang": "ml/first", "nodes": ["n0", "n1"],
                                 "gpus": 16.0, "pods": 2}]
    assert second["lastReason"].endswith("16 GPUs on n0, n1 are held for gang ml/first's plan")


def test_scheduler_names_come_from_a_comma_separated_variable_and_none_is_refused() -> None:
    settings = build_settings({}, {"MUSTER_SCHEDULER_NAMES": "muster, default-scheduler"})
    assert settings.scheduler_names == ("muster", "default-scheduler")
    with pytest.raises(SettingsError, match="MUSTER_SCHEDULER_NAMES: needs at least one"):
        build_settings({}, {"MUSTER_SCHEDULER_NAMES": " , "})


def test_a_gang_that_ran_whole_and_whose_pods_succeeded_is_finished_not_waiting() -> None:
    pods = _pods("done", 2, scheduler="muster")
    for pod, node in zip(pods, ("n0", "n1"), strict=True):
        pod["spec"]["nodeName"] = node
        pod["status"] = {"phase": "Succeeded"}
    pods[1]["status"] = {"phase": "Running"}  # one still ending: bound plus Succeeded cover 2
    half = _pods("half", 2, scheduler="muster")
    half[0]["spec"]["nodeName"] = "n0"
    half[0]["status"] = {"phase": "Succeeded"}  # one Succeeded, one never bound: not whole
    svc = _service([jobset("done", workers=2, gpus=8), job_of("done"), *pods,
                    jobset("half", workers=2, gpus=8), job_of("half"), *half])
    states = {g["gang"]: (g["state"], g["succeeded"]) for g in svc.inspect_gangs()}
    assert states == {"ml/done": ("finished", 1), "ml/half": ("waiting", 1)}
    assert svc.gang_counts()["finished"] == 1
