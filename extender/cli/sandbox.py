"""``muster sandbox up|down|status``: a local real control plane for trying Muster."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from extender.cli.errors import EXIT_NO, EXIT_OK, CliError
from extender.cli.options import duration
from extender.kube.client import KubeError
from extender.sandbox.binaries import BinariesMissing
from extender.sandbox.config import GateBy, Ports, SchedulerMode
from extender.sandbox.dra import DEFAULT_DRA_NODES, GpuModel
from extender.sandbox.sandbox import Sandbox, SandboxError, SandboxInfo, SandboxSpec, default_dir


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "sandbox", help="a local real control plane (etcd, kube-apiserver, kube-scheduler, "
                        "kube-controller-manager, KWOK, the JobSet, LWS, KubeRay, MPI and "
                        "Kubeflow Trainer operators, Kueue, Muster)",
        description="Start, stop or inspect a local control plane on loopback with fake GPU "
                    "nodes that KWOK runs pods on, and the real JobSet, LeaderWorkerSet, "
                    "KubeRay, MPI and Kubeflow Trainer operators and Kueue. Binaries are built "
                    "from pinned Go modules on first use and cached under ~/.cache/muster.")
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = sub.add_parser("up", help="start the sandbox")
    up.add_argument("--nodes", type=int, default=None,
                    help="fake nodes with nvidia.com/gpu in their allocatable (default 4; "
                         "none with --gpu-model dra or dra-extended)")
    up.add_argument("--gpu-model", choices=[m.value for m in GpuModel],
                    default=GpuModel.DEVICE_PLUGIN.value,
                    help="how the fake nodes offer GPUs: device-plugin (nvidia.com/gpu in "
                         "each node's allocatable; the default), dra (only ResourceSlices, as "
                         "NVIDIA's GPU DRA driver publishes them; pods ask with "
                         "ResourceClaims), dra-extended (as dra, and the DeviceClass "
                         "gpu.nvidia.com also serves nvidia.com/gpu requests), or mixed "
                         "(--nodes device-plugin nodes beside --dra-nodes DRA nodes, "
                         "nvidia.com/gpu served on both)")
    up.add_argument("--dra-nodes", type=int, default=None, metavar="N",
                    help=f"fake nodes whose GPUs only DRA publishes (default {DEFAULT_DRA_NODES} "
                         "with a DRA --gpu-model)")
    up.add_argument("--dra-partitions", action="store_true",
                    help="publish each DRA GPU partitionable (NVIDIA's DynamicMIG): the full "
                         "GPU and MIG placements (DeviceClass mig.nvidia.com) sharing one "
                         "counter set")
    up.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default 8)")
    up.add_argument("--cpu-per-node", type=int, default=224,
                    help="allocatable CPUs per node (default 224, a DGX H100)")
    up.add_argument("--memory-gi-per-node", type=int, default=2048,
                    help="allocatable memory per node in GiB (default 2048)")
    up.add_argument("--nodes-per-rack", type=int, default=4,
                    help="nodes sharing one muster.dev/rack label (default 4)")
    up.add_argument("--scheduler", choices=[m.value for m in SchedulerMode], default="muster",
                    help="muster (extender), default (no gangs), or gang (upstream "
                         "GangScheduling plugin)")
    up.add_argument("--bind-timeout", type=duration, default=20.0, metavar="DURATION",
                    help="the extender's bind timeout: 20s, 1m, or seconds (default 20s)")
    for port in Ports.__dataclass_fields__:
        up.add_argument(f"--{port.replace('_', '-')}-port", type=int, default=0, metavar="PORT",
                        help="loopback port (default: any free port)")
    up.add_argument("--no-controller-manager", action="store_true",
                    help="leave kube-controller-manager out: nothing creates the pods of Jobs, "
                         "StatefulSets, Deployments or ReplicaSets")
    # The real operators run by default; --no-NAME leaves one out (a quicker start: their
    # CRDs are large, most of the API server's work at up).
    real = {"jobset": "the real JobSet controller v0.10.1 with its CRD and webhooks: JobSets "
                      "applied with kubectl get their Jobs",
            "lws": "the real LeaderWorkerSet controller v0.7.0 with its CRD and webhooks: "
                   "LeaderWorkerSets applied with kubectl get their StatefulSets and pods",
            "kuberay": "the real KubeRay operator v1.5.0 with its CRDs: RayClusters, RayJobs "
                       "and RayServices applied with kubectl get their pods",
            "mpi-operator": "the real MPI operator v0.7.0 with its CRD: MPIJobs (v2beta1) "
                            "applied with kubectl get their workers and launcher (it needs "
                            "port 8080 free)",
            "trainer": "Kubeflow Trainer v2.1.0 with its CRDs, webhooks and the "
                       "torch-distributed ClusterTrainingRuntime: TrainJobs applied with "
                       "kubectl get their JobSets (only with --jobset)",
            "kueue": "Kueue v0.17.0 with its CRDs, webhooks and a ClusterQueue 'gpus' (the "
                     "default sandbox's 32 GPUs) with a LocalQueue 'gpus' in namespace "
                     "default: Jobs and JobSets labelled kueue.x-k8s.io/queue-name wait "
                     "suspended until it admits them (docs/kueue.md)"}
    for name, what in real.items():
        # Without its operator a workload kind is stored but gets no pods; Kueue's queues and
        # Workloads are no workload kind: without Kueue they are not served at all.
        gone = "its kinds are then not served" if name == "kueue" else \
            "its kind is then stored but gets no pods"
        up.add_argument(f"--{name}", action=argparse.BooleanOptionalAction, default=True,
                        help=f"run {what} (default: on; --no-{name} leaves it out, and {gone})")
    up.add_argument("--gating", action=argparse.BooleanOptionalAction, default=True,
                    help="gate new gang pods until their gang is planned, by --gate-by "
                         "(default: on; --no-gating leaves pods ungated, decided by filter "
                         "and bind alone)")
    up.add_argument("--gate-by", choices=[g.value for g in GateBy], default=GateBy.POLICY.value,
                    help="what gates new pods: policy (the API server's "
                         "MutatingAdmissionPolicy of manifests/gate-policy/, no call to "
                         "Muster; the default) or webhook (Muster's admission webhook, served "
                         "on loopback)")
    up.add_argument("--no-kwok", action="store_true",
                    help="leave KWOK out: bound pods stay Pending, never finish, and deleted "
                         "bound pods stay Terminating unless deleted with --grace-period=0")
    up.add_argument("--descriptors", action="append", default=[], metavar="DIR",
                    help="extra descriptor files for the extender; repeatable")
    up.add_argument("--image", metavar="IMAGE",
                    help="run Muster from this image (podman run --network host, read-only "
                         "root; build one with make image) instead of this installation")
    helps = {"down": "stop every process the sandbox started", "status": "show what runs"}
    for action in ("up", "down", "status"):
        target = up if action == "up" else sub.add_parser(action, help=helps[action])
        target.add_argument("--dir", default=None,
                            help=f"state directory (default {default_dir()})")
    parser.set_defaults(handler=run)


def _spec(args: argparse.Namespace) -> SandboxSpec:
    base = SandboxSpec() if args.dir is None else SandboxSpec(directory=Path(args.dir))
    if args.action != "up":
        return base
    model = GpuModel(args.gpu_model)
    if args.nodes is not None and not model.has_device_plugin_nodes:
        raise CliError(f"--gpu-model {model.value} has no device-plugin nodes for --nodes to "
                       "count; give --dra-nodes")
    if not model.has_dra_nodes and (args.dra_nodes is not None or args.dra_partitions):
        raise CliError("--dra-nodes and --dra-partitions need --gpu-model dra, dra-extended "
                       "or mixed")
    nodes = 4 if args.nodes is None else args.nodes
    spec = SandboxSpec(nodes=nodes, gpu_model=model, dra_nodes=args.dra_nodes)
    if min(nodes, args.dra_nodes or 0, args.gpus_per_node) < 0 or sum(spec.node_counts()) < 1:
        raise CliError("--nodes, --dra-nodes and --gpus-per-node must be at least 0, with at "
                       "least one node in all")
    for port in Ports.__dataclass_fields__:
        if not 0 <= getattr(args, f"{port}_port") <= 65535:
            raise CliError(f"--{port.replace('_', '-')}-port must be 0..65535")
    return SandboxSpec(
        directory=base.directory, nodes=nodes, gpus_per_node=args.gpus_per_node,
        cpu_per_node=args.cpu_per_node, memory_gi_per_node=args.memory_gi_per_node,
        nodes_per_rack=args.nodes_per_rack, mode=SchedulerMode(args.scheduler),
        ports=Ports(**{p: getattr(args, f"{p}_port") for p in Ports.__dataclass_fields__}),
        bind_timeout=args.bind_timeout, extra_descriptor_dirs=tuple(args.descriptors),
        controller_manager=not args.no_controller_manager, kwok=not args.no_kwok,
        jobset=args.jobset, lws=args.lws, kuberay=args.kuberay,
        mpi_operator=args.mpi_operator, trainer=args.trainer and args.jobset,
        kueue=args.kueue, image=args.image,
        gating=args.gating, gate_by=GateBy(args.gate_by), gpu_model=model,
        dra_nodes=args.dra_nodes, dra_partitions=args.dra_partitions,
    )


def print_info(info: SandboxInfo, *, default: bool) -> None:
    print(f"sandbox: {info.mode} mode, API server {info.server}")
    for name, pid in info.processes.items():
        print(f"  {name:<23} pid {pid}")
    if info.muster_url:
        print(f"  muster extender {info.muster_url} (/metrics, /inspect/gangs)")
    print("use it with:")
    print(f"  export KUBECONFIG={info.kubeconfig}")
    print(f"  {info.kubectl} get nodes")
    print("  muster get jobsets -A")
    where = "" if default else f" --dir {shlex.quote(info.directory)}"
    print(f"logs: {info.directory}/*.log; stop with: muster sandbox down{where}")


def run(args: argparse.Namespace) -> int:
    sandbox = Sandbox(_spec(args), say=lambda m: print(f"[sandbox] {m}", file=sys.stderr))
    try:
        if args.action == "up":
            print_info(sandbox.up(), default=args.dir is None)
            return EXIT_OK
        if args.action == "down":
            stopped = sandbox.down()
            print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
            return EXIT_OK
        info = sandbox.info()
        if info is None or not info.processes:
            print("no sandbox is running")
            return EXIT_NO
        print_info(info, default=args.dir is None)
        return EXIT_OK
    except (SandboxError, BinariesMissing, KubeError) as err:
        raise CliError(str(err)) from err
