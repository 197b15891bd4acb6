"""The install manifests agree with the code: verbs, timeouts, RBAC for every described kind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from extender.files.catalog import packaged_catalog
from extender.server.durations import parse_seconds
from extender.server.settings import Settings

MANIFESTS = Path(__file__).resolve().parents[3] / "manifests"


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d]


def scheduler_config() -> dict[str, Any]:
    [cm] = docs("scheduler-config.yaml")
    config: dict[str, Any] = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
    return config


def muster_env() -> dict[str, str]:
    [deploy] = docs("deployment.yaml")
    [muster] = [c for c in deploy["spec"]["template"]["spec"]["containers"]
                if c["name"] == "muster"]
    return {e["name"]: e["value"] for e in muster["env"]}


def seconds(duration: str) -> float:
    return parse_seconds(duration)  # both sides are Go durations, as kube-scheduler reads them


def test_the_extender_block_matches_what_muster_serves() -> None:
    config = scheduler_config()
    assert config["percentageOfNodesToScore"] == 100
    [ext] = config["extenders"]
    assert ext["nodeCacheCapable"] is True
    assert ext["managedResources"] == [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}]
    assert {ext[k] for k in ("filterVerb", "prioritizeVerb", "preemptVerb", "bindVerb")} == {
        "filter", "prioritize", "preempt", "bind"}
    assert ext["weight"] > 0
    port = muster_env().get("MUSTER_PORT", str(Settings().port))
    assert ext["urlPrefix"] == f"http://127.0.0.1:{port}"


def test_a_held_bind_answers_well_within_the_scheduler_http_timeout() -> None:
    [ext] = scheduler_config()["extenders"]
    bind_timeout = seconds(muster_env().get("MUSTER_BIND_TIMEOUT", str(Settings().bind_timeout)))
    assert seconds(ext["httpTimeout"]) >= 1.5 * bind_timeout


def test_rbac_lets_muster_list_and_watch_every_kind_the_catalog_targets() -> None:
    [role] = [d for d in docs("rbac.yaml") if d["kind"] == "ClusterRole"]
    granted = {(g, r) for rule in role["rules"] for g in rule["apiGroups"]
               for r in rule["resources"] if {"list", "watch"} <= set(rule["verbs"])}
    for d in packaged_catalog().descriptors:
        assert (d.target.group, d.target.plural) in granted, d.name
    assert ("", "pods/binding") in {(g, r) for rule in role["rules"] for g in rule["apiGroups"]
                                    for r in rule["resources"] if rule["verbs"] == ["create"]}


def test_the_kustomization_lists_every_manifest() -> None:
    [kustomization] = docs("kustomization.yaml")
    files = {p.name for p in MANIFESTS.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


def test_every_read_only_container_of_muster_has_a_writable_tmp() -> None:
    # gunicorn writes its worker heartbeat to a temporary file; with a read-only root and
    # nowhere to write, the worker would fail to boot.
    [deploy] = docs("deployment.yaml")
    spec = deploy["spec"]["template"]["spec"]
    [muster] = [c for c in spec["containers"] if c["name"] == "muster"]
    assert muster["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m["name"] for m in muster.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
