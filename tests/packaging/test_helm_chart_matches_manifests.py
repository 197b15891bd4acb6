"""charts/muster with default values is the kustomization in manifests/, object by object.

The only differences allowed are those tests/packaging/helmchart.py names (the Namespace, the
scheduler configuration's checksum annotation, its comments); everything else, labels included,
is equal, so an edit to either side without the other fails here.
"""

from __future__ import annotations

import hashlib

import yaml

from tests.packaging.chartfiles import COPIES
from tests.packaging.helmchart import (
    CHART,
    CONFIG_CHECKSUM,
    MANIFESTS,
    NAMESPACE,
    SCHEDULER_CONFIG,
    Tools,
    normalised,
    pod_annotations,
)

MONITORING_ON = ("--set", "monitoring.serviceMonitor.enabled=true",
                 "--set", "monitoring.prometheusRule.enabled=true",
                 "--set", "monitoring.dashboard.enabled=true")


def test_helm_lint_is_clean_even_in_strict_mode(tools: Tools) -> None:
    out = tools.run(str(tools.helm), "lint", "--strict", str(CHART))
    assert "1 chart(s) linted, 0 chart(s) failed" in out
    assert "[WARNING]" not in out and "[ERROR]" not in out, out


def test_default_values_render_exactly_the_kustomizations_objects(tools: Tools) -> None:
    kustomized = tools.kustomize(MANIFESTS)
    rendered = tools.template()
    assert set(kustomized) - set(rendered) == {("Namespace", None, NAMESPACE)}
    assert set(rendered) - set(kustomized) == set()
    for key, expected in kustomized.items():
        if key[0] == "Namespace":
            continue
        assert normalised(rendered[key]) == normalised(expected), (
            f"{key} differs:\n--- helm\n{yaml.safe_dump(normalised(rendered[key]))}"
            f"--- kustomize\n{yaml.safe_dump(normalised(expected))}")


def test_the_scheduler_configuration_text_is_the_kustomizations_but_for_comments(
        tools: Tools) -> None:
    def config_lines(text: str) -> list[str]:
        return [line for line in text.splitlines() if not line.lstrip().startswith("#")]

    key = ("ConfigMap", NAMESPACE, "muster-scheduler-config")
    ours = tools.template()[key]["data"][SCHEDULER_CONFIG]
    theirs = tools.kustomize(MANIFESTS)[key]["data"][SCHEDULER_CONFIG]
    assert config_lines(ours) == config_lines(theirs)


def test_only_the_scheduler_pods_carry_an_annotation_the_checksum_of_their_config(
        tools: Tools) -> None:
    rendered = tools.template()
    text = rendered[("ConfigMap", NAMESPACE, "muster-scheduler-config")]["data"][SCHEDULER_CONFIG]
    assert pod_annotations(rendered, "muster-scheduler") == {
        CONFIG_CHECKSUM: hashlib.sha256(text.rstrip("\n").encode()).hexdigest()}
    assert pod_annotations(rendered, "muster") == {}


def test_monitoring_values_render_exactly_the_monitoring_kustomizations_objects(
        tools: Tools) -> None:
    kustomized = tools.kustomize(MANIFESTS / "monitoring")
    rendered = tools.template(*MONITORING_ON)
    off = tools.template()
    added = {k: v for k, v in rendered.items() if k not in off}
    assert added == kustomized


def test_the_charts_copies_of_manifests_files_are_byte_for_byte_the_originals() -> None:
    for copy, original in COPIES.items():
        assert copy.read_bytes() == original.read_bytes(), (
            f"{copy.relative_to(CHART)} differs from {original}: run make chart-files")


def test_every_file_of_the_charts_crds_and_files_is_a_copy_of_manifests() -> None:
    for folder in ("crds", "files"):
        assert set((CHART / folder).iterdir()) <= set(COPIES), (
            f"{folder}/ holds a file not made from manifests/ (tests/packaging/chartfiles.py)")


def test_another_release_namespace_moves_every_namespaced_object_and_the_extender_url(
        tools: Tools) -> None:
    rendered = tools.template(namespace="gpu-sched")
    namespaces = {ns for _, ns, _ in rendered}
    assert namespaces == {None, "gpu-sched", "kube-system"}  # the auth reader's RoleBinding
    config = yaml.safe_load(rendered[("ConfigMap", "gpu-sched", "muster-scheduler-config")]
                            ["data"][SCHEDULER_CONFIG])
    assert config["extenders"][0]["urlPrefix"] == "https://muster.gpu-sched.svc:8888"
    assert config["leaderElection"]["resourceNamespace"] == "gpu-sched"
    subjects = [s for obj in rendered.values() for s in obj.get("subjects", [])]
    assert subjects and {s["namespace"] for s in subjects} == {"gpu-sched"}
