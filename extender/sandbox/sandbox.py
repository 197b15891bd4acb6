"""``muster sandbox up|down|status``: a real control plane on loopback, with fake GPU nodes.

:class:`Sandbox` starts and stops the processes (etcd, kube-apiserver, KWOK,
kube-controller-manager, the real operators, Muster, kube-scheduler), writes the files they read
and its own state (``sandbox.json``), and kills components for tests. What it is to be is
:mod:`.spec`; what it creates through the API server once that answers, :mod:`.provision`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from extender.kube.client import Connection, KubeError, connect
from extender.sandbox import image, operators
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
from extender.sandbox.dra import GpuModel
from extender.sandbox.local import SandboxError, clear_own, free_ports, http_ok, port_free, wait_for
from extender.sandbox.processes import ProcessTable, alive
from extender.sandbox.provision import (
    CRD_FILE,
    Say,
    create_nodes,
    create_release_objects,
    install_descriptors,
    install_gate_policy,
    install_gate_webhook,
    require_workload_api,
)
from extender.sandbox.spec import SandboxSpec, default_dir


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
        for op in spec.real_operators():
            if op.fixed_health_port is not None and not port_free(op.fixed_health_port):
                raise SandboxError(
                    f"port {op.fixed_health_port} is in use: {op.release} serves its health "
                    f"check there, on every interface, and has no flag to move it; stop what "
                    f"holds it or leave it out (--no-{op.name})")
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
                               "--no-kuberay, --no-mpi-operator, --no-trainer, --no-kueue)")
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
            require_workload_api(conn)

        if spec.install_descriptors:
            install_descriptors(conn, spec, bin_dir, self.say)
        create_nodes(conn, spec, self.say)
        if spec.kwok:
            self._start_kwok(bin_dir, kubeconfig, conn)
        if spec.controller_manager:
            self.say("kube-controller-manager: starting (job, statefulset, replicaset, "
                     "deployment, garbage collector, namespace, serviceaccount, "
                     "resource claims)")
            kcm = self.table.start("kube-controller-manager", controller_manager_argv(
                bin_dir, kubeconfig=kubeconfig, port=ports.controller_manager,
                workload_api=gang))
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
        webhook, health = operators.loopback_ports(op, self.ports, free_ports)
        hooks = f" (webhooks on https://127.0.0.1:{webhook})" if op.webhooks_file else ""
        self.say(f"{op.name}: starting the real {op.release} controller{hooks}")
        config = None if op.config_api is None else operators.config_file(
            op, self.dir, webhook_port=webhook, health_port=health, cert_dir=certs)
        proc = self.table.start(op.name, operators.argv(op, bin_dir, kubeconfig=kubeconfig,
                                                        config=config, health_port=health),
                                env=operators.environment(op, self.dir, cert_dir=certs))
        wait_for(op.name, lambda: http_ok(f"http://127.0.0.1:{health}{op.health_path}"),
                 timeout=60, log=Path(proc.log))
        for made in operators.webhook_configurations(op, bin_dir, port=webhook,
                                                     ca=(certs / "ca.crt").read_bytes()):
            kind = made["kind"].lower() + "s"
            conn.request("POST", f"/apis/admissionregistration.k8s.io/v1/{kind}", body=made)
        create_release_objects(conn, op, bin_dir, self.say)

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
            install_gate_policy(self.connection(), descriptor_dirs=spec.extra_descriptor_dirs,
                                say=self.say)
        elif gating:
            install_gate_webhook(
                self.connection(), port=self.ports.muster_webhook,
                ca=(self.dir / operators.CERT_DIR / "ca.crt").read_bytes(),
                descriptor_dirs=spec.extra_descriptor_dirs, say=self.say)

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

    # -- down --------------------------------------------------------------------------------
    def down(self) -> list[str]:
        stopped = [p.name for p in self.table.stop_all()] if self.dir.exists() else []
        if (self.dir / image.STAGED).is_dir():  # Muster ran from an image: no container left
            image.remove_container(self.ports.muster)
        left = self.running()
        if left:
            raise SandboxError(f"processes still running after down: {left}")
        return stopped


# Defined by the sandbox's parts, imported from here by the command line and the tests.
__all__ = ["CRD_FILE", "KubeError", "Sandbox", "SandboxError", "SandboxInfo", "SandboxSpec",
           "default_dir"]
