"""``MusterGangsWaitLong`` evaluated by Prometheus's own rule engine (``promtool test rules``)
on the series a real Muster exports: a gang that never fits is scraped once a minute for 80
minutes (the app's clock moved by hand), and the alert is pending past the hour and firing five
minutes later, on the leader's series, whatever the standby reports.

promtool is Prometheus's; it is looked for on ``PATH`` and under ``~/.cache/muster/promtool/bin``,
where ``make test`` (``make promtool``, ``tests/tools/promtool.sh``) builds it from the Go module
proxy; without it these tests fail, saying how to build it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.server.test_a_gang_that_never_starts_shows_in_the_waiting_gauges import (
    CREATED,
    Cluster,
)

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "manifests" / "monitoring" / "prometheusrule.yaml"
ALERT = "MusterGangsWaitLong"
MINUTES = 80


def promtool() -> str:
    found = shutil.which("promtool") or str(
        Path.home() / ".cache" / "muster" / "promtool" / "bin" / "promtool")
    if not os.access(found, os.X_OK):
        pytest.fail("promtool is not installed: `make promtool` (bash tests/tools/promtool.sh) "
                    "builds it under ~/.cache/muster/promtool")
    return found


def rule_groups() -> dict[str, Any]:
    [doc] = yaml.safe_load_all(RULES.read_text())
    return {"groups": doc["spec"]["groups"]}


def scraped_series() -> list[float]:
    """``muster_oldest_waiting_gang_seconds`` of a gang that never fits, once a minute."""
    cluster = Cluster(gpus=16)
    cluster.filter_both()
    values = []
    for minute in range(MINUTES + 1):
        cluster.clock.now = CREATED + 60 * minute
        values.append(cluster.gauge("muster_oldest_waiting_gang_seconds"))
    return values


def expected_alert(rule: dict[str, Any], value: str) -> dict[str, Any]:
    annotations = {k: v.replace("{{ $value | humanizeDuration }}", value)
                   for k, v in rule["annotations"].items()}
    return {"exp_labels": rule["labels"], "exp_annotations": annotations}


def run_promtool(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=120,
                          check=False, cwd=tmp_path)


def test_every_rule_is_valid_promql_to_prometheus(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_groups()))
    done = run_promtool(tmp_path, "check", "rules", "rules.yaml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_gang_that_never_starts_fires_the_long_wait_alert(tmp_path: Path) -> None:
    groups = rule_groups()
    [rule] = [r for g in groups["groups"] for r in g["rules"] if r.get("alert") == ALERT]
    series = scraped_series()
    assert series[60] == 3600 and series[MINUTES] == 60 * MINUTES  # it ages, never resets
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(groups))
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": 'muster_oldest_waiting_gang_seconds{pod="muster-leader"}',
                 "values": " ".join(f"{v:g}" for v in series)},
                {"series": 'muster_oldest_waiting_gang_seconds{pod="muster-standby"}',
                 "values": f"0x{MINUTES}"},
            ],
            "alert_rule_test": [
                {"eval_time": "60m", "alertname": ALERT, "exp_alerts": []},
                # Over the hour from minute 61, held 5 minutes: pending until 66.
                {"eval_time": "65m", "alertname": ALERT, "exp_alerts": []},
                {"eval_time": "66m", "alertname": ALERT,
                 "exp_alerts": [expected_alert(rule, "1h 6m 0s")]},
                {"eval_time": "80m", "alertname": ALERT,
                 "exp_alerts": [expected_alert(rule, "1h 20m 0s")]},
            ],
        }],
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
    done = run_promtool(tmp_path, "test", "rules", "tests.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
