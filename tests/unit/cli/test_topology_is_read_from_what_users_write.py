"""Topology domains a user asks for, as ``muster describe -f`` and ``muster fit`` read them:
Muster's annotation on any workload, the operators' own (LWS, Kueue), and what is refused."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from tests.unit.cli.helpers import DATA, REPO, muster
from tests.unit.cli.snapshots import node, write

STORY = yaml.safe_load((DATA / "story-jobset.yaml").read_text())


def _lws(annotations: dict[str, str], *, replicas: int = 2, size: int = 4) -> dict[str, Any]:
    pod = {"spec": {"containers": [{"name": "main", "image": "vllm",
                                    "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "serve", "namespace": "ml", "annotations": annotations},
            "spec": {"replicas": replicas,
                     "leaderWorkerTemplate": {"size": size, "workerTemplate": pod}}}


def _story(annotations: dict[str, str] | None = None,
           template_notes: dict[str, dict[str, str]] | None = None) -> dict[str, Any]:
    doc = copy.deepcopy(STORY)
    if annotations:
        doc["metadata"]["annotations"] = annotations
    for job in doc["spec"]["replicatedJobs"]:
        notes = (template_notes or {}).get(job["name"])
        if notes:
            job["template"]["spec"]["template"]["metadata"] = {"annotations": notes}
    return doc


def _file(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "workload.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_lws_exclusive_topology_makes_each_group_an_exclusive_one_rack_gang(capsys, tmp_path):
    path = _file(tmp_path, _lws({"leaderworkerset.sigs.k8s.io/exclusive-topology": "rack"}))
    data = muster(capsys, "describe", "-f", path, "-o", "json").json()
    assert [(g["name"], g["topology"]) for g in data["gangs"]] == [
        (f"ml/serve/group-{i}", {"key": "rack", "required": True, "exclusive": True})
        for i in range(2)]
    table = muster(capsys, "describe", "-f", path).out
    assert ("gang: ml/serve/group-0 (minimum 4 of 4 pods, 32 GPUs, in one rack domain "
            "(required, exclusive))") in table


def test_an_lws_without_the_annotation_keeps_to_no_domain(capsys, tmp_path):
    data = muster(capsys, "describe", "-f", _file(tmp_path, _lws({})), "-o", "json").json()
    assert all("topology" not in g for g in data["gangs"])


def test_the_muster_annotation_on_any_workload_sets_a_preferred_domain(capsys, tmp_path):
    path = _file(tmp_path, _story({"muster.dev/topology-preferred": "nvidia.com/gpu.clique"}))
    (gang,) = muster(capsys, "describe", "-f", path, "-o", "json").json()["gangs"]
    assert gang["topology"] == {"key": "nvidia.com/gpu.clique", "required": False,
                                "exclusive": False}


def test_the_muster_annotation_wins_over_the_operators_own(capsys, tmp_path):
    path = _file(tmp_path, _lws({"leaderworkerset.sigs.k8s.io/exclusive-topology": "rack",
                                 "muster.dev/topology-required": "zone"}))
    gangs = muster(capsys, "describe", "-f", path, "-o", "json").json()["gangs"]
    assert {g["topology"]["key"] for g in gangs} == {"zone"}
    assert not any(g["topology"]["exclusive"] for g in gangs)


def test_a_muster_annotation_that_is_not_a_label_key_is_refused_naming_it(capsys, tmp_path):
    path = _file(tmp_path, _story({"muster.dev/topology-required": "my rack"}))
    ran = muster(capsys, "describe", "-f", path)
    assert ran.code == 1 and "Traceback" not in ran.err
    assert "metadata.annotations['muster.dev/topology-required']: 'my rack' is not a label key" \
        in ran.err


def test_exclusive_without_a_required_domain_is_refused(capsys, tmp_path):
    path = _file(tmp_path, _story({"muster.dev/topology-preferred": "rack",
                                   "muster.dev/topology-exclusive": "true"}))
    ran = muster(capsys, "describe", "-f", path)
    assert ran.code == 1
    assert "muster.dev/topology-exclusive']: needs muster.dev/topology-required" in ran.err


def test_kueue_podset_topology_on_every_role_of_the_gang_keeps_the_gang_to_it(capsys, tmp_path):
    notes = {"kueue.x-k8s.io/podset-required-topology": "rack"}
    path = _file(tmp_path, _story(template_notes={"leader": notes, "workers": notes}))
    (gang,) = muster(capsys, "describe", "-f", path, "-o", "json").json()["gangs"]
    assert gang["topology"] == {"key": "rack", "required": True, "exclusive": False}


def test_kueue_podset_topology_on_one_role_only_is_not_honoured_and_says_so(capsys, tmp_path):
    notes = {"kueue.x-k8s.io/podset-required-topology": "rack"}
    path = _file(tmp_path, _story(template_notes={"workers": notes}))
    ran = muster(capsys, "describe", "-f", path, "-o", "json")
    assert ran.code == 0 and "topology" not in ran.json()["gangs"][0]
    assert "Kueue podset topology differs between its roles (leader: none, workers: rack)" \
        in ran.err


def test_jobset_exclusive_topology_keeps_each_job_to_a_pool_of_its_own_not_the_whole_gang(
        capsys, tmp_path):
    path = _file(tmp_path, _story({"alpha.jobset.sigs.k8s.io/exclusive-topology": "pool"}))
    ran = muster(capsys, "describe", "-f", path, "-o", "json")
    assert ran.code == 0
    gang = ran.json()["gangs"][0]
    assert "topology" not in gang  # the whole JobSet is not kept to one pool
    assert gang["subgroupTopology"] == {"key": "pool", "subgroups": 2, "exclusive": True}
    assert "exclusive-topology" not in ran.err
    text = muster(capsys, "describe", "-f", path)
    assert "each of 2 subgroups alone in a pool domain of its own" in text.out


def test_jobset_exclusive_topology_with_the_node_selector_strategy_is_warned_not_kept(
        capsys, tmp_path):
    path = _file(tmp_path, _story({"alpha.jobset.sigs.k8s.io/exclusive-topology": "pool",
                                   "alpha.jobset.sigs.k8s.io/node-selector-strategy": "true"}))
    ran = muster(capsys, "describe", "-f", path, "-o", "json")
    assert ran.code == 0 and "subgroupTopology" not in ran.json()["gangs"][0]
    assert "alpha.jobset.sigs.k8s.io/exclusive-topology puts each child Job alone" in ran.err


def _racks(tmp_path: Path, used: dict[str, int]) -> Path:
    """Two racks of two 8-GPU nodes; ``used`` GPUs per node taken by other pods."""
    nodes = []
    for rack in "ab":
        for i in range(2):
            n = node(f"{rack}{i}")
            n["metadata"]["labels"]["rack"] = rack
            nodes.append(n)
    busy = []
    for name, gpus in used.items():
        busy.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": f"busy-{name}", "namespace": "others"},
                     "spec": {"nodeName": name, "containers": [
                         {"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
                     "status": {"phase": "Running"}})
    return write(tmp_path / "racks.yaml", *nodes, *busy)


def _fit_racks(capsys, tmp_path: Path, annotations: dict[str, str]) -> list[set[str]]:
    """The racks each group of a 2-group LWS (one 8-GPU pod each) is planned in."""
    lws = _file(tmp_path, _lws(annotations, size=1))
    ran = muster(capsys, "fit", "-f", lws, "--snapshot", _racks(tmp_path, {}), "-o", "json")
    assert ran.code == 0, ran.out
    (cluster,) = ran.json()["clusters"]
    return [{n[0] for n in g["plan"]} for g in cluster["gangs"]]


def test_fit_puts_each_exclusive_lws_group_in_its_own_rack(capsys, tmp_path):
    # Rack a's two nodes could hold both groups; exclusive, they take a rack each.
    assert _fit_racks(capsys, tmp_path, {
        "leaderworkerset.sigs.k8s.io/exclusive-topology": "rack"}) == [{"a"}, {"b"}]
    assert _fit_racks(capsys, tmp_path, {
        "muster.dev/topology-required": "rack"}) == [{"a"}, {"a"}]


def test_fit_of_a_rack_bound_gang_no_rack_holds_names_every_rack_and_why(capsys, tmp_path):
    gang = _story({"muster.dev/topology-required": "rack"})
    for job in gang["spec"]["replicatedJobs"]:
        job["template"]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][
            "nvidia.com/gpu"] = 8
    snap = _racks(tmp_path, {"a0": 8, "b1": 8})  # 16 GPUs free: a1 and b0, one per rack
    ran = muster(capsys, "fit", "-f", _file(tmp_path, gang), "--snapshot", snap, "-o", "json")
    assert ran.code == 1
    (g,) = ran.json()["clusters"][0]["gangs"]
    assert "no single rack domain holds it" in g["reason"]
    assert "Domains tried: a: 1 of 3 fit" in g["reason"] and "; b: 1 of 3 fit" in g["reason"]


def _descriptor_dir(tmp_path: Path, topology: list[dict[str, Any]]) -> Path:
    """The catalog's LWS descriptor with ``spec.gangs.topology`` replaced."""
    doc = yaml.safe_load((REPO / "descriptors" / "leaderworkerset.yaml").read_text())
    doc["spec"]["gangs"]["topology"] = topology
    folder = tmp_path / "descriptors"
    folder.mkdir()
    (folder / "lws.yaml").write_text(yaml.safe_dump(doc))
    return folder


