"""``muster get``, ``describe`` and ``fit`` keep kubectl's habits: the kubeconfig's current
context by default, ``TYPE/NAME`` and ``TYPE NAME``, short names, ``--no-headers``,
``--as``/``--as-group``, "did you mean" for a kind typo, ``muster get gangs`` and ``-o
json|yaml`` of real objects."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.unit.cli.helpers import DATA, dead_kubeconfig, muster
from tests.unit.cli.snapshots import node
from tests.unit.kube.fakeapi import FakeApiServer, fake_api

STORY = DATA / "story-jobset.yaml"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/jobsets"


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeApiServer]:
    """An API server serving JobSets, the story JobSet in it, and $KUBECONFIG naming it as
    the current context (``fake``)."""
    with fake_api() as server:
        server.cluster.extra_groups["jobset.x-k8s.io/v1alpha2"] = [
            {"name": "jobsets", "kind": "JobSet", "namespaced": True, "shortNames": ["js"]}]
        server.cluster.put(JOBSETS, yaml.safe_load(STORY.read_text()))
        monkeypatch.setenv("KUBECONFIG", str(server.kubeconfig(tmp_path)))
        yield server


def test_fit_without_flags_asks_the_current_contexts_cluster(capsys, api: FakeApiServer):
    api.cluster.put("/api/v1/nodes", node("big", gpus=16))
    ran = muster(capsys, "fit", "-f", STORY, "-o", "json")
    assert ran.code == 0, ran.err
    [cluster] = ran.json()["clusters"]
    assert (cluster["name"], cluster["fits"]) == ("fake", True)


def test_fit_names_the_current_context_it_could_not_reach(capsys, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("KUBECONFIG", str(dead_kubeconfig(tmp_path)))
    ran = muster(capsys, "fit", "-f", STORY, "--request-timeout", "2")
    assert ran.code == 2
    assert "warning: context dead:" in ran.err


def _gang(name: str, namespace: str, state: str, bound: int) -> dict[str, object]:
    return {"apiVersion": "muster.dev/v1alpha1", "kind": "Gang",
            "metadata": {"name": name, "namespace": namespace},
            "status": {"gang": f"{namespace}/{name.removeprefix('jobset-')}",
                       "workload": f"JobSet/{namespace}/{name.removeprefix('jobset-')}",
                       "state": state, "minMember": 3, "pods": 3, "bound": bound,
                       "reason": "0 of 3 pods fit"}}


@pytest.mark.parametrize("target", [("js/story",), ("js", "story"), ("jobset/story",),
                                    ("jobsets.jobset.x-k8s.io", "story")],
                         ids=["short-slash-name", "short-then-name", "kind-slash-name",
                              "plural-dot-group-then-name"])
def test_get_takes_type_slash_name_and_type_name_with_short_names(capsys, api, target):
    other = yaml.safe_load(STORY.read_text())
    other["metadata"]["name"] = "other"
    api.cluster.put(JOBSETS, other)
    ran = muster(capsys, "get", *target, "-A", "-o", "name")
    assert ran.code == 0, ran.err
    assert ran.out.split() == ["jobset.jobset.x-k8s.io/story"]


def test_get_of_a_name_that_does_not_exist_says_not_found_and_exits_1(capsys, api):
    ran = muster(capsys, "get", "js/nope", "-A")
    assert ran.code == 1 and 'js "nope" not found' in ran.err


def test_no_headers_prints_the_rows_alone(capsys, api):
    ran = muster(capsys, "get", "js", "-A", "--no-headers")
    assert ran.code == 0, ran.err
    [line] = ran.out.strip().splitlines()
    assert line.split()[:2] == ["ml", "story"]


@pytest.mark.parametrize(("typo", "meant"), [("jobsts", "jobsets"), ("leaderworkersets2",
                                                                        "leaderworkersets")])
def test_a_kind_typo_is_answered_with_the_kind_meant(capsys, typo, meant):
    ran = muster(capsys, "get", typo, "-f", STORY)
    assert ran.code == 1
    assert f"unknown kind {typo}; did you mean {meant}" in ran.err


def test_get_gangs_lists_the_gang_objects_with_one_spelling_of_each_state(capsys, api):
    api.cluster.extra_groups["muster.dev/v1alpha1"] = [
        {"name": "gangs", "kind": "Gang", "namespaced": True, "shortNames": ["mg"]}]
    api.cluster.put("/apis/muster.dev/v1alpha1/gangs", _gang("jobset-story", "ml", "Waiting", 0))
    api.cluster.put("/apis/muster.dev/v1alpha1/gangs", _gang("jobset-done", "ml", "Bound", 3))
    ran = muster(capsys, "get", "gangs", "-A")
    assert ran.code == 0, ran.err
    lines = [line.split() for line in ran.out.strip().splitlines()]
    assert lines[0] == ["NAMESPACE", "NAME", "WORKLOAD", "STATE", "BOUND/MIN", "AGE"]
    assert [line[:5] for line in lines[1:]] == [
        ["ml", "jobset-done", "JobSet/ml/done", "Bound", "3/3"],
        ["ml", "jobset-story", "JobSet/ml/story", "Waiting", "0/3"]]
    listed = muster(capsys, "get", "mg", "jobset-story", "-A", "-o", "json").json()
    assert (listed["apiVersion"], listed["kind"], listed["metadata"]["name"]) == (
        "muster.dev/v1alpha1", "Gang", "jobset-story")


def test_get_gangs_where_the_cluster_has_none_says_so(capsys, api):
    ran = muster(capsys, "get", "gangs", "-A")
    assert ran.code == 1 and "serves no gangs.muster.dev" in ran.err


def test_as_group_without_as_is_refused(capsys, api):
    ran = muster(capsys, "get", "js", "-A", "--as-group", "team")
    assert ran.code == 1 and "--as-group needs --as" in ran.err


def test_live_get_json_prints_the_objects_as_the_api_server_has_them(capsys, api):
    [item] = muster(capsys, "get", "js/story", "-A", "-o", "json").json()["items"]
    assert (item["apiVersion"], item["kind"], item["metadata"]["name"]) == (
        "jobset.x-k8s.io/v1alpha2", "JobSet", "story")
    assert item["spec"] == yaml.safe_load(STORY.read_text())["spec"]
