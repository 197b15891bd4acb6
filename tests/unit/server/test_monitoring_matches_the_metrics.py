"""The alerts and the dashboard ask for metrics Muster exports (read from a real scrape), scrape
the port that serves them, and each alert's runbook is a section of docs/operations.md, linked
by an absolute address."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.server.builders import filter_body, jobset_pod
from tests.unit.server.test_operations_metrics import NODES_, World

ROOT = Path(__file__).resolve().parents[3]
MONITORING = ROOT / "manifests" / "monitoring"
_METRIC = re.compile(r"\b(muster_[a-z_]+)")


@pytest.fixture(scope="module")
def exported() -> set[str]:
    """Every series name ``/metrics`` can show, from a scrape after a gang was admitted."""
    world = World()
    for i in (0, 1):
        world.post("filter", filter_body(jobset_pod("train", i, gpus=8), NODES_))
    assert world.bind_both() == {0: "", 1: ""}
    text = world.client.get("/metrics").data.decode()
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines()
             if line and not line.startswith("#")}
    for kind_line in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M):
        name, kind = kind_line
        names.add(name)
        if kind == "histogram":
            names.update(name + suffix for suffix in ("_bucket", "_sum", "_count"))
    return names


def rules() -> list[dict[str, Any]]:
    [doc] = yaml.safe_load_all((MONITORING / "prometheusrule.yaml").read_text())
    return [r for group in doc["spec"]["groups"] for r in group["rules"]]


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((MONITORING / "muster-dashboard.json").read_text())
    return loaded


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^a-z0-9 -]", "", heading.strip().lower()).replace(" ", "-")


def test_every_alert_asks_for_metrics_muster_exports(exported: set[str]) -> None:
    for rule in rules():
        names = set(_METRIC.findall(rule["expr"]))
        assert names or "up{" in rule["expr"], rule["alert"]
        assert names <= exported, (rule["alert"], names - exported)


def test_every_dashboard_panel_asks_for_metrics_muster_exports(exported: set[str]) -> None:
    panels = dashboard()["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    for panel in panels:
        for target in panel["targets"]:
            names = set(_METRIC.findall(target["expr"]))
            assert names and names <= exported, (panel["title"], names - exported)


def test_every_alert_links_a_runbook_section_and_says_how_bad_it_is() -> None:
    anchors = {slug(line.lstrip("#")) for line in
               (ROOT / "docs" / "operations.md").read_text().splitlines()
               if line.startswith("## ")}
    [runbooks] = yaml.safe_load_all((MONITORING / "runbooks.yaml").read_text())
    base = runbooks["data"]["runbookBaseURL"]
    assert base.startswith("https://") and base.endswith("/docs/operations.md")
    for rule in rules():
        page, anchor = rule["annotations"]["runbook_url"].split("#")
        assert page == base and anchor in anchors, rule["alert"]
        assert rule["labels"]["severity"] in ("critical", "warning", "info")
        assert rule["annotations"]["summary"]


def test_prometheus_scrapes_the_probe_port_of_the_extender_service() -> None:
    service = yaml.safe_load_all((ROOT / "manifests" / "service.yaml").read_text())
    [svc] = [d for d in service if d and d["kind"] == "Service"]
    [monitor] = yaml.safe_load_all((MONITORING / "servicemonitor.yaml").read_text())
    [endpoint] = monitor["spec"]["endpoints"]
    ports = {p["name"]: p["targetPort"] for p in svc["spec"]["ports"]}
    assert ports[endpoint["port"]] == "probes" and endpoint["path"] == "/metrics"
    assert monitor["spec"]["selector"]["matchLabels"] == svc["spec"]["selector"]
    # The operator names the job after the Service: the "down" alert must use that name.
    [down] = [r for r in rules() if r["alert"] == "MusterDown"]
    assert f'up{{job="{svc["metadata"]["name"]}"}}' in down["expr"]