def test_a_descriptor_rule_reads_the_first_key_found_at_its_paths(capsys, tmp_path):
    folder = _descriptor_dir(tmp_path, [
        {"required": {"path": "$.metadata.annotations.'example.com/rack'"}},
        {"preferred": "topology.kubernetes.io/zone"}])
    path = _file(tmp_path, _lws({}))
    gangs = muster(capsys, "describe", "-f", path, "--descriptors", folder, "-o",
                   "json").json()["gangs"]
    assert gangs[0]["topology"] == {"key": "topology.kubernetes.io/zone", "required": False,
                                    "exclusive": False}
    path = _file(tmp_path, _lws({"example.com/rack": "rack"}))
    gangs = muster(capsys, "describe", "-f", path, "--descriptors", folder, "-o",
                   "json").json()["gangs"]
    assert gangs[0]["topology"]["key"] == "rack" and gangs[0]["topology"]["required"]


def test_a_descriptor_rule_with_exclusive_on_a_preferred_domain_is_refused_by_path(
        capsys, tmp_path):
    folder = _descriptor_dir(tmp_path, [{"preferred": "rack", "exclusive": True}])
    ran = muster(capsys, "describe", "-f", _file(tmp_path, _lws({})), "--descriptors", folder)
    assert ran.code == 1 and "Traceback" not in ran.err
    assert "spec.gangs.topology[0].exclusive: only a required domain can be exclusive" in ran.err


def test_a_huge_topology_annotation_is_refused_with_a_short_message(capsys, tmp_path):
    path = _file(tmp_path, _story({"muster.dev/topology-required": "r" * 1_000_000}))
    ran = muster(capsys, "describe", "-f", path)
    assert ran.code == 1 and "is not a label key" in ran.err
    assert len(ran.err) < 1000
