"""``muster sandbox up|down|status``: a real control plane on loopback, with fake GPU nodes."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from extender.core.workloads.admission import GATE, may_join_a_gang
from extender.files.catalog import load_catalog, packaged_catalog, packaged_catalog_dir
from extender.files.shipped import manifests_dir
from extender.files.yamlsafe import load_all
from extender.kube.client import Connection, KubeError, connect
from extender.sandbox import dra, image, operators
from extender.sandbox.binaries import control_plane_bin
from extender.sandbox.components import controller_manager_argv, kwok_argv
from extender.sandbox.config import (
    SCHEDULER_NAMES,
    TOKEN,
    GateBy,
    Ports,
    SchedulerMode,
    scheduler_config,
    write_kubeconfig,
    write_scheduler_config,
    write_tokens,
)
from extender.sandbox.crds import permissive_crds
from extender.sandbox.dra import GpuModel
from extender.sandbox.local import SandboxError, clear_own, free_ports, http_ok, port_free, wait_for
from extender.sandbox.nodes import fake_node
from extender.sandbox.processes import ProcessTable, alive

Say = Callable[[str], None]

CRD_FILE = manifests_dir() / "crd-workloaddescriptor.yaml"
GANG_CRD_FILE = manifests_dir() / "crd-gang.yaml"


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
        wanted = {"jobset": self.jobset, "lws": self.lws, "kuberay": self.kuberay}
        return tuple(op for op in operators.OPERATORS if wanted[op.name])

    def node_counts(self) -> tuple[int, int]:
        """``(device-plugin nodes, DRA nodes)``."""
        model = self.gpu_model
        plugin = self.nodes if model.has_device_plugin_nodes else 0
        if not model.has_dra_nodes:
            return plugin, 0
        return plugin, dra.DEFAULT_DRA_NODES if self.dra_nodes is None else self.dra_nodes


@dataclass(frozen=True)
class SandboxInfo:
    directory: str
    kubeconfig: str
    kubectl: str
    server: str
    mode: str
    muster_url: str | None
    processes: dict[str, int]
    ports: dict[str, int] = field(default_factory=dict)


class Sandbox:
    def __init__(self, spec: SandboxSpec, *, say: Say = print) -> None:
        self.spec = spec
        self.dir = spec.directory
        self.say = say
        self.table = ProcessTable(self.dir)
        self._ports: Ports | None = None

    @property
    def ports(self) -> Ports:
        """The ports in use: chosen ones as given, the others as picked at ``up``."""
        if self._ports is None:
            info = self.info()
            self._ports = Ports(**info.ports) if info is not None and info.ports \
                else self.spec.ports
        return self._ports

    # -- queries ---------------------------------------------------------------------------
    def running(self) -> dict[str, int]:
        if not self.dir.exists():
            return {}
        return {p.name: p.pid for p in self.table.load() if alive(p.pid)}

    def info(self) -> SandboxInfo | None:
        path = self.dir / "sandbox.json"
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        data["processes"] = self.running()
        return SandboxInfo(**data)

    def connection(self) -> Connection:
        return connect(str(self.dir / "kubeconfig"))

    # -- up ----------------------------------------------------------------------------------
    def up(self) -> SandboxInfo:
        if self.running():
            raise SandboxError(f"a sandbox is already running from {self.dir}; "
                               "run 'muster sandbox down' first")
        spec = self.spec
        busy = [p for p in spec.ports.chosen().values() if not port_free(p)]
        if busy:
            raise SandboxError(f"ports in use on 127.0.0.1: {busy}; stop what holds them or "
                               "choose other ports (ports not given are picked free)")
        if spec.gpu_model is GpuModel.DEVICE_PLUGIN and (spec.dra_nodes or spec.dra_partitions):
            raise SandboxError("DRA nodes and partitions need a DRA GPU model "
                               "(--gpu-model dra, dra-extended or mixed)")
        ports = self._ports = spec.ports.resolved(free_ports)
        if shutil.which("openssl") is None:
            raise SandboxError("openssl is needed to make the service-account key; "
                               "install it (apt-get install openssl)")
        if spec.image is not None:
            image.check_image(spec.image)
        self.say("control plane: locating binaries (the first build takes several minutes)")
        bin_dir = control_plane_bin()
        wanted = [*(["kwok"] if spec.kwok else []),
                  *(["kube-controller-manager"] if spec.controller_manager else []),
                  *(name for op in spec.real_operators() for name in op.files())]
        missing = [name for name in wanted if not (bin_dir / name).is_file()]
        if missing:
            raise SandboxError(f"{bin_dir} lacks {', '.join(missing)}; rebuild with "
                               "bash tests/e2e/controlplane/build.sh, or leave them out "
                               "(--no-kwok, --no-controller-manager, --no-jobset, --no-lws, "
                               "--no-kuberay)")
        if self.dir.exists() and not self.dir.is_dir():
            raise SandboxError(f"{self.dir} is not a directory")
        clear_own(self.dir)  # a previous run's state, never anything else in the directory
        (self.dir / "pki").mkdir(parents=True)
        try:
            self._start_all(bin_dir)
        except BaseException:
            self.table.stop_all()
            raise
        info = SandboxInfo(
            directory=str(self.dir), kubeconfig=str(self.dir / "kubeconfig"),
            kubectl=str(bin_dir / "kubectl"), server=f"https://127.0.0.1:{ports.apiserver}",
            mode=spec.mode.value,
            muster_url=(f"http://127.0.0.1:{ports.muster}"
                        if spec.mode is SchedulerMode.MUSTER else None),
            processes=self.running(), ports=dict(ports.__dict__),
        )
        data = asdict(info)
        data.pop("processes")
        (self.dir / "sandbox.json").write_text(json.dumps(data, indent=2))
        return info

    def _start_all(self, bin_dir: Path) -> None:
        spec, ports, d = self.spec, self.ports, self.dir
        gang = spec.mode is SchedulerMode.GANG
        self.say(f"etcd: starting on 127.0.0.1:{ports.etcd}")
        etcd = self.table.start("etcd", [
            str(bin_dir / "etcd"), f"--data-dir={d / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{ports.etcd}",
            f"--listen-peer-urls=http://127.0.0.1:{ports.etcd_peer}",
        ])
        wait_for("etcd", lambda: http_ok(f"http://127.0.0.1:{ports.etcd}/health"),
              timeout=30, log=Path(etcd.log))

        subprocess.run(["openssl", "genrsa", "-out", str(d / "sa.key"), "2048"],
                       check=True, capture_output=True)
        tokens = write_tokens(d)
        argv = [
            str(bin_dir / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{ports.etcd}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={ports.apiserver}", f"--cert-dir={d / 'pki'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={d / 'sa.key'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24", f"--token-auth-file={tokens}",
            "--authorization-mode=RBAC",
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            "--endpoint-reconciler-type=none", "--allow-privileged=true",
        ]
        if gang:
            argv += ["--runtime-config=scheduling.k8s.io/v1beta1=true",
                     "--feature-gates=GenericWorkload=true"]
        self.say(f"kube-apiserver: starting on https://127.0.0.1:{ports.apiserver}")
        api = self.table.start("kube-apiserver", argv)
        ca = d / "pki" / "apiserver.crt"
        wait_for("kube-apiserver",
              lambda: http_ok(f"https://127.0.0.1:{ports.apiserver}/readyz", token=TOKEN,
                               cafile=ca), timeout=120, log=Path(api.log))
        kubeconfig = write_kubeconfig(d, port=ports.apiserver)
        conn = connect(str(kubeconfig))
        if gang:
            _require_workload_api(conn)

        if spec.install_descriptors:
            self._install_descriptors(conn, bin_dir)
        self._create_nodes(conn)
        if spec.kwok:
            self._start_kwok(bin_dir, kubeconfig, conn)
        if spec.controller_manager:
            self.say("kube-controller-manager: starting (job, statefulset, replicaset, "
                     "deployment, garbage collector, namespace, serviceaccount, "
                     "resource claims)")
            kcm = self.table.start("kube-controller-manager", controller_manager_argv(
                bin_dir, kubeconfig=kubeconfig, port=ports.controller_manager))
            wait_for("kube-controller-manager",
                  lambda: http_ok(f"https://127.0.0.1:{ports.controller_manager}/healthz"),
                  timeout=60, log=Path(kcm.log))
        if spec.real_operators():
            certs = operators.make_certs(d)  # every operator's webhooks share one CA
            for op in spec.real_operators():
                self._start_operator(op, bin_dir, kubeconfig, conn, certs)

        if spec.mode is SchedulerMode.MUSTER:
            self.start_muster()

        sched = write_scheduler_config(d, scheduler_config(
            kubeconfig=kubeconfig, mode=spec.mode, muster_port=ports.muster,
            bind_timeout=spec.bind_timeout))
        argv = [str(bin_dir / "kube-scheduler"), f"--config={sched}",
                "--bind-address=127.0.0.1", f"--secure-port={ports.scheduler}", "-v=2"]
        if gang:
            argv.append("--feature-gates=GenericWorkload=true")
        self.say(f"kube-scheduler: starting ({spec.mode.value} mode)")
        scheduler = self.table.start("kube-scheduler", argv)
        wait_for("kube-scheduler",
              lambda: http_ok(f"https://127.0.0.1:{ports.scheduler}/readyz"),
              timeout=60, log=Path(scheduler.log))

    def _start_kwok(self, bin_dir: Path, kubeconfig: Path, conn: Connection) -> None:
        port = self.ports.kwok
        self.say("kwok: starting; it plays the kubelet of every fake node")
        # KWOK also loads ~/.kwok/kwok.yaml when it exists (a kwokctl user's Stages): HOME is
        # the sandbox's directory, so it plays only the sandbox's own.
        kwok = self.table.start("kwok", kwok_argv(bin_dir, kubeconfig=kubeconfig, port=port),
                                env={"HOME": str(self.dir.resolve())})
        wait_for("kwok", lambda: http_ok(f"http://127.0.0.1:{port}/healthz"), timeout=60,
              log=Path(kwok.log))

        def all_ready() -> bool:
            nodes = conn.request("GET", "/api/v1/nodes").get("items", [])
            return len(nodes) >= sum(self.spec.node_counts()) and all(
                any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in n.get("status", {}).get("conditions", []) or [])
                for n in nodes)

        wait_for("the fake nodes (made Ready by kwok)", all_ready, timeout=60, log=Path(kwok.log))

    def _start_operator(self, op: operators.Operator, bin_dir: Path, kubeconfig: Path,
                        conn: Connection, certs: Path) -> None:
        webhook, health = self.ports.of(op.name)
        hooks = f" (webhooks on https://127.0.0.1:{webhook})" if op.webhooks_file else ""
        self.say(f"{op.name}: starting the real {op.release} controller{hooks}")
        config = None if op.config_api is None else operators.config_file(
            op, self.dir, webhook_port=webhook, health_port=health, cert_dir=certs)
        proc = self.table.start(op.name, operators.argv(op, bin_dir, kubeconfig=kubeconfig,
                                                        config=config, health_port=health))
        wait_for(op.name, lambda: http_ok(f"http://127.0.0.1:{health}/readyz"),
                 timeout=60, log=Path(proc.log))
        for made in operators.webhook_configurations(op, bin_dir, port=webhook,
                                                     ca=(certs / "ca.crt").read_bytes()):
            kind = made["kind"].lower() + "s"
            conn.request("POST", f"/apis/admissionregistration.k8s.io/v1/{kind}", body=made)

    def start_muster(self) -> None:
        """Start the extender (again, after :meth:`kill` of ``muster``) and wait until ready."""
        spec, port = self.spec, self.ports.muster
        self.say(f"muster: starting the extender on http://127.0.0.1:{port}"
                 + (f" from image {spec.image}" if spec.image else ""))
        serve = ["--bind-timeout", str(spec.bind_timeout), "--plan-ttl", str(spec.plan_ttl),
                 # The sandbox's kube-scheduler calls Muster from both of its profiles.
                 "--scheduler-names", ",".join(SCHEDULER_NAMES)]
        gating = spec.gating and (spec.gate_by is GateBy.POLICY or not spec.image)
        if gating and spec.gate_by is GateBy.WEBHOOK:
            certs = operators.make_certs(self.dir)
            serve += ["--webhook-host", "127.0.0.1",
                      "--webhook-port", str(self.ports.muster_webhook),
                      "--webhook-cert", str(certs / "tls.crt"),
                      "--webhook-key", str(certs / "tls.key")]
        if spec.image:
            argv = image.muster_argv(spec.image, directory=self.dir, port=port,
                                     serve_args=serve, descriptor_dirs=spec.extra_descriptor_dirs)
        else:
            argv = [sys.executable, "-m", "extender.cli.main", "serve",
                    "--kubeconfig", str(self.dir / "kubeconfig"), "--host", "127.0.0.1",
                    "--port", str(port), *serve,
                    *[a for extra in spec.extra_descriptor_dirs for a in ("--descriptors", extra)]]
        muster = self.table.start("muster", argv)
        wait_for("muster", lambda: http_ok(f"http://127.0.0.1:{port}/readyz"),
              timeout=60, log=Path(muster.log))
        if gating and spec.gate_by is GateBy.POLICY:
            self._install_gate_policy()
        elif gating:
            self._install_gate_webhook()

    def _install_gate_policy(self) -> None:
        """manifests/gate-policy/ for the sandbox's scheduler names and catalog (created
        once; a restarted Muster reuses it)."""
        conn = self.connection()
        base = "/apis/admissionregistration.k8s.io/v1"
        plural = {"MutatingAdmissionPolicy": "mutatingadmissionpolicies",
                  "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings"}
        for doc in gate_policy(descriptor_dirs=self.spec.extra_descriptor_dirs):
            path = f"{base}/{plural[doc['kind']]}"
            try:
                conn.request("GET", f"{path}/{doc['metadata']['name']}")
            except KubeError:
                if doc["kind"] == "MutatingAdmissionPolicy":
                    self.say("muster: gating new gang pods (the API server's "
                             f"MutatingAdmissionPolicy {doc['metadata']['name']})")
                conn.request("POST", path, body=doc)
        # The API server applies a policy once its own informer has it: until a pod it would
        # gate is gated (a dry run: admitted, never stored), pods could be created ungated.
        probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {
                     "generateName": "muster-gate-probe-", "namespace": "default",
                     "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                                          "name": "muster-gate-probe",
                                          "uid": "00000000-0000-0000-0000-000000000000"}]},
                 "spec": {"schedulerName": SCHEDULER_NAMES[-1],
                          "containers": [{"name": "probe", "image": "probe"}]}}

        def gating() -> bool:
            made = conn.request("POST", "/api/v1/namespaces/default/pods?dryRun=All",
                                body=probe)
            return any(g.get("name") == GATE
                       for g in made.get("spec", {}).get("schedulingGates") or [])

        wait_for("the gate policy", gating, timeout=30, log=None)

    def _install_gate_webhook(self) -> None:
        """manifests/webhook.yaml, pointed at Muster's webhook on loopback with the sandbox's
        CA, for the sandbox's scheduler names (created once; a restarted Muster reuses it)."""
        conn = self.connection()
        path = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
        hook = gate_webhook(port=self.ports.muster_webhook,
                            ca=(self.dir / operators.CERT_DIR / "ca.crt").read_bytes(),
                            descriptor_dirs=self.spec.extra_descriptor_dirs)
        try:
            conn.request("GET", f"{path}/{hook['metadata']['name']}")
        except KubeError:
            self.say(f"muster: gating new gang pods (webhook on "
                     f"https://127.0.0.1:{self.ports.muster_webhook})")
            conn.request("POST", path, body=hook)

    def kill(self, name: str) -> None:
        """SIGKILL one component (a crash, for tests); it stays down until started again."""
        self.table.kill(name)
        if name == "muster" and (self.dir / image.STAGED).is_dir():  # conmon outlives podman
            image.remove_container(self.ports.muster)

    def outage(self, name: str) -> Callable[[], None]:
        """SIGKILL one component and return what starts it again, as it was (an API server
        outage, for tests); the returned call waits until it answers again."""
        argv = self.table.killed_argv(name)

        def back() -> None:
            proc = self.table.start(name, argv)
            if name == "kube-apiserver":
                port, ca = self.ports.apiserver, self.dir / "pki" / "apiserver.crt"
                wait_for(name, lambda: http_ok(f"https://127.0.0.1:{port}/readyz", token=TOKEN,
                                             cafile=ca), timeout=120, log=Path(proc.log))

        return back

    def _create_nodes(self, conn: Connection) -> None:
        spec = self.spec
        plugin, dra_count = spec.node_counts()
        kinds = ([f"{plugin} with nvidia.com/gpu"] if plugin else []) + \
            ([f"{dra_count} whose GPUs only DRA publishes"] if dra_count else [])
        self.say(f"nodes: creating fake nodes of {spec.gpus_per_node} GPUs: "
                 + " and ".join(kinds))
        nodes = [fake_node(i, gpus=spec.gpus_per_node, cpu=spec.cpu_per_node,
                           memory_gi=spec.memory_gi_per_node,
                           nodes_per_rack=spec.nodes_per_rack, ready=not spec.kwok)
                 for i in range(plugin)]
        # Racks count on through the DRA nodes: each rack is one NVLink clique.
        dra_nodes = [dra.dra_node(i, slot=plugin + i, cpu=spec.cpu_per_node,
                                  memory_gi=spec.memory_gi_per_node,
                                  nodes_per_rack=spec.nodes_per_rack, ready=not spec.kwok)
                     for i in range(dra_count)]
        for node in nodes + dra_nodes:
            created = conn.request("POST", "/api/v1/nodes", body=node)
            if not created.get("status", {}).get("allocatable"):
                # Some releases drop status on create; the status subresource takes it.
                conn.request("PATCH", f"/api/v1/nodes/{node['metadata']['name']}/status",
                             body={"status": node["status"]})
        if dra_nodes:
            self._publish_dra(conn, dra_nodes)

    def _publish_dra(self, conn: Connection, nodes: list[dict[str, Any]]) -> None:
        """What NVIDIA's GPU DRA driver would publish; no driver runs here (its kubelet
        plugins would need a kubelet): the DeviceClasses its chart ships and each node's
        ResourceSlices, posted once."""
        spec = self.spec
        self.say(f"dra: publishing the DeviceClasses and the ResourceSlices of {len(nodes)} "
                 f"nodes ({spec.gpu_model.value}"
                 + (", partitionable GPUs" if spec.dra_partitions else "") + ")")
        objects = dra.device_classes(spec.gpu_model) + [
            made for node in nodes for made in dra.node_slices(
                node, gpus=spec.gpus_per_node, partitions=spec.dra_partitions)]
        plural = {"DeviceClass": "deviceclasses", "ResourceSlice": "resourceslices"}
        for obj in objects:
            conn.request("POST", f"/apis/{dra.API_VERSION}/{plural[obj['kind']]}", body=obj)

    def _install_descriptors(self, conn: Connection, bin_dir: Path) -> None:
        for crd_file in (CRD_FILE, GANG_CRD_FILE):
            if not crd_file.exists():
                raise SandboxError(f"Muster's CRD is missing: {crd_file}")
        self.say("descriptors: installing the WorkloadDescriptor and Gang CRDs and the catalog")
        # Plain CRDs let the API server store each kind no real operator runs for.
        crds = _yaml_docs([CRD_FILE, GANG_CRD_FILE]) + permissive_crds(
            packaged_catalog().descriptors)
        for op in self.spec.real_operators():  # the release's own CRDs, validation and all
            real = operators.crds(op, bin_dir)
            groups = {c["spec"]["group"] for c in real}
            crds = [c for c in crds if c["spec"].get("group") not in groups] + real
        for crd in crds:
            conn.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                         body=crd)
        for crd in crds:
            name = crd["metadata"]["name"]

            def established(crd_name: str = name) -> bool:
                status = conn.request(
                    "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd_name}"
                ).get("status", {})
                return any(c.get("type") == "Established" and c.get("status") == "True"
                           for c in status.get("conditions") or [])

            wait_for(f"CRD {name}", established, timeout=30, log=None)
        for doc in _yaml_docs(sorted(packaged_catalog_dir().glob("*.yaml"))):
            conn.request("POST", f"/apis/{doc['apiVersion']}/workloaddescriptors", body=doc)

    # -- down --------------------------------------------------------------------------------
    def down(self) -> list[str]:
        stopped = [p.name for p in self.table.stop_all()] if self.dir.exists() else []
        if (self.dir / image.STAGED).is_dir():  # Muster ran from an image: no container left
            image.remove_container(self.ports.muster)
        left = self.running()
        if left:
            raise SandboxError(f"processes still running after down: {left}")
        return stopped


