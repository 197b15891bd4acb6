"""One sentence says why a gang waits, wherever a user reads it: the Event on its workload,
its Gang object's reason, ``muster describe`` and ``muster fit``; and it names the running
workload holding the GPUs the gang needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.cli.describe import show
from extender.cli.gangstate import gang_answers
from extender.cli.workloads import base_descriptors, workloads_in_file
from extender.server.service import GangService
from extender.server.settings import Settings
from extender.server.wire import parse_extender_args
from extender.state.memory import MemoryBinder
from extender.state.ports import MemoryEvents, MemoryGangObjects
from tests.unit.cli.helpers import muster
from tests.unit.server import builders as b

SAID = ("gang ml/next: 1 of 2 pods fit; the worker pod left needs 8 nvidia.com/gpu on one "
        "node, the largest free is 0 once those that fit are placed; held by ml/train (16 GPUs "
        "on 2 nodes)")


def _cluster() -> list[dict[str, Any]]:
    """Three 8-GPU nodes, JobSet ml/train bound on two of them."""
    return [b.gpu_node("n0"), b.gpu_node("n1"), b.gpu_node("n2"),
            b.jobset("train", workers=2, gpus=8), b.job_of("train"),
            b.jobset_pod("train", 0, gpus=8, node="n0"),
            b.jobset_pod("train", 1, gpus=8, node="n1")]


def test_the_event_the_gang_object_describe_and_fit_say_the_same_sentence(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    waiting = [b.jobset("next", workers=2, gpus=8), b.job_of("next"),
               b.jobset_pod("next", 0, gpus=8), b.jobset_pod("next", 1, gpus=8)]
    store = b.store_of([*_cluster(), *waiting])
    events, objects = MemoryEvents(), MemoryGangObjects()
    svc = GangService(store, settings=Settings(), clock=b.Clock(), binder=MemoryBinder(store),
                      events=events, gang_objects=objects)
    svc.filter(parse_extender_args(b.filter_body(waiting[2], ["n0", "n1", "n2"])))
    svc.housekeep()
    [told] = [e.message for e in events.workload_events() if e.reason == "GangWaiting"]
    status = objects.objects()[("ml", "jobset-next")]["status"]
    assert told == SAID
    assert status["reason"] == SAID
    # describe, from the Gang object
    path = tmp_path / "next.yaml"
    path.write_text(yaml.safe_dump(waiting[0]))
    args = type("Args", (), {"descriptors": None, "no_builtin": False})()
    [found] = [f for f in workloads_in_file(str(path), base_descriptors(args))[1]
               if f.tree.ref.kind == "JobSet"]
    answers = gang_answers(found, events=[], inspected=None,
                           objects={"ml/next": {"status": status}})
    show([found], "table", [{"age": "1m", "gangStates": answers, "events": []}])
    assert f"  reason: {SAID}" in capsys.readouterr().out
    # fit, before it was submitted, against the same cluster
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List",
                                       "items": _cluster()}))
    ran = muster(capsys, "fit", "-f", path, "--snapshot", cluster, "-o", "json")
    assert ran.code == 1, ran.err
    [gang] = ran.json()["clusters"][0]["gangs"]
    assert gang["reason"] == SAID


def test_fit_names_nobody_for_a_gang_no_empty_cluster_holds(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text(yaml.safe_dump(b.jobset("huge", workers=4, gpus=8)))
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List",
                                       "items": _cluster()}))
    ran = muster(capsys, "fit", "-f", path, "--snapshot", cluster, "-o", "json")
    [gang] = ran.json()["clusters"][0]["gangs"]
    assert gang["fits"] is False and "held by" not in gang["reason"]
