"""The install manifests agree with the code: verbs, timeouts, where each side finds the other
and its certificates, which port answers what."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.core.model.durations import parse_seconds
from extender.core.workloads.admission import may_join_a_gang
from extender.files.catalog import packaged_catalog
from extender.server.settings import Settings

MANIFESTS = Path(__file__).resolve().parents[3] / "manifests"


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d]


def scheduler_config() -> dict[str, Any]:
    [cm] = docs("scheduler-config.yaml")
    config: dict[str, Any] = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
    return config


def pod_spec(name: str) -> dict[str, Any]:
    [deploy] = docs(name)
    spec: dict[str, Any] = deploy["spec"]["template"]["spec"]
    return spec


def muster_env() -> dict[str, str]:
    [muster] = pod_spec("deployment.yaml")["containers"]
    return {e["name"]: e["value"] for e in muster["env"] if "value" in e}  # not valueFrom


def mounted_secret(spec: dict[str, Any], path: str) -> tuple[str, str]:
    """(secret name, file name) of the file at ``path`` in the pod's only container."""
    [container] = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    for mount in container["volumeMounts"]:
        if path.startswith(mount["mountPath"] + "/"):
            return (volumes[mount["name"]]["secret"]["secretName"],
                    path[len(mount["mountPath"]) + 1:])
    raise AssertionError(f"{path} is on no mounted volume")


def seconds(duration: str) -> float:
    return parse_seconds(duration)  # both sides are Go durations, as kube-scheduler reads them


def test_the_extender_block_matches_what_muster_serves() -> None:
    config = scheduler_config()
    assert config["percentageOfNodesToScore"] == 100
    [ext] = config["extenders"]
    assert ext["nodeCacheCapable"] is True
    # Every pod of the profile reaches Muster: one whose GPUs come through ResourceClaims
    # alone requests no resource name that managedResources could list.
    assert "managedResources" not in ext
    assert {ext[k] for k in ("filterVerb", "prioritizeVerb", "preemptVerb", "bindVerb")} == {
        "filter", "prioritize", "preempt", "bind"}
    assert ext["weight"] > 0
    port = muster_env().get("MUSTER_PORT", str(Settings().port))
    [service] = [d for d in docs("service.yaml") if d["kind"] == "Service"]
    assert ext["urlPrefix"] == f"https://{service['metadata']['name']}.muster-system.svc:{port}"


def test_each_side_holds_the_certificates_the_other_verifies() -> None:
    """kube-scheduler's tlsConfig files and Muster's MUSTER_TLS_* files are on the Secrets
    the install creates (docs/install.md), with the names kubectl create secret gives them."""
    [ext] = scheduler_config()["extenders"]
    tls = ext["tlsConfig"]
    assert not tls.get("insecure") and "enableHTTPS" not in ext
    scheduler = pod_spec("scheduler-deployment.yaml")
    assert [mounted_secret(scheduler, tls[k]) for k in ("certFile", "keyFile", "caFile")] == [
        ("muster-scheduler-tls", "tls.crt"), ("muster-scheduler-tls", "tls.key"),
        ("muster-scheduler-tls", "ca.crt")]
    env, muster = muster_env(), pod_spec("deployment.yaml")
    assert [mounted_secret(muster, env[k]) for k in (
        "MUSTER_TLS_CERT", "MUSTER_TLS_KEY", "MUSTER_TLS_CLIENT_CA")] == [
        ("muster-extender-tls", "tls.crt"), ("muster-extender-tls", "tls.key"),
        ("muster-extender-tls", "ca.crt")]
    install = (MANIFESTS.parent / "docs" / "install.md").read_text()
    for secret in ("muster-scheduler-tls", "muster-extender-tls"):
        assert f"create secret generic {secret}" in install


def test_probes_and_metrics_use_the_probe_port_and_only_kube_scheduler_reaches_the_verbs(
        ) -> None:
    env = muster_env()
    [muster] = pod_spec("deployment.yaml")["containers"]
    ports = {p["name"]: p["containerPort"] for p in muster["ports"]}
    assert ports == {"extender": int(env["MUSTER_PORT"]),
                     "probes": int(env["MUSTER_PROBE_PORT"]),
                     "webhook": int(env["MUSTER_WEBHOOK_PORT"])}
    assert muster["readinessProbe"]["httpGet"]["port"] == "probes"
    assert muster["livenessProbe"]["httpGet"]["port"] == "probes"
    service, policy = docs("service.yaml")
    assert {p["name"]: p["targetPort"] for p in service["spec"]["ports"]} == {
        "extender": "extender", "metrics": "probes", "webhook": "webhook"}
    [verbs] = [r for r in policy["spec"]["ingress"]
               if r["ports"] == [{"port": ports["extender"]}]]
    [source] = verbs["from"]
    scheduler_labels = docs("scheduler-deployment.yaml")[0]["spec"]["template"]["metadata"][
        "labels"]
    assert source == {"podSelector": {"matchLabels": scheduler_labels}}
    assert service["spec"]["selector"] == policy["spec"]["podSelector"]["matchLabels"]
    assert service["spec"]["selector"] != scheduler_labels


