"""``muster demo``: the story of Muster in one command, on a real control plane.

A JobSet of 1 leader and 2 workers at 4 GPUs each is three unrelated pods to kubectl; to Muster
it is one workload, one gang of 3, 12 GPUs, admitted and bound together. A second JobSet whose
GPUs add up but fit no set of nodes waits whole, with the reason. Every claim is checked against
the API server; the demo exits non-zero if the cluster does not behave as told.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from extender.cli.errors import EXIT_NO, EXIT_OK, CliError
from extender.files.catalog import packaged_catalog
from extender.kube.client import Connection, KubeError
from extender.sandbox.binaries import BinariesMissing
from extender.sandbox.config import Ports
from extender.sandbox.sandbox import Sandbox, SandboxError, SandboxSpec, default_dir
from extender.sandbox.submit import submit

NAMESPACE = "demo"
DEMO_PORTS = Ports()  # every port picked free: a demo runs beside any sandbox


def _container(gpus: int) -> dict[str, Any]:
    return {"name": "trainer", "image": "registry.example/llm-trainer:1.0",
            "resources": {"requests": {"cpu": "8", "memory": "64Gi"},
                          "limits": {"nvidia.com/gpu": str(gpus)}}}


def _replicated_job(name: str, pods: int, gpus: int) -> dict[str, Any]:
    return {"name": name, "replicas": 1, "template": {"spec": {
        "parallelism": pods, "completions": pods,
        "template": {"spec": {"restartPolicy": "Never", "containers": [_container(gpus)]}}}}}


def story_jobset() -> dict[str, Any]:
    """1 leader + 2 workers at 4 GPUs each."""
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "demo", "namespace": NAMESPACE},
            "spec": {"replicatedJobs": [_replicated_job("leader", 1, 4),
                                        _replicated_job("workers", 2, 4)]}}


def fragmented_jobset() -> dict[str, Any]:
    """3 workers at 6 GPUs: 18 GPUs, fewer than the 20 left free in sum, but no node holds two."""
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "too-big", "namespace": NAMESPACE},
            "spec": {"replicatedJobs": [_replicated_job("workers", 3, 6)]}}


class Demo:
    def __init__(self, sandbox: Sandbox, *, out: Callable[[str], None] = print) -> None:
        self.sandbox = sandbox
        self.out = out
        info = sandbox.info()
        assert info is not None
        self.info = info
        self.conn: Connection = sandbox.connection()

    def step(self, text: str) -> None:
        self.out(f"\n==> {text}")

    def shell(self, argv: list[str]) -> str:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                                env={**os.environ, "KUBECONFIG": self.info.kubeconfig})
        text = (result.stdout + result.stderr).rstrip()
        self.out(text)
        return text

    def kubectl(self, *args: str) -> str:
        self.out(f"$ kubectl {' '.join(args)}")
        return self.shell([self.info.kubectl, *args])

    def muster(self, *args: str) -> str:
        self.out(f"$ muster {' '.join(args)}")
        return self.shell([sys.executable, "-m", "extender.cli.main", *args,
                           "--kubeconfig", self.info.kubeconfig])

    def pods(self, workload: str) -> list[dict[str, Any]]:
        items = self.conn.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods",
                                  query={"labelSelector":
                                         f"jobset.sigs.k8s.io/jobset-name={workload}"})
        pods: list[dict[str, Any]] = items.get("items", [])
        return pods

    def wait_bound(self, workload: str, count: int, timeout: float = 60) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pods = self.pods(workload)
            if sum(1 for p in pods if p["spec"].get("nodeName")) >= count:
                return pods
            time.sleep(0.5)
        raise CliError(f"the gang {NAMESPACE}/{workload} was not bound within {timeout:.0f}s",
                       exit_code=EXIT_NO)

    def wait_created(self, workload: str, count: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while len(self.pods(workload)) < count:
            if time.monotonic() > deadline:
                raise CliError(f"the Job controller made no {count} pods for {workload} "
                               f"within {timeout:.0f}s", exit_code=EXIT_NO)
            time.sleep(0.25)

    def gangs(self) -> dict[str, Any]:
        url = f"{self.info.muster_url}/inspect/gangs"
        with urllib.request.urlopen(url, timeout=5) as response:
            data: dict[str, Any] = orjson.loads(response.read())
        return {g["gang"]: g for g in data.get("gangs", [])}

    def run(self) -> None:
        catalog = packaged_catalog()
        self.conn.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}})

        self.step("Submit a JobSet: 1 leader + 2 workers, 4 GPUs each. A stand-in for the "
                  "JobSet controller makes its two Jobs; kube-controller-manager's Job "
                  "controller makes the three pods.")
        made = submit(self.conn, story_jobset(), catalog, namespace=NAMESPACE)
        self.out(f"created jobset/{made.workload['metadata']['name']}, "
                 + ", ".join(f"job/{j['metadata']['name']}" for j in made.intermediates))
        self.wait_created("demo", 3)

        self.step("kubectl sees three unrelated pods:")
        self.kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide")

        self.step("Muster sees one workload (roles leader and workers), 3 pods, 12 GPUs, one "
                  "gang of 3; waiting for the gang to be admitted and bound together...")
        pods = self.wait_bound("demo", 3)
        tree = made.tree
        gang = tree.gangs[0]
        self.out(f"workload jobset/demo: roles {', '.join(r.name for r in tree.roles)}; "
                 f"{tree.pods} pods, "
                 f"{tree.gpus} GPUs; gang {gang.key} minMember {gang.min_member}")
        state = self.gangs().get(gang.key, {})
        self.out(f"gang {gang.key}: state={state.get('state')} bound={state.get('bound')}/"
                 f"{state.get('minMember')} reason: {state.get('lastReason')}")
        if state.get("bound") != 3:
            raise CliError(f"Muster reports gang {gang.key} as {state}", exit_code=EXIT_NO)
        self.kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide")
        self.muster("describe", "jobset/demo", "-n", NAMESPACE)
        if len([p for p in pods if p["spec"].get("nodeName")]) != 3:
            raise CliError("the gang was not bound whole", exit_code=EXIT_NO)

        self.step("Submit a gang that cannot fit: 3 workers x 6 GPUs = 18 GPUs. 20 GPUs are "
                  "free in sum, but only two nodes have 6 free. Summing capacity would say yes.")
        submit(self.conn, fragmented_jobset(), catalog, namespace=NAMESPACE)
        self.wait_created("too-big", 3)
        time.sleep(6)
        waiting = self.pods("too-big")
        placed = [p["metadata"]["name"] for p in waiting if p["spec"].get("nodeName")]
        if placed or len(waiting) != 3:
            raise CliError(f"part of gang too-big was bound: {placed}", exit_code=EXIT_NO)
        self.kubectl("get", "pods", "-n", NAMESPACE, "-l",
                     "jobset.sigs.k8s.io/jobset-name=too-big")
        self.step("It waits whole, and says why (kubectl describe pod ... | Events):")
        self.shell([self.info.kubectl, "get", "events", "-n", NAMESPACE,
                    "--field-selector", f"involvedObject.name={waiting[0]['metadata']['name']}",
                    "-o", "custom-columns=REASON:.reason,FROM:.source.component,"
                    "MESSAGE:.message"])
        self.out("\nDemo complete: one gang admitted and bound whole, one gang waiting whole.")


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "demo", help="the Muster story on a local real control plane (builds it on first run)",
        description="Start a sandbox (etcd, kube-apiserver, kube-scheduler, "
                    "kube-controller-manager, KWOK and Muster on loopback), schedule a gang "
                    "and show one waiting, then stop everything.")
    parser.add_argument("--keep", action="store_true",
                        help="leave the sandbox running afterwards (stop it with: muster "
                             "sandbox down)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    directory = default_dir() if args.keep else Path(tempfile.mkdtemp(prefix="muster-demo-"))
    try:
        return _run(args, directory)
    finally:
        if not args.keep:  # the directory is the demo's own: leave nothing behind
            shutil.rmtree(directory, ignore_errors=True)


def _run(args: argparse.Namespace, directory: Path) -> int:
    spec = SandboxSpec(directory=directory, nodes=4, gpus_per_node=8, ports=DEMO_PORTS,
                       bind_timeout=20.0)
    sandbox = Sandbox(spec, say=lambda m: print(f"[sandbox] {m}", flush=True))
    print("Muster demo: starting a local control plane with 4 nodes x 8 GPUs", flush=True)
    try:
        sandbox.up()
        Demo(sandbox, out=lambda m: print(m, flush=True)).run()
    except (SandboxError, BinariesMissing, KubeError) as err:
        raise CliError(str(err)) from err
    finally:
        if not args.keep:
            sandbox.down()
            print("[sandbox] stopped every process it started", flush=True)
    return EXIT_OK


__all__ = ["Demo", "fragmented_jobset", "story_jobset"]
