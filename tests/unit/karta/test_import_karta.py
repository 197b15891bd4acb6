"""``muster descriptors import-karta``: Karta -> native WorkloadDescriptor, and what is not exact.

The translation must mean what Muster's own reading of the Karta means: on every example the
Karta catalog covers, the native descriptor resolves to the same pods, GPUs and gangs (pods and
minimum of each), except where a note says why not. Its output validates with ``muster
descriptors validate`` and against the WorkloadDescriptor CRD's schema.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.cli.main import main
from extender.core.karta.compile import compile_karta, descriptor_of
from extender.core.karta.model import Karta
from extender.core.karta.native import karta_to_native, translate
from extender.core.model.values import Phase
from extender.core.workloads.descriptor import compile_descriptor
from extender.core.workloads.workload import resolve_workload
from extender.files.catalog import yaml_documents
from tests.unit.descriptors.examples import EXAMPLES
from tests.unit.descriptors.test_crd import SCHEMA, violations
from tests.unit.descriptors.test_index_examples import ROWS, Row
from tests.unit.karta.compat import KARTA_DIR, Figures, covered, kartas

FILES = sorted(KARTA_DIR.glob("*.yaml"))


def _raw(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((KARTA_DIR / name).read_text(encoding="utf-8"))
    return data


def _figures(obj: dict[str, Any], descriptor: Any) -> Figures:
    try:
        tree = resolve_workload(obj, descriptor)
    except ValueError as err:
        return Figures(0, 0, (), error=str(err))
    return Figures(tree.pods, tree.gpus, tuple(sorted((g.pods, g.min_member)
                                                      for g in tree.gangs)))


def _cases() -> list[tuple[Row, str, Karta, dict[str, Any]]]:
    out = []
    for row in ROWS:
        if not covered(row):
            continue
        path = EXAMPLES / row.file
        for doc, obj in yaml_documents(path.read_text(encoding="utf-8"), row.file):
            karta = kartas().get((obj.get("apiVersion"), obj.get("kind")))
            if karta is not None:
                out.append((row, f"{row.number}:{doc}", karta, obj))
    return out


CASES = _cases()


# ---------------------------------------------------------------- the command


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_catalog_karta_translates_and_the_output_validates(
        path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["descriptors", "import-karta", str(path), "-o", str(tmp_path)]) == 0
    out = capsys.readouterr()
    [written] = sorted(tmp_path.glob("*.yaml"))
    assert f"{path}:1: wrote {written}" in out.out
    doc = yaml.safe_load(written.read_text())
    assert violations(doc, SCHEMA) == []
    assert compile_descriptor(doc).target.kind == compile_karta(_raw(path.name)).target.kind
    assert main(["descriptors", "validate", str(written)]) == 0
    assert f"{written}:1: OK {doc['metadata']['name']}" in capsys.readouterr().out
    # Every note is in the file too, as a comment, and names a Karta field.
    notes = [line.split(": note: ", 1)[1] for line in out.out.splitlines() if ": note: " in line]
    text = written.read_text()
    assert all(f"#   {n}" in text for n in notes)
    assert all(n.startswith("spec.") for n in notes), notes


def test_several_files_go_to_stdout_as_one_stream_with_notes_on_stderr(
        capsys: pytest.CaptureFixture[str]) -> None:
    files = [str(KARTA_DIR / "kubeflow-org-pytorchjob-v1.yaml"),
             str(KARTA_DIR / "apps-nvidia-com-nimcache-v1alpha1.yaml")]
    assert main(["descriptors", "import-karta", *files]) == 0
    out = capsys.readouterr()
    docs = [d for d in yaml.safe_load_all(out.out) if d]
    assert [d["metadata"]["name"] for d in docs] == ["kubeflow-org-pytorchjob-v1",
                                                     "apps-nvidia-com-nimcache-v1alpha1"]
    assert "&id" not in out.out  # no YAML anchors: a person reads and edits this
    assert out.err.strip() == (
        f"{files[1]}:1: note: spec.structureDefinition.rootComponent.specDefinition."
        "fragmentedPodSpecDefinition.resourcesPath: not translated: the jq program "
        "'{requests: .spec.resources}' uses '{...}' (building an object)")


def test_what_does_not_translate_is_an_error_naming_the_field_and_the_rest_still_translates(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = _raw("kubeflow-org-pytorchjob-v1.yaml")
    worker = raw["spec"]["structureDefinition"]["childComponents"][1]
    worker["scaleDefinition"]["replicasPath"] = "[.spec.pytorchReplicaSpecs[]] | length"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump_all([raw, {"apiVersion": "v1", "kind": "ConfigMap"}]))
    good = KARTA_DIR / "kubeflow-org-mpijob-v2beta1.yaml"
    code = main(["descriptors", "import-karta", str(bad), str(good), str(tmp_path / "gone"),
                 "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1  # every error exits 1, as kubectl
    assert (f"{bad}:1: spec.structureDefinition.childComponents[1].scaleDefinition."
            "replicasPath: cannot translate: the jq program '[.spec.pytorchReplicaSpecs[]] | "
            "length' uses '[...]' (collecting values into an array)") in err
    assert f"{bad}:2: not a Karta (run.ai/v1alpha1 Karta), got ConfigMap" in err
    assert "gone: no such file" in err and "Traceback" not in err
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["kubeflow-org-mpijob-v2beta1.yaml"]
    assert main(["descriptors", "import-karta", str(bad)]) == 1
    capsys.readouterr()


# ---------------------------------------------------------------- the same meaning


@pytest.mark.parametrize(("row", "case", "karta", "obj"), CASES,
                         ids=[c[1] + "-" + c[0].stem[:50] for c in CASES])
def test_the_native_translation_resolves_the_examples_as_the_karta_does(
        row: Row, case: str, karta: Karta, obj: dict[str, Any]) -> None:
    translation = translate(karta)
    by_karta = _figures(obj, descriptor_of(karta))
    native = _figures(obj, compile_descriptor(translation.document))
    if by_karta.error and not native.error:
        # jq's '[]' over an absent list fails the Karta; a JSONPath forEach selects nothing.
        assert "Cannot iterate over null" in by_karta.error
        assert any("jq's '[]' fails when" in n for n in translation.notes), translation.notes
        return
    assert bool(by_karta.error) == bool(native.error), (by_karta, native)
    if not by_karta.error:
        assert (native.pods, native.gpus, native.gangs) == (
            by_karta.pods, by_karta.gpus, by_karta.gangs)
        tree_k = resolve_workload(obj, descriptor_of(karta))
        tree_n = resolve_workload(obj, compile_descriptor(translation.document))
        assert [r.name for r in tree_n.roles] == [r.name for r in tree_k.roles]
        assert [g.key for g in tree_n.gangs] == [g.key for g in tree_k.gangs]
    del row, case


def test_the_only_examples_that_differ_are_the_two_ray_clusters_without_worker_groups() -> None:
    differ = []
    for row, case, karta, obj in CASES:
        a = _figures(obj, descriptor_of(karta))
        b = _figures(obj, compile_descriptor(translate(karta).document))
        if bool(a.error) != bool(b.error) or (not a.error and a != b):
            differ.append(case.split(":")[0])
        del row
    assert differ == ["20", "25"]


# ---------------------------------------------------------------- notes, where not exact

EXACT = ["apps-deployment-v1", "batch-cronjob-v1", "core-pod-v1", "kubeflow-org-mpijob-v2beta1",
         "kubeflow-org-pytorchjob-v1", "serving-knative-dev-service-v1"]
NOTES = {
    "apps-nvidia-com-nimcache-v1alpha1": ["resourcesPath: not translated: the jq program "
                                          "'{requests: .spec.resources}' uses '{...}'"],
    "apps-nvidia-com-nimservice-v1alpha1": [
        "schedulerNamePath: not translated: a WorkloadDescriptor template has no schedulerName",
        "labelsPath: not translated", "annotationsPath: not translated",
        "podAffinityPath/nodeAffinityPath become 'affinity: $.spec.affinity'"],
    "apps-statefulset-v1": ["statusMappings.running[0]: not translated, so this status "
                            "mapping is left out: byExpression"],
    "batch-job-v1": ["statusMappings.degraded[0]: not translated"],
    "agents-x-k8s-io-sandbox-v1beta1": [
        "groupByKeyPaths[0]: '[.metadata.ownerReferences[]? | select(.kind == \"Sandbox\") | "
        ".uid][0]' is read as grouping by no pod label",
        "statusMappings.suspending[0]: not translated"],
    "grove-io-podcliqueset-v1alpha1": [
        "per-replica gangs: the replica count is the shared factor",
        "childComponents[0]: jq's '[]' fails when $.spec.template.cliques is absent",
        "resourceClaimsPath: not translated"],
    "jobset-x-k8s-io-jobset-v1alpha2": [
        "childComponents[0]: jq's '[]' fails when $.spec.replicatedJobs is absent",
        "statusMappings.running[0]: not translated"],
    "leaderworkerset-x-k8s-io-leaderworkerset-v1": [
        "groupByKeyPaths[1]: '.metadata.labels[\"leaderworkerset.sigs.k8s.io/group-index\"] // "
        "\"0\"' is read as grouping by label leaderworkerset.sigs.k8s.io/group-index"],
    "nvidia-com-dynamographdeployment-v1beta1": [
        "groupByKeyPaths[0]: '.metadata.labels[\"nvidia.com/dynamo-component\"] | "
        "ascii_downcase' is read as grouping by label nvidia.com/dynamo-component"],
    "ray-io-raycluster-v1": ["childComponents[1]: jq's '[]' fails when "
                             "$.spec.workerGroupSpecs is absent"],
    "serving-kserve-io-inferenceservice-v1beta1": [
        "podAffinityPath/nodeAffinityPath become 'affinity: $.spec.predictor.affinity'"],
}


@pytest.mark.parametrize("name", EXACT)
def test_kartas_the_native_format_says_exactly_have_no_notes(name: str) -> None:
    assert karta_to_native(_raw(f"{name}.yaml")).notes == ()


@pytest.mark.parametrize(("name", "expected"), sorted(NOTES.items()))
def test_what_is_not_exact_is_noted_with_its_karta_field(name: str,
                                                         expected: list[str]) -> None:
    notes = karta_to_native(_raw(f"{name}.yaml")).notes
    for fragment in expected:
        assert any(fragment in n for n in notes), (fragment, notes)


def test_filters_and_topology_are_noted_and_a_subset_gang_keeps_its_roles() -> None:
    raw = _raw("kubeflow-org-pytorchjob-v1.yaml")
    members = raw["spec"]["optimizationInstructions"]["gangScheduling"]["podGroups"][0][
        "members"]
    members[1]["filters"] = ['(.spec.containers[0].resources.limits["nvidia.com/gpu"] // 0) > 0']
    del members[0]  # only workers are gang members
    translation = karta_to_native(raw)
    assert translation.document["spec"]["gangs"] == {"policy": "workload", "roles": ["worker"]}
    [note] = [n for n in translation.notes if "filters[0]" in n]
    assert note.startswith("spec.optimizationInstructions.gangScheduling.podGroups[0]."
                           "members[0].filters[0]: not translated: member filter")
    topology = {"topologyName": "t", "requiredTopologyLevel": "rack",
                "preferredTopologyLevel": "node"}
    raw["spec"]["optimizationInstructions"]["gangScheduling"] = {"podGroup": {
        "name": "job", "topology": topology, "subGroups": [{"componentName": "worker"}]}}
    notes = karta_to_native(raw).notes
    assert any("topology" in n for n in notes)
    assert any(n.startswith("spec.optimizationInstructions.gangScheduling.podGroup:") for n in
               notes)


# ---------------------------------------------------------------- status


@pytest.mark.parametrize(("name", "obj", "phase"), [
    ("batch-job-v1.yaml", {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                           "spec": {"template": {"spec": {"containers": []}}},
                           "status": {"active": 2, "ready": 1}}, Phase.RUNNING),
    ("batch-job-v1.yaml", {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                           "spec": {"template": {"spec": {"containers": []}}},
                           "status": {"active": 2}}, Phase.INITIALIZING),
    ("ray-io-raycluster-v1.yaml", {"apiVersion": "ray.io/v1", "kind": "RayCluster",
                                   "metadata": {"name": "r"},
                                   "spec": {"suspend": True, "headGroupSpec": {"template": {}},
                                            "workerGroupSpecs": []}}, Phase.SUSPENDED),
    ("ray-io-raycluster-v1.yaml", {"apiVersion": "ray.io/v1", "kind": "RayCluster",
                                   "metadata": {"name": "r"},
                                   "spec": {"headGroupSpec": {"template": {}},
                                            "workerGroupSpecs": []},
                                   "status": {"state": "ready"}}, Phase.RUNNING),
    ("batch-cronjob-v1.yaml", {"apiVersion": "batch/v1", "kind": "CronJob",
                               "metadata": {"name": "c"},
                               "spec": {"jobTemplate": {"spec": {"template": {}}}},
                               "status": {"lastScheduleTime": "2026-01-01T00:00:00Z"}},
     Phase.RUNNING),
    ("agents-x-k8s-io-sandbox-v1beta1.yaml", {
        "apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox", "metadata": {"name": "s"},
        "spec": {"podTemplate": {}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}}, Phase.RUNNING),
])
def test_translated_status_mappings_give_the_karta_phase(name: str, obj: dict[str, Any],
                                                          phase: Phase) -> None:
    raw = _raw(name)
    native = compile_descriptor(karta_to_native(copy.deepcopy(raw)).document)
    assert resolve_workload(obj, compile_karta(raw)).phase is phase
    assert resolve_workload(obj, native).phase is phase
