"""How the sandbox runs Kueue v0.17.0: its Configuration (the integrations a platform team
beside a gang scheduler turns on, no waitForPodsReady), the webhooks it installs, the overlay
that shows Kueue the metrics certificate it reads from /etc, and the queues it creates."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest
import yaml

from extender.sandbox import mountns
from extender.sandbox.local import SandboxError
from extender.sandbox.operators import (
    KUEUE,
    argv,
    config_file,
    environment,
    release_objects,
    webhook_configurations,
)
from extender.sandbox.spec import SandboxSpec


def test_kueue_manages_only_queued_jobs_and_jobsets_with_no_pods_ready_timer(
        tmp_path: Path) -> None:
    path = config_file(KUEUE, tmp_path, webhook_port=1, health_port=2, cert_dir=tmp_path / "c")
    config = yaml.safe_load(path.read_text())
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert config["internalCertManagement"] == {"enable": False}
    assert config["webhook"] == {"port": 1, "host": "127.0.0.1", "certDir": str(tmp_path / "c")}
    assert config["manageJobsWithoutQueueName"] is False
    assert config["integrations"] == {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset"]}
    assert "waitForPodsReady" not in config  # in v1beta2 its presence turns it on
    assert config["featureGates"] == {"VisibilityOnDemand": False}


def test_only_the_webhooks_of_kueues_kinds_jobs_and_jobsets_are_installed(
        tmp_path: Path) -> None:
    def hook(name: str, group: str, resource: str) -> dict[str, object]:
        return {"name": name, "clientConfig": {"service": {"path": f"/{name}"}},
                "rules": [{"apiGroups": [group], "resources": [resource]}]}

    (tmp_path / "kueue-webhooks.yaml").write_text(yaml.safe_dump(
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
         "metadata": {"name": "mutating-webhook-configuration"},
         "webhooks": [hook("mpod.kb.io", "", "pods"),
                      hook("mjob.kb.io", "batch", "jobs"),
                      hook("mjobset.kb.io", "jobset.x-k8s.io", "jobsets"),
                      hook("mmpijob.kb.io", "kubeflow.org", "mpijobs"),
                      hook("mworkload.kb.io", "kueue.x-k8s.io", "workloads")]}))
    [config] = webhook_configurations(KUEUE, tmp_path, port=9443, ca=b"ca")
    assert config["metadata"]["name"] == "kueue-mutating-webhook-configuration"
    assert [h["name"] for h in config["webhooks"]] == ["mjob.kb.io", "mjobset.kb.io",
                                                       "mworkload.kb.io"]
    assert config["webhooks"][0]["clientConfig"]["url"] == "https://127.0.0.1:9443/mjob.kb.io"


def test_kueue_runs_in_a_mount_namespace_whose_etc_shows_the_sandboxs_certificates(
        tmp_path: Path) -> None:
    certs = tmp_path / "webhook-certs"
    certs.mkdir()
    (certs / "tls.crt").write_text("cert")
    assert environment(KUEUE, tmp_path, cert_dir=certs) == {}
    config = config_file(KUEUE, tmp_path, webhook_port=1, health_port=2, cert_dir=certs)
    command = argv(KUEUE, Path("/bin"), kubeconfig=Path("/k"), config=config, health_port=2)
    assert command[-3:] == ["/bin/kueue", f"--config={config}", "--kubeconfig=/k"]
    upper, _ = mountns.layers(tmp_path, "kueue")
    assert (upper / "kueue/metrics/certs/tls.crt").read_text() == "cert"
    assert not Path("/etc/kueue").exists()  # the host's /etc is never written


def test_the_overlay_shows_the_file_under_etc_to_the_command_alone(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    certs.mkdir()
    (certs / "tls.crt").write_text("seen through the overlay")
    mountns.prepare(tmp_path, "probe", at="muster-probe/certs", target=certs)
    command = mountns.wrapped(["cat", "/etc/muster-probe/certs/tls.crt"], tmp_path, "probe")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0 and ("mount" in done.stderr or "unshare" in done.stderr):
        pytest.skip(f"no unprivileged mount namespace here: {done.stderr.strip()}")
    assert done.stdout == "seen through the overlay"
    assert not Path("/etc/muster-probe").exists()


def test_a_directory_an_overlay_mount_cannot_take_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="overlay mount cannot take"):
        mountns.wrapped(["true"], tmp_path / "a,b", "kueue")


def test_the_sandboxs_queues_are_created_at_their_kinds_paths(tmp_path: Path) -> None:
    for kind, plural, scope in (("ResourceFlavor", "resourceflavors", "Cluster"),
                                ("ClusterQueue", "clusterqueues", "Cluster"),
                                ("LocalQueue", "localqueues", "Namespaced")):
        crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": f"{plural}.kueue.x-k8s.io"},
               "spec": {"group": "kueue.x-k8s.io", "scope": scope,
                        "names": {"kind": kind, "plural": plural}}}
        (tmp_path / f"kueue-crd-{plural}.yaml").write_text(yaml.safe_dump(crd))
    op = dataclasses.replace(KUEUE, crd_files=tuple(
        f"kueue-crd-{p}.yaml" for p in ("resourceflavors", "clusterqueues", "localqueues")))
    made = dict(release_objects(op, tmp_path))
    assert list(made) == ["/apis/kueue.x-k8s.io/v1beta2/resourceflavors",
                          "/apis/kueue.x-k8s.io/v1beta2/clusterqueues",
                          "/apis/kueue.x-k8s.io/v1beta2/namespaces/default/localqueues"]
    queue = made["/apis/kueue.x-k8s.io/v1beta2/clusterqueues"]
    [group] = queue["spec"]["resourceGroups"]
    quota = {r["name"]: r["nominalQuota"] for r in group["flavors"][0]["resources"]}
    spec = SandboxSpec()
    assert quota["nvidia.com/gpu"] == spec.nodes * spec.gpus_per_node  # the default sandbox's
    assert made["/apis/kueue.x-k8s.io/v1beta2/namespaces/default/localqueues"]["spec"] == {
        "clusterQueue": queue["metadata"]["name"]}
