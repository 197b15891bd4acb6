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
