"""``muster get -f`` rows (and, as JSON or YAML, the workload objects) and ``muster
descriptors list|validate``."""

from __future__ import annotations

from pathlib import Path

import orjson
import yaml

from tests.unit.cli.helpers import DATA, EXAMPLES, REPO, muster

LWS = EXAMPLES / "lws/lws__docs__examples__tensorrt-llm__lws.yaml"


def _two(tmp_path: Path) -> Path:
    both = tmp_path / "two.yaml"
    both.write_text(LWS.read_text() + "\n---\n" + (DATA / "story-jobset.yaml").read_text())
    return both


def test_get_has_one_row_per_workload_with_phase_ready_gangs_and_gpus(capsys, tmp_path):
    ran = muster(capsys, "get", "-f", _two(tmp_path))
    assert ran.code == 0
    lines = [line.split() for line in ran.out.splitlines()]
    assert lines[0] == ["NAMESPACE", "KIND", "NAME", "PHASE", "READY", "GANGS", "GPUS", "AGE"]
    assert lines[1] == ["default", "LeaderWorkerSet", "tensorrt", "Initializing", "0/2", "1",
                        "(min", "2)", "16", "<unknown>"]
    assert lines[2] == ["ml", "JobSet", "story", "Initializing", "0/3", "1", "(min", "3)", "12",
                        "<unknown>"]


def test_get_filters_by_type_leniently(capsys, tmp_path):
    for name in ("lws", "LeaderWorkerSets", "leaderworkerset.leaderworkerset.x-k8s.io"):
        items = muster(capsys, "get", name, "-f", _two(tmp_path), "-o", "json").json()["items"]
        assert [i["metadata"]["name"] for i in items] == ["tensorrt"], name
    [line] = muster(capsys, "get", "JS", "-f", _two(tmp_path),
                    "--no-headers").out.strip().splitlines()
    assert line.split()[:3] == ["story", "Initializing", "0/3"]


def test_get_json_and_yaml_print_the_workload_objects_as_written(capsys, tmp_path):
    story = yaml.safe_load((DATA / "story-jobset.yaml").read_text())
    for fmt, load in (("json", orjson.loads), ("yaml", yaml.safe_load)):
        listed = load(muster(capsys, "get", "js", "-f", _two(tmp_path), "-o", fmt).out)
        assert (listed["apiVersion"], listed["kind"]) == ("v1", "List")
        assert listed["items"] == [story]


def test_get_counts_ready_pods_from_the_file(capsys, tmp_path):
    both = tmp_path / "both.yaml"
    both.write_text((DATA / "story-jobset.yaml").read_text() + "\n---\n"
                    + (DATA / "story-with-pods.yaml").read_text())
    [line] = muster(capsys, "get", "-f", both, "--no-headers").out.strip().splitlines()
    assert line.split()[:3] == ["story", "Initializing", "2/3"]


def test_descriptors_list_names_every_packaged_descriptor_with_source(capsys):
    data = muster(capsys, "descriptors", "list", "-o", "json").json()["descriptors"]
    files = sorted(p.stem for p in (REPO / "descriptors").glob("*.yaml"))
    assert len(data) == len(files)
    jobset = next(d for d in data if d["name"] == "jobset")
    assert jobset == {"name": "jobset", "kind": "JobSet", "group": "jobset.x-k8s.io",
                      "versions": ["v1alpha2"], "plural": "jobsets", "shortNames": ["js"],
                      "gangPolicy": "workload", "format": "muster", "source": "catalog"}
    table = muster(capsys, "descriptors", "list").out
    assert table.split("\n")[0].split() == ["NAME", "KIND", "GROUP", "VERSIONS", "GANGS",
                                            "FORMAT", "SOURCE"]


def test_descriptors_list_shows_a_file_override(capsys, tmp_path):
    text = (REPO / "descriptors/jobset.yaml").read_text()
    (tmp_path / "js.yaml").write_text(text.replace("name: jobset\n", "name: site-js\n", 1))
    data = muster(capsys, "descriptors", "list", "--descriptors", tmp_path,
                  "-o", "json").json()["descriptors"]
    names = {d["name"]: d["source"] for d in data}
    assert names["site-js"] == "file" and "jobset" not in names
    only = muster(capsys, "descriptors", "list", "--no-builtin", "--descriptors", tmp_path,
                  "-o", "json").json()["descriptors"]
    assert [d["name"] for d in only] == ["site-js"]


