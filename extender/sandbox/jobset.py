"""The real JobSet controller (sigs.k8s.io/jobset v0.10.1) in the sandbox, opt-in.

Its CRD and webhook configurations are the release's own (``build.sh`` copies them beside the
binary). The webhooks are served on loopback: the sandbox makes a CA and a serving
certificate for 127.0.0.1 with openssl, points each webhook at ``https://127.0.0.1:PORT`` with
that CA, and narrows the pod webhooks to JobSet pods as the release's kustomize patches do.
"""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from typing import Any

import yaml

from extender.files.yamlsafe import load_all

CRD_FILE = "jobset-crd.yaml"
WEBHOOKS_FILE = "jobset-webhooks.yaml"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"


def make_certs(directory: Path) -> Path:
    """A CA and a serving certificate for 127.0.0.1 (``tls.crt``/``tls.key``, as
    controller-runtime's webhook server reads them); returns the certificate directory."""
    certs = directory / "jobset-certs"
    certs.mkdir(parents=True, exist_ok=True)

    def run(*argv: str) -> None:
        subprocess.run(["openssl", *argv], check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
        "-subj", "/CN=muster-sandbox-webhook-ca", "-keyout", str(certs / "ca.key"),
        "-out", str(certs / "ca.crt"))
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", str(certs / "tls.key"), "-out", str(certs / "tls.csr"))
    (certs / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n"
                                   "extendedKeyUsage=serverAuth\n")
    run("x509", "-req", "-in", str(certs / "tls.csr"), "-CA", str(certs / "ca.crt"),
        "-CAkey", str(certs / "ca.key"), "-CAcreateserial", "-days", "30",
        "-extfile", str(certs / "san.cnf"), "-out", str(certs / "tls.crt"))
    return certs


def write_config(directory: Path, *, webhook_port: int, health_port: int,
                 cert_dir: Path) -> Path:
    """The controller's Configuration: no leader election, no in-cluster cert rotation (the
    sandbox made the certificate), webhooks and probes on loopback, no metrics server."""
    config = {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
    }
    path = directory / "jobset-config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def argv(bin_dir: Path, *, kubeconfig: Path, config: Path) -> list[str]:
    return [str(bin_dir / "jobset"), f"--config={config}", f"--kubeconfig={kubeconfig}"]


def crd(bin_dir: Path) -> dict[str, Any]:
    docs = [d for d in load_all((bin_dir / CRD_FILE).read_text()) if isinstance(d, dict)]
    if len(docs) != 1:
        raise ValueError(f"{bin_dir / CRD_FILE}: expected one CRD, found {len(docs)}")
    return docs[0]


def webhook_configurations(bin_dir: Path, *, port: int, ca: bytes) -> list[dict[str, Any]]:
    """The release's webhook configurations, served at ``https://127.0.0.1:port``."""
    bundle = base64.b64encode(ca).decode()
    configs = [d for d in load_all((bin_dir / WEBHOOKS_FILE).read_text()) if isinstance(d, dict)]
    for config in configs:
        config["metadata"]["name"] = f"jobset-{config['metadata']['name']}"
        for hook in config.get("webhooks", []):
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}",
                                    "caBundle": bundle}
            if any("pods" in rule.get("resources", []) for rule in hook.get("rules", [])):
                hook["objectSelector"] = {"matchExpressions": [
                    {"key": JOBSET_LABEL, "operator": "Exists"}]}
    return configs
