"""What a sandbox is to be: its directory, fake nodes and their GPUs, scheduler mode, ports,
and which real operators, gate and DRA model it runs, as one frozen value.

It starts nothing and touches no file: :mod:`.sandbox` starts what it says and
:mod:`.provision` creates its objects.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from extender.sandbox import dra, operators
from extender.sandbox.config import GateBy, Ports, SchedulerMode
from extender.sandbox.dra import GpuModel


def default_dir() -> Path:
    base = os.environ.get("MUSTER_SANDBOX_DIR")
    if base:
        return Path(base)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "muster" / "sandbox"


@dataclass(frozen=True)
class SandboxSpec:
    directory: Path = field(default_factory=default_dir)
    nodes: int = 4
    """Fake nodes with ``nvidia.com/gpu`` in their allocatable (``gpu-node-<i>``); with
    :attr:`gpu_model` ``dra`` or ``dra-extended`` there are none and this is not read."""
    gpus_per_node: int = 8
    # A DGX H100's shape: real manifests ask for hundreds of CPUs and GiB per 8-GPU pod.
    cpu_per_node: int = 224
    memory_gi_per_node: int = 2048
    nodes_per_rack: int = 4
    mode: SchedulerMode = SchedulerMode.MUSTER
    ports: Ports = field(default_factory=Ports)
    bind_timeout: float = 20.0
    plan_ttl: float = 30.0
    install_descriptors: bool = True
    extra_descriptor_dirs: tuple[str, ...] = ()
    controller_manager: bool = True
    """Run kube-controller-manager: Jobs, StatefulSets, Deployments and ReplicaSets get pods."""
    kwok: bool = True
    """Run KWOK: nodes Ready with Leases, bound pods Running, runtimes end, deletions finish."""
    image: str | None = None
    """Run Muster from this image (podman, host network) instead of this Python's checkout."""
    # The real operators are off here and on in ``muster sandbox up``: the e2e suite, the
    # demo and the peer benchmark still order their workloads' pods through the stand-ins
    # (``submit``), and a stand-in never runs beside a real operator.
    jobset: bool = False
    """Run the real JobSet controller (its CRD and webhooks) instead of the JobSet stand-in's
    permissive CRD; JobSets are then applied alone and the controller makes their Jobs."""
    lws: bool = False
    """Run the real LeaderWorkerSet controller (its CRD and webhooks): it makes each group's
    StatefulSets, and recreates a group whose pod is deleted; no LWS stand-in then runs."""
    kuberay: bool = False
    """Run the real KubeRay operator (its RayCluster, RayJob and RayService CRDs): it makes a
    RayCluster's head and worker pods; no Ray stand-in then runs."""
    mpi_operator: bool = False
    """Run the real MPI operator (its MPIJob CRD): it makes an MPIJob's worker pods and its
    launcher Job (with ``launcherCreationPolicy: WaitForWorkersReady``, once they are Ready)."""
    trainer: bool = False
    """Run Kubeflow Trainer (its TrainJob and runtime CRDs and webhooks, and the
    ``torch-distributed`` ClusterTrainingRuntime): it makes a TrainJob's JobSet, which only
    :attr:`jobset` gives pods."""
    kueue: bool = False
    """Run Kueue (its CRDs and webhooks, and the queues of ``manifests/sandbox/kueue``): it
    holds Jobs and JobSets labelled ``kueue.x-k8s.io/queue-name`` suspended until their
    ClusterQueue's quota admits them (docs/kueue.md)."""

    gating: bool = False
    """Gate new gang pods until their gang is planned, by :attr:`gate_by`. Off here and on
    in ``muster sandbox up``, like the real operators."""
    gate_by: GateBy = GateBy.POLICY
    """``policy`` (the default: the sandbox's control plane is 1.37): install the
    MutatingAdmissionPolicy of manifests/gate-policy/, which the API server applies itself,
    with no call to Muster (the cheaper of the two in every measure of docs/benchmarks.md);
    ``webhook``: serve Muster's admission webhook on loopback (a certificate the sandbox
    makes) and install its MutatingWebhookConfiguration (not with :attr:`image`)."""

    gpu_model: GpuModel = GpuModel.DEVICE_PLUGIN
    """How the fake nodes offer their GPUs (extender/sandbox/dra.py): the device plugin's
    ``nvidia.com/gpu``, DRA's ResourceSlices, or both kinds of node side by side."""
    dra_nodes: int | None = None
    """Fake nodes whose ``gpus_per_node`` GPUs only ResourceSlices publish (``dra-node-<i>``);
    None: 3 with a DRA model; none with ``device-plugin``, where any other count is an error."""
    dra_partitions: bool = False
    """Publish each DRA GPU partitionable (NVIDIA's DynamicMIG): a counter set per GPU, which
    the full GPU and its MIG placements (``mig.nvidia.com``) consume."""

    def real_operators(self) -> tuple[operators.Operator, ...]:
        """The real operators this sandbox runs, in start order."""
        return tuple(op for op in operators.OPERATORS if getattr(self, op.option))

    def node_counts(self) -> tuple[int, int]:
        """``(device-plugin nodes, DRA nodes)``."""
        model = self.gpu_model
        plugin = self.nodes if model.has_device_plugin_nodes else 0
        if not model.has_dra_nodes:
            return plugin, 0
        return plugin, dra.DEFAULT_DRA_NODES if self.dra_nodes is None else self.dra_nodes