def test_validate_prints_ok_per_descriptor_and_exits_0(capsys):
    files = sorted((REPO / "descriptors").glob("*.yaml"))
    ran = muster(capsys, "descriptors", "validate", *files)
    assert ran.code == 0
    assert len([line for line in ran.out.splitlines() if ": OK " in line]) == len(files)
    assert f"{REPO / 'descriptors/jobset.yaml'}:1: OK jobset (JobSet.jobset.x-k8s.io v1alpha2" \
        in ran.out


def test_validate_a_broken_descriptor_exits_1_with_file_doc_field_path(capsys, tmp_path):
    text = (REPO / "descriptors/leaderworkerset.yaml").read_text()
    broken = tmp_path / "broken.yaml"
    # Second document: the first is fine, the second's role 1 count points at nonsense.
    good = (REPO / "descriptors/jobset.yaml").read_text()
    bad = text.replace("- {path: $.spec.leaderWorkerTemplate.size, default: 1}",
                       "- {path: '$..[', default: 1}")
    assert bad != text
    broken.write_text(good + "\n---\n" + bad)
    ran = muster(capsys, "descriptors", "validate", broken)
    assert ran.code == 1
    assert f"{broken}:1: OK jobset" in ran.out
    problem = next(line for line in ran.out.splitlines() if ":2:" in line)
    assert problem.startswith(f"{broken}:2: spec.roles[1].podsPerReplica.sum[0].path: ")


def test_validate_a_missing_file_exits_1_and_goes_on_with_the_others(capsys, tmp_path):
    ran = muster(capsys, "descriptors", "validate", tmp_path / "gone.yaml",
                 REPO / "descriptors/pod.yaml")
    assert ran.code == 1
    assert "gone.yaml: no such file" in ran.err and ": OK pod" in ran.out


def test_validate_rejects_a_document_that_is_not_a_descriptor(capsys, tmp_path):
    ran = muster(capsys, "descriptors", "validate", DATA / "story-jobset.yaml")
    assert ran.code == 1
    assert ran.out.startswith(f"{DATA / 'story-jobset.yaml'}:1: ")


def test_workload_map_karta_descriptors_are_read_and_labelled_karta(capsys):
    karta = REPO.parent / "shared/karta-catalog/jobset-x-k8s-io-jobset-v1alpha2.yaml"
    ran = muster(capsys, "descriptors", "validate", karta)
    assert ran.code == 0 and "format: karta" in ran.out
    data = muster(capsys, "describe", "-f", DATA / "story-jobset.yaml", "--no-builtin",
                  "--descriptors", karta, "-o", "json").json()
    assert (data["descriptor"], data["descriptorFormat"], data["descriptorSource"]) == (
        "jobset-x-k8s-io-jobset-v1alpha2", "karta", "file")
    assert data["totals"]["pods"] == 3 and data["totals"]["gpus"] == 12


def test_match_condition_prints_the_webhooks_condition_for_the_catalog_in_effect(
        capsys, tmp_path):
    shipped = muster(capsys, "descriptors", "match-condition")
    assert shipped.code == 0
    manifest = (REPO / "manifests/webhook.yaml").read_text()
    assert f'expression: "{shipped.out.strip()}"' in manifest
    text = (REPO / "descriptors/jobset.yaml").read_text()
    (tmp_path / "js.yaml").write_text(
        text.replace("jobset.sigs.k8s.io/jobset-name", "example.com/run", 1))
    own = muster(capsys, "descriptors", "match-condition", "--no-builtin",
                 "--descriptors", tmp_path)
    assert own.code == 0
    assert own.out.strip() == ("has(object.metadata.ownerReferences) || "
                               "(has(object.metadata.labels) && ['example.com/run']"
                               ".exists(l, l in object.metadata.labels))")
    (tmp_path / "pod.yaml").write_text(
        (REPO / "descriptors/pod.yaml").read_text().replace("policy: none", "policy: workload"))
    every = muster(capsys, "descriptors", "match-condition", "--no-builtin",
                   "--descriptors", tmp_path)
    assert (every.code, every.out) == (1, "")
    assert "every pod may be in a gang" in every.err
