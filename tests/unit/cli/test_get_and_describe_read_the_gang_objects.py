"""``muster get`` shows each workload's Gang object (GANG) and its state (STATE) when the
cluster has Gang objects, and ``describe`` reads a gang's state, reason and holders from its
Gang object first (before Muster's ``/inspect`` and the events). Neither shows a workload
Running while none of its pods is bound, whatever its operator's status says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.unit.cli.helpers import DATA, muster
from tests.unit.kube.fakeapi import FakeApiServer, fake_api

STORY = yaml.safe_load((DATA / "story-jobset.yaml").read_text())
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/jobsets"
GANGS = "/apis/muster.dev/v1alpha1/gangs"
REASON = "0 of 3 pods fit; 8 GPUs on node-2 are held for gang ml/other's plan"


def _gang_object(state: str) -> dict[str, Any]:
    return {"apiVersion": "muster.dev/v1alpha1", "kind": "Gang",
            "metadata": {"name": "jobset-story", "namespace": "ml"},
            "status": {"gang": "ml/story", "workload": "JobSet/ml/story", "state": state,
                       "minMember": 3, "pods": 3, "bound": 0, "heldAtBind": 0,
                       "reason": REASON,
                       "heldBy": "8 GPUs on node-2 are held for gang ml/other's plan"}}


def _cluster(api: FakeApiServer, *, gangs: bool) -> None:
    api.cluster.extra_groups["jobset.x-k8s.io/v1alpha2"] = [
        {"name": "jobsets", "kind": "JobSet", "namespaced": True}]
    api.cluster.put(JOBSETS, STORY)
    if gangs:
        api.cluster.extra_groups["muster.dev/v1alpha1"] = [
            {"name": "gangs", "kind": "Gang", "namespaced": True, "shortNames": ["mg"]}]
        api.cluster.put(GANGS, _gang_object("Waiting"))


def test_get_shows_each_workloads_gang_object_and_its_state(capsys, tmp_path: Path) -> None:
    with fake_api() as api:
        _cluster(api, gangs=True)
        ran = muster(capsys, "get", "jobsets", "-A", "--kubeconfig", api.kubeconfig(tmp_path))
    assert ran.code == 0, ran.err
    header, line = (row.split() for row in ran.out.strip().splitlines())
    assert header[header.index("GANG"):header.index("GANG") + 2] == ["GANG", "STATE"]
    at = header.index("GANG") + 2  # "GANGS" is two words in the row: "1 (min 3)"
    assert line[at:at + 2] == ["jobset-story", "Waiting"]


def test_get_leaves_the_gang_columns_out_where_the_cluster_has_no_gangs(capsys,
                                                                       tmp_path: Path) -> None:
    with fake_api() as api:
        _cluster(api, gangs=False)
        ran = muster(capsys, "get", "jobsets", "-A", "--kubeconfig", api.kubeconfig(tmp_path))
    assert ran.code == 0, ran.err
    assert "GANG " not in ran.out.splitlines()[0] + " "
    assert ran.err == ""


def test_describe_reads_the_gang_object_first(capsys, tmp_path: Path) -> None:
    with fake_api() as api:
        _cluster(api, gangs=True)
        ran = muster(capsys, "describe", "jobsets", "-A", "-o", "json", "--kubeconfig",
                     api.kubeconfig(tmp_path), "--muster-url", "http://127.0.0.1:9")
    assert ran.code == 0, ran.err
    [gang] = ran.json()["gangs"]
    assert (gang["state"], gang["source"], gang["reason"]) == ("Waiting", "object", REASON)
    assert gang["heldBy"] == ["8 GPUs on node-2 are held for gang ml/other's plan"]
    assert "Gang objects and events only" in ran.err  # Muster unreachable: said, not fatal


def _story_file(tmp_path: Path, *, bound: bool) -> Path:
    story = yaml.safe_load((DATA / "story-jobset.yaml").read_text())
    # A status its operator might write before any pod is bound: a Job counted ready.
    story["status"] = {"replicatedJobsStatus": [{"name": "leader", "ready": 1, "active": 1}]}
    pods = yaml.safe_load((DATA / "story-with-pods.yaml").read_text())
    for item in pods["items"]:
        if not bound:
            item["spec"].pop("nodeName", None)
    path = tmp_path / "story.yaml"
    path.write_text(yaml.safe_dump_all([story, pods]))
    return path


def test_no_workload_reads_running_while_none_of_its_pods_is_bound(capsys, tmp_path: Path):
    for bound, phase in ((False, "Initializing"), (True, "Running")):
        path = _story_file(tmp_path, bound=bound)
        [line] = muster(capsys, "get", "-f", path, "--no-headers").out.strip().splitlines()
        assert line.split()[1] == phase, bound
        described = muster(capsys, "describe", "-f", path, "-o", "json").json()
        assert described["phase"] == phase, bound
