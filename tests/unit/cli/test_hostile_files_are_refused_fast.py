"""Hostile YAML and JSON (issue 16): deep nesting and alias bombs are refused while the file is
read, in well under a second, with the file and document named, whichever command reads them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from extender.files.catalog import CatalogError, load_descriptors
from extender.files.snapshot import SnapshotFileError, load_snapshot
from extender.files.yamlsafe import MAX_ALIAS_NODES, MAX_DEPTH, load_all
from tests.unit.cli.helpers import DATA, muster

HOSTILE = DATA / "hostile"
NESTED = [HOSTILE / "nested-brackets.yaml", HOSTILE / "nested-braces.json"]
BOMB = HOSTILE / "alias-bomb-pod.yaml"


@pytest.mark.parametrize("file", NESTED, ids=lambda p: p.name)
@pytest.mark.parametrize("command", ["describe", "get"])
def test_twenty_thousand_nested_brackets_are_refused_naming_file_and_document(
        capsys, file: Path, command: str):
    started = time.process_time()  # CPU, not wall time: a busy machine slows the wall clock
    ran = muster(capsys, command, "-f", file)
    assert time.process_time() - started < 5
    assert ran.code == 1 and "Traceback" not in ran.err
    assert ran.err.startswith(f"error: {file}:1: not valid YAML (line 1): nested deeper "
                              f"than {MAX_DEPTH} levels")


def test_an_alias_bomb_in_pod_annotations_is_refused_before_it_expands(capsys):
    started = time.process_time()
    ran = muster(capsys, "describe", "-f", BOMB)
    assert time.process_time() - started < 5
    assert ran.code == 1
    assert ran.err.startswith(f"error: {BOMB}:1: not valid YAML (line 11): aliases expand to "
                              f"more than {MAX_ALIAS_NODES} nodes")


@pytest.mark.parametrize("file", [*NESTED, BOMB], ids=lambda p: p.name)
def test_fit_refuses_hostile_workload_and_snapshot_files(capsys, file: Path):
    ran = muster(capsys, "fit", "-f", file, "--snapshot", file)
    assert ran.code == 2 and "Traceback" not in ran.err and str(file) in ran.err
    ran = muster(capsys, "fit", "-f", DATA / "story-jobset.yaml", "--snapshot", file)
    assert ran.code == 2 and "Traceback" not in ran.err and str(file) in ran.err


@pytest.mark.parametrize("file", [*NESTED, BOMB], ids=lambda p: p.name)
def test_snapshot_and_descriptor_files_refuse_them_too(file: Path):
    with pytest.raises(SnapshotFileError, match=f"{file}: not valid YAML"):
        load_snapshot(file)
    with pytest.raises(CatalogError) as err:
        load_descriptors([file])
    assert str(err.value).startswith(f"{file}:1: not valid YAML")


def test_nesting_at_the_limit_and_small_aliases_still_load():
    deep = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert next(iter(load_all(deep))) is not None
    docs = list(load_all("base: &b {cpu: 1}\nworker: *b\n---\nx: 1\n"))
    assert docs == [{"base": {"cpu": 1}, "worker": {"cpu": 1}}, {"x": 1}]
    with pytest.raises(Exception, match="nested deeper"):
        list(load_all("[" + deep + "]"))


def test_the_alias_budget_is_per_document_and_counts_expanded_nodes():
    block = "[" + ",".join(["0"] * 999) + "]"  # 1,000 nodes
    uses = MAX_ALIAS_NODES // 1000
    ok = f"a: &a {block}\nb: [" + ",".join(["*a"] * uses) + "]\n"
    assert len(list(load_all(ok + "---\n" + ok))) == 2
    with pytest.raises(Exception, match="aliases expand"):
        list(load_all(f"a: &a {block}\nb: [" + ",".join(["*a"] * (uses + 1)) + "]\n"))


@pytest.mark.parametrize(("name", "message"), [
    ("fractional-gpu-pod.yaml", "pod default/half: spec.containers[0].resources.limits[nvidia.com/"
                                "gpu]: must be a whole number, got '0.5' (only cpu, memory, "
                                "ephemeral-storage and hugepages may be fractional) (container "
                                "'trainer')"),
    ("list-annotation-pod.yaml", "pod default/odd: metadata.annotations: note: expected a string "
                                 "value, got list"),
    ("jobset-replicatedjobs-string.yaml", "JobSet/str: $.spec.replicatedJobs: expected a list or "
                                          "a map, got the string 'workers'"),
])
def test_values_the_api_server_refuses_are_refused_naming_object_and_field(
        capsys, name: str, message: str):
    file = HOSTILE / name
    ran = muster(capsys, "describe", "-f", file)
    assert (ran.code, ran.err.strip()) == (1, f"error: {file}:1: {message}")


def test_a_workload_without_the_field_its_roles_come_from_is_warned_about(capsys):
    file = HOSTILE / "jobset-without-spec.yaml"
    ran = muster(capsys, "describe", "-f", file)
    assert ran.code == 0 and "Traceback" not in ran.err
    assert ran.err.strip() == (f"warning: {file}:1: JobSet/nospec: no roles: $.spec."
                               "replicatedJobs[*] found nothing, so it makes no pods (is a field "
                               "its kind requires missing?)")


def test_an_integer_python_will_not_convert_is_refused_while_reading(capsys):
    file = HOSTILE / "five-thousand-digit-priority.yaml"
    ran = muster(capsys, "describe", "-f", file)
    assert (ran.code, ran.err.strip()) == (1, f"error: {file}:1: not valid YAML (line 5): an "
                                              "integer of 5000 digits is too long (at most 100)")
