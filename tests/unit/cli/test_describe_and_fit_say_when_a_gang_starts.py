"""``muster describe`` says when a waiting gang is expected to start and what it waits for, from
the forecast Muster keeps on its Gang object; ``muster fit -f FILE`` against a live cluster
where the workload does not fit now says when it would start if submitted now, and behind
what."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.cli.forecast import status_sentence
from extender.server.forecaster import stamp
from tests.unit.cli.helpers import DATA, muster
from tests.unit.kube.fakeapi import FakeApiServer, fake_api
from tests.unit.simulator.forecast_snapshots import jobset, node, running_pods

STORY = yaml.safe_load((DATA / "story-jobset.yaml").read_text())
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/jobsets"
GANGS = "/apis/muster.dev/v1alpha1/gangs"
NOW = 1_800_000_000.0


def _gang_object(forecast: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "muster.dev/v1alpha1", "kind": "Gang",
            "metadata": {"name": "jobset-story", "namespace": "ml"},
            "status": {"gang": "ml/story", "workload": "JobSet/ml/story", "state": "Waiting",
                       "minMember": 3, "pods": 3, "bound": 0, "heldAtBind": 0,
                       "reason": "0 of 3 pods fit", "heldBy": "", "forecast": forecast}}


def _jobsets(api: FakeApiServer) -> None:
    api.cluster.extra_groups["jobset.x-k8s.io/v1alpha2"] = [
        {"name": "jobsets", "kind": "JobSet", "namespaced": True}]


def test_describe_says_when_the_gang_is_expected_to_start_and_behind_what(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    forecast = {"start": stamp(time.time() + 12 * 60 + 30), "upperBound": False,
                "waitsFor": ["JobSet/ml/train-3"], "unknownRuntimes": []}
    with fake_api() as api:
        _jobsets(api)
        api.cluster.put(JOBSETS, STORY)
        api.cluster.extra_groups["muster.dev/v1alpha1"] = [
            {"name": "gangs", "kind": "Gang", "namespaced": True}]
        api.cluster.put(GANGS, _gang_object(forecast))
        ran = muster(capsys, "describe", "jobsets", "-A", "--kubeconfig",
                     api.kubeconfig(tmp_path), "--muster-url", "")
    assert ran.code == 0, ran.err
    assert "forecast: expected to start in about 12m, when ml/train-3 finishes" in ran.out


@pytest.mark.parametrize(("forecast", "said"), [
    pytest.param({"start": "Now"}, "expected to start now", id="fits-now"),
    pytest.param({"start": stamp(NOW + 3600), "upperBound": True,
                  "waitsFor": ["JobSet/ml/a", "JobSet/ml/b"]},
                 "expected to start within 60m, when ml/a and ml/b finish",
                 id="an-upper-bound-is-within"),
    pytest.param({"start": "Unknown", "unknownRuntimes": ["JobSet/ml/serve"]},
                 "start unknown: it waits for ml/serve, which has no expected runtime "
                 "(muster.dev/expected-runtime)", id="unknown-names-what-lacks-a-runtime"),
    pytest.param({"start": "Never"}, "not expected to start: no workload's end makes room "
                 "for it", id="never"),
    pytest.param({"start": ""}, "", id="not-waiting-says-nothing"),
])
def test_a_gang_objects_forecast_is_said_in_one_sentence(forecast: dict[str, Any],
                                                          said: str) -> None:
    assert status_sentence(forecast, NOW) == said


def _running_cluster(api: FakeApiServer, started: float) -> None:
    """Two 8-GPU nodes held by JobSet ml/train, expected to run 10m, started at ``started``."""
    _jobsets(api)
    for n in ("n0", "n1"):
        api.cluster.put("/api/v1/nodes", node(n))
    api.cluster.put(JOBSETS, jobset("train", runtime="10m", created=started - 30))
    for pod in running_pods("train", "n0", "n1"):
        pod["status"]["startTime"] = stamp(started)
        api.cluster.put("/api/v1/pods", pod)


def test_fit_against_a_live_cluster_says_when_it_would_start_and_behind_what(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    wanted = tmp_path / "next.yaml"
    wanted.write_text(yaml.safe_dump(jobset("next", pods=2)))
    with fake_api() as api:
        _running_cluster(api, started=time.time() - 240)
        kubeconfig = str(api.kubeconfig(tmp_path))
        as_json = muster(capsys, "fit", "-f", str(wanted), "--kubeconfig", kubeconfig,
                         "-o", "json")
        as_table = muster(capsys, "fit", "-f", str(wanted), "--kubeconfig", kubeconfig)
    assert as_json.code == 1, as_json.err
    [cluster] = as_json.json()["clusters"]
    assert cluster["fits"] is False
    [gang] = cluster["forecast"]
    assert (gang["gang"], gang["outlook"], gang["waitsFor"]) == (
        "ml/next", "starts", ["JobSet/ml/train"])
    assert 340 <= gang["startSeconds"] <= 361, gang
    assert "gang ml/next expected to start in about 5m" in as_table.out
    assert "when ml/train finishes" in as_table.out


def test_fit_gives_no_forecast_where_the_workload_fits_now(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    wanted = tmp_path / "small.yaml"
    wanted.write_text(yaml.safe_dump(jobset("small", pods=1)))
    with fake_api() as api:
        _jobsets(api)
        for n in ("n0", "n1"):
            api.cluster.put("/api/v1/nodes", node(n))
        ran = muster(capsys, "fit", "-f", str(wanted), "--kubeconfig",
                     str(api.kubeconfig(tmp_path)), "-o", "json")
    assert ran.code == 0, ran.err
    [cluster] = ran.json()["clusters"]
    assert cluster["fits"] is True and "forecast" not in cluster
