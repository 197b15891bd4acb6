"""No input produces a traceback: every problem is one ``error:`` line naming what and where,
with kubectl's exit code (1 for every error)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.cli.helpers import DATA, REPO, dead_kubeconfig, muster


def _no_traceback(err: str) -> None:
    assert "Traceback" not in err
    assert err.startswith("error: ") or not err


def test_malformed_yaml_names_the_file_document_and_line(capsys, tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Pod\n---\nmetadata: [1,\n")
    ran = muster(capsys, "describe", "-f", bad)
    assert ran.code == 1
    _no_traceback(ran.err)
    assert f"{bad}:2: not valid YAML (line 5)" in ran.err


def test_unknown_kind_lists_the_known_kinds(capsys, tmp_path: Path):
    widget = tmp_path / "widget.yaml"
    widget.write_text("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n")
    ran = muster(capsys, "describe", "-f", widget)
    assert ran.code == 1
    _no_traceback(ran.err)
    assert "Widget (example.com/v1)" in ran.err
    assert "known kinds:" in ran.err and "JobSet.jobset.x-k8s.io" in ran.err


def test_an_undescribed_version_of_a_known_kind_says_which_versions_are(capsys, tmp_path):
    text = (DATA / "story-jobset.yaml").read_text().replace("v1alpha2", "v9")
    odd = tmp_path / "v9.yaml"
    odd.write_text(text)
    ran = muster(capsys, "describe", "-f", odd)
    assert ran.code == 1 and "described versions: v1alpha2" in ran.err


def test_unknown_type_name_in_get_lists_known_kinds(capsys, tmp_path: Path):
    ran = muster(capsys, "get", "gizmos", "-f", DATA / "story-jobset.yaml")
    assert ran.code == 1
    assert "unknown kind gizmos; known kinds:" in ran.err


def test_missing_file_and_directory_are_named(capsys, tmp_path: Path):
    ran = muster(capsys, "describe", "-f", tmp_path / "nope.yaml")
    assert (ran.code, ran.err.strip()) == (1, f"error: {tmp_path / 'nope.yaml'}: no such file")
    ran = muster(capsys, "describe", "-f", tmp_path)
    assert ran.code == 1 and "is a directory" in ran.err
    ran = muster(capsys, "describe", "-f", DATA / "story-jobset.yaml",
                 "--descriptors", tmp_path / "missing")
    assert ran.code == 1 and "no such file or directory" in ran.err


def test_a_document_that_is_not_an_object_is_named(capsys, tmp_path: Path):
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    ran = muster(capsys, "describe", "-f", listy)
    assert ran.code == 1 and f"{listy}:1: expected a Kubernetes object, got a list" in ran.err
    nokind = tmp_path / "nokind.yaml"
    nokind.write_text("metadata: {name: x}\n")
    ran = muster(capsys, "describe", "-f", nokind)
    assert ran.code == 1 and "object has no kind" in ran.err


def test_missing_optional_fields_take_upstream_defaults(capsys, tmp_path: Path):
    # No replicas, parallelism or completions: JobSet replicas 1, Job parallelism 1.
    minimal = tmp_path / "minimal.yaml"
    minimal.write_text(
        "apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata: {name: bare}\n"
        "spec:\n  replicatedJobs:\n  - name: w\n"
        "    template: {spec: {template: {spec: {containers: [{name: c}]}}}}\n")
    data = muster(capsys, "describe", "-f", minimal, "-o", "json").json()
    assert data["namespace"] == "default"
    assert [(r["name"], r["replicas"], r["pods"]) for r in data["roles"]] == [("w", 1, 1)]
    assert data["gangs"][0]["minMember"] == 1


def test_a_value_of_the_wrong_type_names_workload_role_and_path(capsys, tmp_path: Path):
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(
        "apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata: {name: bad}\n"
        "spec:\n  replicatedJobs:\n  - name: w\n    replicas: many\n"
        "    template: {spec: {template: {spec: {containers: [{name: c}]}}}}\n")
    ran = muster(capsys, "describe", "-f", wrong)
    assert ran.code == 1
    assert (f"{wrong}:1: JobSet/bad: role 'w' (spec.roles[0]): $.replicas: expected an "
            "integer, got the string 'many'") in ran.err


def test_a_workload_without_a_name_is_named_as_such(capsys, tmp_path: Path):
    anon = tmp_path / "anon.yaml"
    anon.write_text("apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nspec: {}\n")
    ran = muster(capsys, "describe", "-f", anon)
    assert ran.code == 1 and "metadata.name" in ran.err


@pytest.mark.parametrize("argv", [
    ("describe", "jobset/story"),
    ("get", "jobsets", "-A"),
    ("descriptors", "list", "--cluster"),
])
def test_an_unreachable_api_server_is_named_and_exits_1_as_kubectl(capsys, tmp_path: Path, argv):
    kubeconfig = dead_kubeconfig(tmp_path)
    ran = muster(capsys, *argv, "--kubeconfig", kubeconfig, "--request-timeout", "2")
    assert ran.code == 1
    _no_traceback(ran.err)
    assert "cannot reach the API server at https://127.0.0.1:9" in ran.err


def test_an_unreadable_kubeconfig_exits_1_and_names_it(capsys, tmp_path: Path):
    ran = muster(capsys, "get", "jobsets", "--kubeconfig", tmp_path / "none")
    assert ran.code == 1 and f"cannot load kubeconfig {tmp_path / 'none'}" in ran.err


def test_usage_errors_exit_1(capsys):
    assert muster(capsys, "describe").code == 1
    assert muster(capsys, "describe", "a/b", "c").code == 1
    assert muster(capsys, "describe", "-f", DATA / "story-jobset.yaml", "jobset/x").code == 1
    assert muster(capsys, "get").code == 1


def test_a_broken_descriptor_in_descriptors_dir_is_reported_as_file_doc_path(capsys, tmp_path):
    text = (REPO / "descriptors/jobset.yaml").read_text()
    (tmp_path / "jobset.yaml").write_text(text.replace("{path: $.replicas, default: 1}",
                                                       "{path: '$.[[[', default: 1}"))
    ran = muster(capsys, "describe", "-f", DATA / "story-jobset.yaml", "--descriptors", tmp_path)
    assert ran.code == 1
    assert f"{tmp_path / 'jobset.yaml'}:1: spec.roles[0].replicas.path: not a valid JSONPath" \
        in ran.err
