"""``muster forecast -f RECORDING`` forecasts from the time the recording was made and prints,
per waiting gang, when it starts and what it waits for; ``-o json`` gives scripts the same."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from extender.cli import forecast as forecast_cmd
from extender.cli.errors import CliError
from tests.unit.simulator.forecast_snapshots import NOW, jobset, node, running_pods, stamp


def recording(tmp_path: Path, *items: dict[str, Any]) -> Path:
    path = tmp_path / "snapshot.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "List",
        "metadata": {"annotations": {"muster.dev/recorded-at": stamp(NOW)}},
        "items": list(items)}), encoding="utf-8")
    return path


def forecast(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="muster")
    forecast_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["forecast", *argv])
    code = args.handler(args)
    return code, capsys.readouterr().out


@pytest.fixture
def behind_a_jobset(tmp_path: Path) -> Path:
    return recording(tmp_path, node("n1"), node("n2"), jobset("train", runtime="10m"),
                     *running_pods("train", "n1", "n2"), jobset("next", runtime="20m"),
                     jobset("after", pods=1, created=NOW))


def test_the_table_says_when_and_behind_what(capsys: pytest.CaptureFixture[str],
                                             behind_a_jobset: Path) -> None:
    code, out = forecast(capsys, "-f", str(behind_a_jobset))
    lines = [line.split() for line in out.splitlines()]
    assert code == 0
    assert lines[0] == ["GANG", "START", "WAITS", "FOR"]
    assert [words[1:] for words in lines[1:]] == [
        ["in", "about", "6m", "JobSet/ml/train"],
        ["in", "about", "26m", "JobSet/ml/next"]]


def test_json_gives_seconds_and_the_workloads_waited_for(
        capsys: pytest.CaptureFixture[str], behind_a_jobset: Path) -> None:
    code, out = forecast(capsys, "-f", str(behind_a_jobset), "-o", "json")
    gangs = {g["workload"]: g for g in orjson.loads(out)["gangs"]}
    assert code == 0
    assert gangs["JobSet/ml/next"] == {
        "gang": gangs["JobSet/ml/next"]["gang"], "workload": "JobSet/ml/next",
        "outlook": "starts", "startSeconds": 360.0, "upperBound": False,
        "waitsFor": ["JobSet/ml/train"], "unknownRuntimes": []}


def test_a_start_resting_on_an_unknown_runtime_is_unknown(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = recording(tmp_path, node("n1"), jobset("train", pods=1),
                     *running_pods("train", "n1"), jobset("next", pods=1))
    _, out = forecast(capsys, "-f", str(path))
    assert out.splitlines()[1].split()[1:] == ["unknown", "JobSet/ml/train", "(runtime",
                                               "unknown)"]


def test_a_file_that_is_no_snapshot_is_one_line_naming_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = recording(tmp_path, jobset("next"))
    with pytest.raises(CliError, match=r"snapshot\.yaml: the snapshot has no Node objects"):
        forecast(capsys, "-f", str(path))
