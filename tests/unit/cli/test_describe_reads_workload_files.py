"""``muster describe -f``: roles, pods, gangs and resources of workloads in files."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from tests.unit.cli.helpers import DATA, EXAMPLES, muster

REQUIRED = {"kind", "apiVersion", "name", "namespace", "descriptor", "descriptorFormat",
            "phase", "roles", "gangs", "totals"}


def test_story_jobset_is_one_workload_of_two_roles_three_pods_12_gpus_one_gang_of_3(capsys):
    ran = muster(capsys, "describe", "-f", DATA / "story-jobset.yaml", "-o", "json")
    assert ran.code == 0, ran.err
    data = ran.json()
    assert set(data) >= REQUIRED
    assert (data["kind"], data["name"], data["namespace"]) == ("JobSet", "story", "ml")
    assert data["descriptor"] == "jobset" and data["descriptorFormat"] == "muster"
    assert [(r["name"], r["replicas"], r["pods"], r["gpusPerPod"], r["gpus"])
            for r in data["roles"]] == [("leader", 1, 1, 4, 4), ("workers", 1, 2, 4, 8)]
    # The workers dependsOn the leader being Ready: created later, a second stage.
    assert data["gangs"] == [{"name": "ml/story", "minMember": 3, "pods": 3, "gpus": 12,
                              "roles": {"leader": 1, "workers": 2},
                              "stages": [{"stage": 0, "roles": ["leader"], "minimum": 1},
                                         {"stage": 1, "roles": ["workers"], "minimum": 2}],
                              # From a file without pods, all that is known of its state:
                              "state": "Pending", "bound": 0, "reason": "", "heldBy": [],
                              "source": "pods"}]
    assert data["totals"]["pods"] == 3 and data["totals"]["gpus"] == 12
    assert (data["totals"]["cpu"], data["totals"]["memory"]) == ("24", "96Gi")


def test_story_table_shows_header_tree_and_resources_with_total_row(capsys):
    ran = muster(capsys, "describe", "-f", DATA / "story-jobset.yaml")
    assert ran.code == 0
    assert "descriptor: jobset (muster, catalog)" in ran.out
    assert "gang: ml/story (minimum 3 of 3 pods, 12 GPUs)" in ran.out
    assert "order: leader -> workers" in ran.out
    lines = ran.out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("COMPONENT"))
    assert lines[header].split() == ["COMPONENT", "REPLICAS", "GPU", "CPU", "MEMORY"]
    assert lines[header + 1].split() == ["leader", "1", "4", "8", "32Gi"]
    assert lines[header + 2].split() == ["workers", "2", "8", "16", "64Gi"]
    assert lines[header + 3].split() == ["TOTAL", "3", "12", "24", "96Gi"]


def test_pods_in_the_same_file_are_matched_with_phase_reason_node_and_ready(capsys, tmp_path):
    both = tmp_path / "both.yaml"
    both.write_text((DATA / "story-jobset.yaml").read_text() + "\n---\n"
                    + (DATA / "story-with-pods.yaml").read_text())
    data = muster(capsys, "describe", "-f", both, "-o", "json").json()
    assert data["totals"]["readyPods"] == 2 and data["totals"]["observedPods"] == 3
    leader, workers = data["roles"]
    assert leader["ready"] == 1 and workers["ready"] == 1
    assert [(p["name"], p["node"], p["gpus"]) for p in leader["observed"]] == [
        ("story-leader-0-0-abcde", "node-1", 4)]
    pending = workers["observed"][1]
    assert (pending["phase"], pending["reason"], pending["node"]) == (
        "Pending", "Unschedulable", None)
    assert pending["gang"] == "ml/story"
    table = muster(capsys, "describe", "-f", both).out
    assert "story-workers-0-1-klmno  Pending (Unschedulable)  not ready  node: -" in table
    assert "pods: 2/3 ready, 3 observed" in table


def test_lws_has_one_gang_of_size_pods_per_group(capsys):
    data = muster(capsys, "describe", "-f",
                  EXAMPLES / "lws/lws__docs__examples__tensorrt-llm__lws.yaml", "-o", "json").json()
    assert data["kind"] == "LeaderWorkerSet"
    assert [(r["name"], r["pods"], r["gpusPerPod"]) for r in data["roles"]] == [
        ("leader", 1, 8), ("worker", 1, 8)]
    assert [(g["name"], g["minMember"]) for g in data["gangs"]] == [
        ("default/tensorrt/group-0", 2)]
    assert data["totals"]["gpus"] == 16


def test_lws_sample_without_leader_template_is_three_gangs_of_four(capsys):
    data = muster(capsys, "describe", "-f",
                  EXAMPLES / "lws/lws__docs__examples__sample__lws.yaml", "-o", "yaml")
    assert data.code == 0
    parsed = yaml.safe_load(data.out)
    assert parsed["totals"]["pods"] == 12
    assert [g["minMember"] for g in parsed["gangs"]] == [4, 4, 4]


def test_raycluster_head_and_worker_group(capsys):
    data = muster(capsys, "describe", "-f", EXAMPLES /
                  "kuberay/kuberay__ray-operator__config__samples__ray-cluster.sample.yaml",
                  "-o", "json").json()
    assert [r["name"] for r in data["roles"]] == ["head", "workergroup"]
    assert data["totals"]["pods"] == 2 and data["totals"]["gpus"] == 0
    assert [g["minMember"] for g in data["gangs"]] == [2]


def test_dynamo_counts_its_own_gpu_resource_name_and_multinode_gangs(capsys):
    data = muster(capsys, "describe", "-f", EXAMPLES /
                  "dynamo/dynamo__examples__backends__vllm__deploy__disagg-multinode.yaml",
                  "-o", "json").json()
    assert data["kind"] == "DynamoGraphDeployment"
    assert (data["totals"]["pods"], data["totals"]["gpus"]) == (5, 4)
    assert {g["name"]: g["minMember"] for g in data["gangs"]} == {
        "default/vllm-disagg/Frontend-0": 1, "default/vllm-disagg/decode-0": 2,
        "default/vllm-disagg/prefill-0": 2}


def test_several_workloads_print_as_a_list_and_stdin_is_read(capsys, monkeypatch):
    text = ((EXAMPLES / "lws/lws__docs__examples__tensorrt-llm__lws.yaml").read_text()
            + "\n---\n" + (DATA / "story-jobset.yaml").read_text())
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    data = muster(capsys, "describe", "-f", "-", "-o", "json").json()
    assert data["kind"] == "List"
    assert [(i["kind"], i["name"]) for i in data["items"]] == [
        ("LeaderWorkerSet", "tensorrt"), ("JobSet", "story")]


def test_a_kubernetes_list_of_workloads_is_flattened(capsys, tmp_path: Path):
    story = yaml.safe_load((DATA / "story-jobset.yaml").read_text())
    listed = tmp_path / "list.yaml"
    listed.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [story]}))
    data = muster(capsys, "describe", "-f", listed, "-o", "json").json()
    assert data["name"] == "story" and data["totals"]["gpus"] == 12


def test_descriptors_in_the_file_describe_its_workloads(capsys, tmp_path: Path):
    text = (Path(__file__).resolve().parents[3] / "descriptors/jobset.yaml").read_text()
    custom = text.replace("name: jobset\n", "name: my-jobset\n", 1)
    both = tmp_path / "with-descriptor.yaml"
    both.write_text(custom + "\n---\n" + (DATA / "story-jobset.yaml").read_text())
    data = muster(capsys, "describe", "-f", both, "--no-builtin", "-o", "json").json()
    assert data["descriptor"] == "my-jobset"
    assert data["descriptorSource"] == "file"


def test_no_builtin_leaves_the_packaged_catalog_out(capsys):
    ran = muster(capsys, "describe", "-f", DATA / "story-jobset.yaml", "--no-builtin")
    assert ran.code == 1
    assert "unknown kind JobSet" in ran.err


@pytest.mark.parametrize("flag", ["--descriptors"])
def test_descriptors_dir_overrides_the_catalog_and_says_so(capsys, tmp_path: Path, flag: str):
    text = (Path(__file__).resolve().parents[3] / "descriptors/jobset.yaml").read_text()
    (tmp_path / "jobset.yaml").write_text(text.replace("name: jobset\n", "name: site-js\n", 1))
    ran = muster(capsys, "describe", "-f", DATA / "story-jobset.yaml", flag, tmp_path)
    assert "descriptor: site-js (muster, file)" in ran.out
