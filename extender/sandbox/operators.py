"""The real operators a sandbox can run: the JobSet controller, LeaderWorkerSet, KubeRay, the
MPI operator and Kubeflow Trainer.

Each is the unmodified upstream command of a pinned release (``build.sh`` builds it and copies
the release's CRDs, webhook configurations, webhook patches and cluster objects such as
Trainer's ``torch-distributed`` runtime beside the binary). The webhooks are served on
loopback: the sandbox makes one CA and one serving certificate for 127.0.0.1 with openssl,
points every webhook at ``https://127.0.0.1:PORT`` with that CA, and applies the patches the
release's kustomization applies (they narrow the pod webhooks to the operator's own pods). The
CRDs the sandbox installs for an operator carry :data:`OPERATOR_LABEL`, which is how
:mod:`submit` knows no stand-in must run for that kind.
"""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from extender.files.yamlsafe import load_all
from extender.sandbox.config import Ports
from extender.sandbox.local import SandboxError

#: On each CRD the sandbox installs for a real operator: the operator's name.
OPERATOR_LABEL = "muster.dev/sandbox-operator"
CERT_DIR = "webhook-certs"


@dataclass(frozen=True)
class Operator:
    name: str
    """Its process, binary and ``--NAME`` flag."""
    release: str
    crd_files: tuple[str, ...]
    webhooks_file: str | None = None
    webhook_patches: tuple[str, ...] = ()
    """JSON patches (RFC 6902) the release's ``config/.../webhook/kustomization.yaml`` applies,
    each to the configuration of the kind its ops belong to (mutating, validating)."""
    config_api: str | None = None
    """The ``apiVersion`` of its controller-runtime Configuration file; None: it takes flags."""
    cert_management: str = "internalCertManagement"
    """The Configuration's key that turns the release's own certificate rotation off."""
    cert_dir_in_config: bool = True
    """Whether its Configuration's ``webhook`` takes ``certDir``; if not, controller-runtime's
    default, ``$TMPDIR/k8s-webhook-server/serving-certs``, is where it reads them."""
    flags: tuple[str, ...] = ()
    """Its command-line flags; ``{health}`` becomes its health-probe port."""
    kubeconfig_flag: str = "--kubeconfig"
    health_path: str = "/readyz"
    fixed_health_port: int | None = None
    """A health port the release cannot be told (it listens on every interface); None: a
    loopback port the sandbox picks."""
    objects: tuple[str, ...] = ()
    """Release files of cluster-scoped objects of its own kinds, created once its webhooks
    are installed (the runtimes its default installation ships)."""

    @property
    def option(self) -> str:
        """Its :class:`~extender.sandbox.spec.SandboxSpec` field and :class:`Ports` prefix:
        its name with underscores for dashes (``mpi_operator``)."""
        return self.name.replace("-", "_")

    def files(self) -> tuple[str, ...]:
        hooks = (self.webhooks_file,) if self.webhooks_file else ()
        return (self.name, *self.crd_files, *hooks, *self.webhook_patches, *self.objects)


JOBSET = Operator(
    name="jobset", release="JobSet v0.10.1", crd_files=("jobset-crd.yaml",),
    webhooks_file="jobset-webhooks.yaml",
    webhook_patches=("jobset-webhooks-mutating-patch.yaml",
                     "jobset-webhooks-validating-patch.yaml"),
    config_api="config.jobset.x-k8s.io/v1alpha1")
LWS = Operator(
    name="lws", release="LeaderWorkerSet v0.7.0", crd_files=("lws-crd.yaml",),
    webhooks_file="lws-webhooks.yaml",
    webhook_patches=("lws-webhooks-mutating-patch.yaml", "lws-webhooks-validating-patch.yaml"),
    config_api="config.lws.x-k8s.io/v1alpha1")
#: KubeRay's webhook (RayCluster validation) is optional upstream: it runs only with
#: ENABLE_WEBHOOKS=true and its default kustomization (config/default) leaves it out; so does
#: the sandbox. Its configuration comes from flags (a --config file would replace them all).
KUBERAY = Operator(
    name="kuberay", release="KubeRay v1.5.0",
    crd_files=("kuberay-crd-rayclusters.yaml", "kuberay-crd-rayjobs.yaml",
               "kuberay-crd-rayservices.yaml"),
    flags=("--enable-leader-election=false", "--metrics-addr=0",
           "--health-probe-bind-address=127.0.0.1:{health}", "--log-stdout-encoder=console"))
