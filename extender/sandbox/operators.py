"""The real operators a sandbox can run: the JobSet controller, LeaderWorkerSet, KubeRay, the
MPI operator, Kubeflow Trainer and Kueue.

Each is the unmodified upstream command of a pinned release (``build.sh`` builds it and copies
the release's CRDs, webhook configurations, webhook patches and cluster objects such as
Trainer's ``torch-distributed`` runtime beside the binary). The webhooks are served on
loopback: the sandbox makes one CA and one serving certificate for 127.0.0.1 with openssl,
points every webhook at ``https://127.0.0.1:PORT`` with that CA, and applies the patches the
release's kustomization applies (they narrow the pod webhooks to the operator's own pods). The
CRDs the sandbox installs for an operator carry :data:`OPERATOR_LABEL`, which is how
:mod:`submit` knows no stand-in must run for that kind. Objects of an operator's kinds that
the sandbox itself ships (Kueue's queues, ``manifests/sandbox/``) are created with the
release's.
"""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from extender.files.shipped import manifests_dir
from extender.files.yamlsafe import load_all
from extender.sandbox import mountns
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
    sandbox_objects: tuple[str, ...] = ()
    """Files of ``manifests/sandbox/`` with objects of its kinds the sandbox creates after
    :attr:`objects` (Kueue's ResourceFlavor, ClusterQueue and LocalQueue)."""
    settings: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """Keys of its Configuration besides those every operator gets (Kueue's integrations)."""
    webhook_groups: tuple[str, ...] = ()
    """The API groups whose webhooks are installed, those of the kinds it runs for here;
    empty: every webhook of the release."""
    fixed_cert_dir: str | None = None
    """A directory under ``/etc`` it reads a certificate from at start, with no setting to
    move it: it runs in a mount namespace of its own where that path shows the sandbox's
    certificates (:mod:`.mountns`)."""

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
#: Kueue's controller manager: quota and admission for workloads labelled
#: ``kueue.x-k8s.io/queue-name`` (docs/kueue.md), configured as a platform team beside a gang
#: scheduler would: the Job and JobSet integrations only, workloads without a queue left
#: alone, no waitForPodsReady (its key absent), no visibility API server (it would listen on
#: :8082 of every interface and needs an APIService). With its certificate rotation off,
#: v0.17.0 reads a metrics certificate from /etc/kueue/metrics/certs even with no metrics
#: server, or exits. Only the webhooks of its own kinds, Jobs and JobSets are installed: the
#: release's others (pods, Deployments, StatefulSets, other operators' kinds) would call
#: handlers of integrations that are off.
KUEUE = Operator(
    name="kueue", release="Kueue v0.17.0",
    crd_files=tuple(f"kueue-crd-{plural}.yaml" for plural in (
        "admissionchecks", "clusterqueues", "cohorts", "localqueues", "multikueueclusters",
        "multikueueconfigs", "provisioningrequestconfigs", "resourceflavors", "topologies",
        "workloadpriorityclasses", "workloads")),
    webhooks_file="kueue-webhooks.yaml", config_api="config.kueue.x-k8s.io/v1beta2",
    sandbox_objects=("kueue/queues.yaml",),
    settings={"manageJobsWithoutQueueName": False,
              "integrations": {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset"]},
              "featureGates": {"VisibilityOnDemand": False}},
    webhook_groups=("kueue.x-k8s.io", "batch", "jobset.x-k8s.io"),
    fixed_cert_dir="kueue/metrics/certs")
OPERATORS = (JOBSET, LWS, KUBERAY, MPI_OPERATOR, TRAINER, KUEUE)


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
    clash = config.keys() & op.settings.keys()
    if clash:
        raise ValueError(f"{op.release}: settings {sorted(clash)} are the sandbox's own")
    config.update(op.settings)
    path = directory / f"{op.name}-config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def environment(op: Operator, directory: Path, *, cert_dir: Path) -> dict[str, str]:
    """What its process needs in its environment: for an operator whose Configuration names
    no certificate directory, a ``TMPDIR`` whose ``k8s-webhook-server/serving-certs`` is the
    sandbox's (controller-runtime's default place). For one with a :attr:`fixed_cert_dir`, it
    also makes the overlay that shows the sandbox's certificates there."""
    if op.fixed_cert_dir is not None:
        mountns.prepare(directory, op.name, at=op.fixed_cert_dir, target=cert_dir)
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
    """Its command line; with a :attr:`fixed_cert_dir`, in its mount namespace, whose overlay
    :func:`environment` made beside its Configuration (in the sandbox's directory)."""
    given = [f"--config={config}"] if config is not None else []
    command = [str(bin_dir / op.name), *given, f"{op.kubeconfig_flag}={kubeconfig}",
               *(flag.format(health=health_port) for flag in op.flags)]
    if op.fixed_cert_dir is None:
        return command
    if config is None:
        raise ValueError(f"{op.release}: a fixed certificate directory needs a Configuration")
    return mountns.wrapped(command, config.parent, op.name)


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
    one of its CRDs defines (Trainer's ``torch-distributed`` ClusterTrainingRuntime), then of
    each object of its :attr:`sandbox_objects` (namespaced ones in the namespace they name)."""
    kinds = {crd["spec"]["names"]["kind"]: crd for crd in crds(op, bin_dir)}
    files = [(bin_dir / name, True) for name in op.objects] + [
        (manifests_dir() / "sandbox" / name, False) for name in op.sandbox_objects]
    made = []
    for path, cluster_only in files:
        for doc in _docs(path):
            crd = kinds.get(str(doc.get("kind")))
            if crd is None or (cluster_only and crd["spec"].get("scope") != "Cluster"):
                raise SandboxError(f"{path}: {doc.get('kind')} is no "
                                   f"{'cluster-scoped ' if cluster_only else ''}kind of "
                                   f"{op.release}")
            where = f"/namespaces/{doc['metadata'].get('namespace', 'default')}" \
                if crd["spec"].get("scope") == "Namespaced" else ""
            made.append((f"/apis/{doc['apiVersion']}{where}/{crd['spec']['names']['plural']}",
                          doc))
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
        if op.webhook_groups:
            config["webhooks"] = [hook for hook in config.get("webhooks", [])
                                  if _groups(hook) <= set(op.webhook_groups)]
        for hook in config.get("webhooks", []):
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}",
                                    "caBundle": bundle}
    return configs


def _groups(hook: dict[str, Any]) -> set[str]:
    """The API groups a webhook's rules name (``""`` for the core group)."""
    return {str(g) for rule in hook.get("rules", []) for g in rule.get("apiGroups", [])}


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
