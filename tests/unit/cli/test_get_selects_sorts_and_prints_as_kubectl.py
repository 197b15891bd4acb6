"""``muster get`` as kubectl's: ``-l`` label selectors, ``-o wide|name``, an AGE column and
``--sort-by JSONPATH``, in file mode and against an API server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml

from extender.cli.errors import CliError
from extender.cli.listing import SortBy, age_of, human_age, resource_name
from extender.cli.selectors import parse_selector
from tests.unit.cli.helpers import DATA, muster
from tests.unit.kube.fakeapi import fake_api

STORY = yaml.safe_load((DATA / "story-jobset.yaml").read_text())
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/jobsets"


def _jobset(name: str, labels: dict[str, str], created: str | None, workers: int) -> dict:
    doc = yaml.safe_load(yaml.safe_dump(STORY))
    doc["metadata"] = {"name": name, "namespace": "ml", "labels": labels}
    if created:
        doc["metadata"]["creationTimestamp"] = created
    doc["spec"]["replicatedJobs"][1]["template"]["spec"]["parallelism"] = workers
    doc["spec"]["replicatedJobs"][1]["template"]["spec"]["completions"] = workers
    return doc


def _stamp(ago: timedelta) -> str:
    return (datetime.now(UTC) - ago).strftime("%Y-%m-%dT%H:%M:%SZ")


def _file(tmp_path: Path) -> Path:
    docs = [
        _jobset("alpha", {"team": "nlp", "tier": "prod"}, _stamp(timedelta(hours=5)), 3),
        _jobset("beta", {"team": "vision"}, _stamp(timedelta(minutes=15)), 1),
        _jobset("gamma", {"team": "nlp", "spot": "true"}, _stamp(timedelta(days=3)), 2),
    ]
    path = tmp_path / "jobsets.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def _names(capsys, *argv) -> list[str]:
    ran = muster(capsys, "get", *argv, "-o", "json")
    assert ran.code == 0, ran.err
    return [i["metadata"]["name"] for i in ran.json()["items"]]


LABELS = {"team": "nlp", "tier": "prod", "rank": "3"}


@pytest.mark.parametrize(("text", "selected"), [
    ("team=nlp", True), ("team==nlp", True), ("team!=nlp", False), ("team=vision", False),
    ("absent!=x", True), ("team in (nlp, vision)", True), ("team in (vision)", False),
    ("team notin (vision)", True), ("absent notin (x)", True), ("team notin (nlp)", False),
    ("tier", True), ("absent", False), ("!absent", True), ("!tier", False),
    ("team=nlp,tier=prod", True), ("team=nlp,tier=dev", False), ("  team = nlp , !spot ", True),
    ("rank>2", True), ("rank<3", False), ("team>1", False), ("", True),
    ("example.com/owner!=bob", True), ("tier in (prod,)", True), ("tier=", False),
])
def test_label_selectors_match_as_kubernetes_matches_them(text: str, selected: bool) -> None:
    assert parse_selector(text).matches(LABELS) is selected


@pytest.mark.parametrize(("text", "why"), [
    ("team=", None), ("team in ()", "the set of values is empty"),
    ("team in (a", "missing ')'"), ("team in a", "expected '('"),
    ("team=a b", "expected ',' between requirements"), ("team=nlp,", "missing after the last"),
    ("bad key=x", "after 'bad' expected =, ==, !=, in, notin"), ("-bad=x", "not a valid label key"),
    ("team=" + "x" * 64, "not a valid label value"), ("rank>two", "expected an integer"),
    ("team=~x", "not a valid label value"), ("!", "a key is missing"),
    ("team ~ x", "expected =, ==, !=, in, notin"),
])
def test_a_bad_selector_is_one_line_naming_it_and_what_is_wrong(text: str, why: str | None):
    if why is None:  # an empty value is a value
        assert parse_selector(text).requirements[0].values == ("",)
        return
    with pytest.raises(CliError) as err:
        parse_selector(text)
    message = str(err.value)
    assert message.startswith(f"--selector {text!r}: ") and why in message
    assert "\n" not in message


def test_get_filters_a_file_by_label_selector(capsys, tmp_path: Path) -> None:
    path = _file(tmp_path)
    assert _names(capsys, "-f", path, "-l", "team=nlp") == ["alpha", "gamma"]
    assert _names(capsys, "-f", path, "--selector", "team=nlp,!spot") == ["alpha"]
    assert _names(capsys, "-f", path, "-l", "team notin (nlp)") == ["beta"]
    ran = muster(capsys, "get", "-f", path, "-l", "team in (nlp")
    assert ran.code == 1 and ran.err == "error: --selector 'team in (nlp': team in (...: " \
                                        "missing ')'\n"


@pytest.mark.parametrize(("seconds", "shown"), [
    (0, "0s"), (-1, "0s"), (-5, "<invalid>"), (45, "45s"), (119, "119s"), (120, "2m"),
    (200, "3m20s"), (599, "9m59s"), (600, "10m"), (179 * 60, "179m"), (3 * 3600, "3h"),
    (5 * 3600 + 59, "5h"), (7 * 3600 + 30 * 60, "7h30m"), (8 * 3600, "8h"), (47 * 3600, "47h"),
    (3 * 86400, "3d"), (3 * 86400 + 4 * 3600, "3d4h"), (20 * 86400, "20d"),
    (729 * 86400, "729d"), (730 * 86400, "2y"), (760 * 86400, "2y30d"),
    (9 * 365 * 86400, "9y"),
])
def test_age_is_formatted_as_kubectl_formats_it(seconds: int, shown: str) -> None:
    assert human_age(seconds) == shown


def test_age_comes_from_the_creation_timestamp(capsys, tmp_path: Path) -> None:
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert age_of({"metadata": {"creationTimestamp": "2026-01-02T02:59:05Z"}}, now) == "5m"
    assert age_of({"metadata": {}}, now) == "<unknown>"
    assert age_of({"metadata": {"creationTimestamp": "yesterday"}}, now) == "<unknown>"
    ran = muster(capsys, "get", "-f", _file(tmp_path))
    header, *rows = [line.split() for line in ran.out.splitlines()]
    assert header[-1] == "AGE"
    assert {r[0]: r[-1] for r in rows} == {"alpha": "5h", "beta": "15m", "gamma": "3d"}


def test_output_name_prints_kind_group_slash_name_as_kubectl(capsys, tmp_path: Path) -> None:
    ran = muster(capsys, "get", "-f", _file(tmp_path), "-l", "team=nlp", "-o", "name")
    assert ran.out.splitlines() == ["jobset.jobset.x-k8s.io/alpha",
                                    "jobset.jobset.x-k8s.io/gamma"]
    assert resource_name("Pod", "v1", "solo") == "pod/solo"


def test_output_wide_adds_the_descriptor_and_nodes(capsys, tmp_path: Path) -> None:
    both = tmp_path / "both.yaml"
    both.write_text((DATA / "story-jobset.yaml").read_text() + "\n---\n"
                    + (DATA / "story-with-pods.yaml").read_text())
    ran = muster(capsys, "get", "-f", both, "-o", "wide")
    header, row = [line.split() for line in ran.out.splitlines()]
    assert header[-3:] == ["AGE", "DESCRIPTOR", "NODES"]
    assert row[-2:] == ["jobset", "node-1,node-2"]


def test_sort_by_a_jsonpath_orders_rows_as_kubectl(capsys, tmp_path: Path) -> None:
    path = _file(tmp_path)
    assert _names(capsys, "-f", path, "--sort-by", ".metadata.creationTimestamp") == [
        "gamma", "alpha", "beta"]
    assert _names(capsys, "-f", path, "--sort-by", "{.metadata.creationTimestamp}") == [
        "gamma", "alpha", "beta"]
    # Numbers as numbers: 1 < 2 < 3 workers.
    assert _names(capsys, "-f", path, "--sort-by",
                  "{.spec.replicatedJobs[1].template.spec.parallelism}") == [
        "beta", "gamma", "alpha"]
    # Objects without the field first, then the others in order.
    assert _names(capsys, "-f", path, "--sort-by", "metadata.labels.tier") == [
        "beta", "gamma", "alpha"]
    ran = muster(capsys, "get", "-f", path, "-o", "name", "--sort-by", "{.metadata.name}")
    assert ran.out.split() == [f"jobset.jobset.x-k8s.io/{n}" for n in ("alpha", "beta", "gamma")]
    bad = muster(capsys, "get", "-f", path, "--sort-by", ".spec[[[")
    assert bad.code == 1 and bad.err.startswith("error: --sort-by '.spec[[[': not a valid "
                                                "JSONPath")
    assert len(bad.err.splitlines()) == 1


def test_sort_keys_put_missing_first_then_numbers_then_text() -> None:
    by = SortBy("{.v}")
    keys = [by.key({}), by.key({"v": None}), by.key({"v": 2}), by.key({"v": 10}),
            by.key({"v": "a"})]
    assert keys == sorted(keys)


def test_live_get_sends_the_selector_to_the_api_server(capsys, tmp_path: Path) -> None:
    with fake_api() as api:
        api.cluster.extra_groups["jobset.x-k8s.io/v1alpha2"] = [
            {"name": "jobsets", "kind": "JobSet", "namespaced": True}]
        for doc in yaml.safe_load_all(_file(tmp_path).read_text()):
            api.cluster.put(JOBSETS, doc)
        kubeconfig = api.kubeconfig(tmp_path)
        ran = muster(capsys, "get", "jobsets", "-A", "-l", "team=nlp,!spot", "--kubeconfig",
                     kubeconfig, "--sort-by", ".metadata.name", "-o", "name")
        assert ran.code == 0, ran.err
        assert ran.out.split() == ["jobset.jobset.x-k8s.io/alpha"]
        # The workload list asks the server to filter (the pods' owner chains are read whole).
        asked = [q.get("labelSelector") for path, q in api.cluster.queries if path == JOBSETS]
        assert asked[0] == "team=nlp,!spot"