#: The MPI operator's v2 controller (MPIJob v2beta1): flags only, no webhook. It always runs
#: leader election (its Lease in an existing namespace, kube-system) and serves /healthz on
#: :8080 of every interface, a port v0.7.0 has no flag for; --monitoring-port=0 turns its
#: metrics server off. Its Go flag for the kubeconfig is spelled ``--kubeConfig``.
MPI_OPERATOR = Operator(
    name="mpi-operator", release="MPI operator v0.7.0", crd_files=("mpi-operator-crd.yaml",),
    flags=("--lock-namespace=kube-system", "--monitoring-port=0"),
    kubeconfig_flag="--kubeConfig", health_path="/healthz", fixed_health_port=8080)
#: Kubeflow Trainer's controller manager (TrainJob, TrainingRuntime, ClusterTrainingRuntime):
#: its TrainJobs become JobSets, so it runs with the JobSet controller. Its Configuration
#: turns its certificate rotation off under ``certManagement`` and has no ``certDir``.
TRAINER = Operator(
    name="trainer", release="Kubeflow Trainer v2.1.0",
    crd_files=("trainer-crd-trainjobs.yaml", "trainer-crd-trainingruntimes.yaml",
               "trainer-crd-clustertrainingruntimes.yaml"),
    webhooks_file="trainer-webhooks.yaml", config_api="config.trainer.kubeflow.org/v1alpha1",
    cert_management="certManagement", cert_dir_in_config=False,
    objects=("trainer-runtime-torch-distributed.yaml",))
OPERATORS = (JOBSET, LWS, KUBERAY, MPI_OPERATOR, TRAINER)


def make_certs(directory: Path) -> Path:
    """A CA and a serving certificate for 127.0.0.1 (``tls.crt``/``tls.key``, as
    controller-runtime's webhook server reads them); returns the certificate directory."""
    certs = directory / CERT_DIR
    if all((certs / f).is_file() for f in ("ca.crt", "tls.crt", "tls.key")):
        return certs  # one CA for every webhook on loopback (operators' and Muster's)
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


def config_file(op: Operator, directory: Path, *, webhook_port: int, health_port: int,
                cert_dir: Path) -> Path:
    """The controller's Configuration: no leader election, no in-cluster cert rotation (the
    sandbox made the certificate), webhooks and probes on loopback, no metrics server."""
    if op.config_api is None:
        raise ValueError(f"{op.release} takes flags, not a Configuration file")
    webhook: dict[str, Any] = {"port": webhook_port, "host": "127.0.0.1"}
    if op.cert_dir_in_config:
        webhook["certDir"] = str(cert_dir)
    config = {
        "apiVersion": op.config_api, "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        op.cert_management: {"enable": False},
        "webhook": webhook,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
    }
    path = directory / f"{op.name}-config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def environment(op: Operator, directory: Path, *, cert_dir: Path) -> dict[str, str]:
    """What its process needs in its environment: for an operator whose Configuration names
    no certificate directory, a ``TMPDIR`` whose ``k8s-webhook-server/serving-certs`` is the
    sandbox's (controller-runtime's default place)."""
    if op.cert_dir_in_config or op.webhooks_file is None:
        return {}
    tmp = directory / f"{op.name}-tmp"
    serving = tmp / "k8s-webhook-server" / "serving-certs"
    serving.parent.mkdir(parents=True, exist_ok=True)
    if not serving.is_symlink():
        serving.symlink_to(cert_dir.resolve(), target_is_directory=True)
    return {"TMPDIR": str(tmp)}