def gate_webhook(*, port: int, ca: bytes, descriptor_dirs: Iterable[str] = ()) -> dict[str, Any]:
    """Muster's MutatingWebhookConfiguration as installed (manifests/webhook.yaml), served
    at ``https://127.0.0.1:port`` with ``ca``, matching the sandbox's scheduler names and the
    pods that may join a gang of the catalog Muster serves (the packaged one and
    ``descriptor_dirs``)."""
    [hook] = _yaml_docs([manifests_dir() / "webhook.yaml"])
    may_join = may_join_a_gang(load_catalog([packaged_catalog_dir(), *descriptor_dirs]))
    for entry in hook["webhooks"]:
        path = entry["clientConfig"]["service"]["path"]
        entry["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}",
                                 "caBundle": base64.b64encode(ca).decode()}
        entry["matchConditions"] = [{"name": "muster-scheduler",
                                     "expression": _scheduler_condition()}]
        if may_join is not None:
            entry["matchConditions"].append({"name": "may-join-a-gang",
                                             "expression": may_join})
    return hook


def gate_policy(*, descriptor_dirs: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Muster's MutatingAdmissionPolicy and its binding as installed
    (manifests/gate-policy/), matching the sandbox's scheduler names and the pods that
    may join a gang of the catalog Muster serves (the packaged one and ``descriptor_dirs``)."""
    policy, binding = _yaml_docs([manifests_dir() / "gate-policy" / "gate-policy.yaml"])
    may_join = may_join_a_gang(load_catalog([packaged_catalog_dir(), *descriptor_dirs]))
    expressions = {"muster-scheduler": _scheduler_condition(), "may-join-a-gang": may_join}
    policy["spec"]["matchConditions"] = [
        {**c, "expression": expressions.get(c["name"], c["expression"])}
        for c in policy["spec"]["matchConditions"]
        if c["name"] not in expressions or expressions[c["name"]] is not None]
    return [policy, binding]


def _scheduler_condition() -> str:
    names = ", ".join(f"'{n}'" for n in SCHEDULER_NAMES)
    return f"object.spec.schedulerName in [{names}]"


def _require_workload_api(conn: Connection) -> None:
    """Gang mode gates nothing unless the API server serves the PodGroups pods join."""
    try:
        listing = conn.request("GET", "/apis/scheduling.k8s.io/v1beta1")
    except KubeError as err:
        raise SandboxError(f"gang mode: scheduling.k8s.io/v1beta1 is not served: {err}") from err
    served = {r.get("name") for r in listing.get("resources", [])}
    if not {"workloads", "podgroups"} <= served:
        raise SandboxError("gang mode: the API server serves no Workload/PodGroup "
                           f"(scheduling.k8s.io/v1beta1 has {sorted(served)})")


def _yaml_docs(paths: Iterable[Path]) -> list[dict[str, Any]]:
    docs = []
    for path in paths:
        for doc in load_all(path.read_text()):
            if isinstance(doc, dict):
                docs.append(doc)
    return docs


__all__ = ["KubeError", "Sandbox", "SandboxError", "SandboxInfo", "SandboxSpec"]