def test_the_gate_webhook_is_reached_through_the_service_with_the_extenders_certificate(
        ) -> None:
    env = muster_env()
    [hook] = docs("webhook.yaml")
    [entry] = hook["webhooks"]
    assert entry["failurePolicy"] == "Ignore" and entry["sideEffects"] == "None"
    assert entry["reinvocationPolicy"] == "Never" and entry["timeoutSeconds"] <= 5
    assert entry["rules"] == [{"operations": ["CREATE"], "apiGroups": [""],
                               "apiVersions": ["v1"], "resources": ["pods"],
                               "scope": "Namespaced"}]
    service, policy = docs("service.yaml")
    target = entry["clientConfig"]["service"]
    assert (target["name"], target["namespace"]) == (service["metadata"]["name"],
                                                      service["metadata"]["namespace"])
    assert target["path"] == "/admission/gate"
    [port] = [p for p in service["spec"]["ports"] if p["port"] == target["port"]]
    assert port["targetPort"] == "webhook"
    assert {"ports": [{"port": int(env["MUSTER_WEBHOOK_PORT"])}]} in policy["spec"]["ingress"]
    muster = pod_spec("deployment.yaml")
    assert [mounted_secret(muster, env[k]) for k in ("MUSTER_WEBHOOK_CERT",
                                                     "MUSTER_WEBHOOK_KEY")] == [
        ("muster-extender-tls", "tls.crt"), ("muster-extender-tls", "tls.key")]
    names = Settings().scheduler_names
    assert [c["expression"] for c in entry["matchConditions"]] == [
        f"object.spec.schedulerName == '{names[0]}'",
        may_join_a_gang(packaged_catalog())] and len(names) == 1
    excluded = entry["namespaceSelector"]["matchExpressions"][0]
    assert service["metadata"]["namespace"] in excluded["values"]


def test_a_held_bind_answers_well_within_the_scheduler_http_timeout() -> None:
    [ext] = scheduler_config()["extenders"]
    bind_timeout = seconds(muster_env().get("MUSTER_BIND_TIMEOUT", str(Settings().bind_timeout)))
    assert seconds(ext["httpTimeout"]) >= 1.5 * bind_timeout


def test_the_kustomization_lists_every_manifest() -> None:
    [kustomization] = docs("kustomization.yaml")
    files = {p.name for p in MANIFESTS.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


def test_every_read_only_container_of_muster_has_a_writable_tmp() -> None:
    # gunicorn writes its worker heartbeat to a temporary file; with a read-only root and
    # nowhere to write, the worker would fail to boot.
    spec = pod_spec("deployment.yaml")
    [muster] = spec["containers"]
    assert muster["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m["name"] for m in muster.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]


def kubectl() -> str | None:
    """kubectl on the PATH, else the one the sandbox's control plane build left."""
    found = shutil.which("kubectl")
    built = sorted(Path.home().glob(".cache/muster/controlplane/*/bin/kubectl"))
    return found or (str(built[-1]) if built else None)


def test_kubectl_kustomize_renders_both_deployments_and_both_accounts() -> None:
    binary = kubectl()
    if binary is None:
        pytest.skip("no kubectl on this machine")
    out = subprocess.run([binary, "kustomize", str(MANIFESTS)], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    objects = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(out) if d}
    assert {("Deployment", "muster"), ("Deployment", "muster-scheduler"),
            ("ServiceAccount", "muster"), ("ServiceAccount", "muster-scheduler"),
            ("ClusterRole", "muster-extender")} <= objects


def test_two_replicas_of_each_on_different_nodes_with_one_always_left_by_a_drain() -> None:
    budgets = {d["metadata"]["name"]: d for d in docs("pdb.yaml")}
    for name, deployment in (("muster", "deployment.yaml"),
                             ("muster-scheduler", "scheduler-deployment.yaml")):
        [deploy] = docs(deployment)
        assert deploy["spec"]["replicas"] == 2
        selector = deploy["spec"]["selector"]
        assert budgets[name]["spec"] == {"minAvailable": 1, "selector": selector}
        [term] = deploy["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"]
        assert term["podAffinityTerm"] == {"topologyKey": "kubernetes.io/hostname",
                                           "labelSelector": selector}
    # Both replicas of Muster elect a leader; kube-scheduler's pair has its own lease.
    assert muster_env()["MUSTER_LEADER_ELECT"] == "true"
    assert scheduler_config()["leaderElection"]["leaderElect"] is True


def test_musters_pod_runs_as_the_user_its_image_declares() -> None:
    # The image's user owns its home and has a passwd entry; a pod that overrides it with
    # another UID runs as a user the image does not know.
    image = MANIFESTS.parent / "packaging" / "image"
    users = {line.split()[1] for f in sorted(image.glob("Containerfile*"))
             for line in f.read_text().splitlines() if line.startswith("USER ")}
    assert len(users) == 1, users
    uid, _, gid = users.pop().partition(":")
    context = pod_spec("deployment.yaml")["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"]) == (int(uid), int(gid))
    assert context["runAsNonRoot"] is True