def loopback_ports(op: Operator, ports: Ports,
                   free: Callable[[int], list[int]]) -> tuple[int, int]:
    """``(webhook, health)`` ports of ``op``: those :class:`Ports` holds for it (chosen or
    picked at ``up``), the health port its release cannot be told, or else ports free now.
    The webhook port is 0 for one that serves no webhook here."""
    if f"{op.option}_health" in Ports.__dataclass_fields__:
        return ports.of(op.option)
    wants = int(op.webhooks_file is not None) + int(op.fixed_health_port is None)
    picked = free(wants) if wants else []
    webhook = picked.pop() if op.webhooks_file is not None else 0
    health = op.fixed_health_port if op.fixed_health_port is not None else picked.pop()
    return webhook, health


def argv(op: Operator, bin_dir: Path, *, kubeconfig: Path, config: Path | None,
         health_port: int) -> list[str]:
    given = [f"--config={config}"] if config is not None else []
    return [str(bin_dir / op.name), *given, f"{op.kubeconfig_flag}={kubeconfig}",
            *(flag.format(health=health_port) for flag in op.flags)]


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in load_all(path.read_text()) if isinstance(d, dict)]


def crds(op: Operator, bin_dir: Path) -> list[dict[str, Any]]:
    """The release's CRDs, labelled as the operator's."""
    found = []
    for name in op.crd_files:
        docs = _docs(bin_dir / name)
        if len(docs) != 1 or docs[0].get("kind") != "CustomResourceDefinition":
            raise SandboxError(f"{bin_dir / name}: expected one CustomResourceDefinition, "
                               f"found {[d.get('kind') for d in docs]}")
        crd = docs[0]
        crd["metadata"].setdefault("labels", {})[OPERATOR_LABEL] = op.name
        found.append(crd)
    return found


def release_objects(op: Operator, bin_dir: Path) -> list[tuple[str, dict[str, Any]]]:
    """``(API path, object)`` of each cluster-scoped object the release ships with, of a kind
    one of its CRDs defines (Trainer's ``torch-distributed`` ClusterTrainingRuntime)."""
    kinds = {crd["spec"]["names"]["kind"]: crd for crd in crds(op, bin_dir)}
    made = []
    for name in op.objects:
        for doc in _docs(bin_dir / name):
            crd = kinds.get(str(doc.get("kind")))
            if crd is None or crd["spec"].get("scope") != "Cluster":
                raise SandboxError(f"{bin_dir / name}: {doc.get('kind')} is no cluster-scoped "
                                   f"kind of {op.release}")
            made.append((f"/apis/{doc['apiVersion']}/{crd['spec']['names']['plural']}", doc))
    return made


def webhook_configurations(op: Operator, bin_dir: Path, *, port: int,
                           ca: bytes) -> list[dict[str, Any]]:
    """The release's webhook configurations, patched as its kustomization does, served at
    ``https://127.0.0.1:port`` and named after the operator (two share none)."""
    if op.webhooks_file is None:
        return []
    configs = _docs(bin_dir / op.webhooks_file)
    for name in op.webhook_patches:
        _patch(configs, bin_dir / name)
    bundle = base64.b64encode(ca).decode()
    for config in configs:
        config["metadata"]["name"] = f"{op.name}-{config['metadata']['name']}"
        for hook in config.get("webhooks", []):
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}",
                                    "caBundle": bundle}
    return configs


def _patch(configs: list[dict[str, Any]], path: Path) -> None:
    """Apply one release patch file: ``replace`` ops on ``/webhooks/N``, each replacing the
    webhook of the same name (a release that reorders its webhooks fails here, not later)."""
    ops = yaml.safe_load(path.read_text())
    if not isinstance(ops, list):
        raise SandboxError(f"{path}: expected a list of JSON patch operations")
    for at, op in enumerate(ops):
        parts = str(op.get("path", "")).split("/")
        if op.get("op") != "replace" or len(parts) != 3 or parts[1] != "webhooks" \
                or not parts[2].isdigit():
            raise SandboxError(f"{path}: operation {at}: only 'replace' of /webhooks/N is "
                               f"understood, not {op.get('op')!r} of {op.get('path')!r}")
        index, name = int(parts[2]), op["value"]["name"]
        targets = [c for c in configs if index < len(c.get("webhooks", []))
                   and c["webhooks"][index]["name"] == name]
        if len(targets) != 1:
            raise SandboxError(f"{path}: operation {at}: no single configuration has webhook "
                               f"{name!r} at index {index}")
        targets[0]["webhooks"][index] = op["value"]
