"""``muster demo``: the story of Muster in one command, on a real control plane.

A JobSet of 1 leader and 2 workers at 4 GPUs each is three unrelated pods to kubectl; to Muster
it is one workload, one gang of 3, 12 GPUs. Its workers ``dependsOn`` the leader being Ready,
so the real JobSet controller creates them only once the leader runs: Muster plans the whole
gang on the leader's filter, binds the leader, holds the workers' GPUs while they are created,
and binds them together. A second JobSet whose GPUs add up but fit no set of nodes waits
whole, with the reason. Both are applied with ``kubectl apply`` alone; every claim is checked
against the API server, and the demo exits non-zero if the cluster does not behave as told.
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
import yaml

from extender.cli.errors import EXIT_NO, EXIT_OK, CliError
from extender.core.workloads.workload import resolve_workload
from extender.files.catalog import packaged_catalog
from extender.kube.client import Connection, KubeError
from extender.sandbox.binaries import BinariesMissing
from extender.sandbox.config import Ports
from extender.sandbox.sandbox import Sandbox, SandboxError, SandboxSpec, default_dir

NAMESPACE = "demo"
DEMO_PORTS = Ports()  # every port picked free: a demo runs beside any sandbox


def _container(gpus: int) -> dict[str, Any]:
    return {"name": "trainer", "image": "registry.example/llm-trainer:1.0",
            "resources": {"requests": {"cpu": "8", "memory": "64Gi"},
                          "limits": {"nvidia.com/gpu": str(gpus)}}}


def _replicated_job(name: str, pods: int, gpus: int, *,
                    annotations: dict[str, str] | None = None) -> dict[str, Any]:
    template: dict[str, Any] = {"spec": {"restartPolicy": "Never",
                                         "containers": [_container(gpus)]}}
    if annotations:
        template["metadata"] = {"annotations": annotations}
    return {"name": name, "replicas": 1, "template": {"spec": {
        "parallelism": pods, "completions": pods, "template": template}}}


def story_jobset() -> dict[str, Any]:
    """1 leader + 2 workers at 4 GPUs each; the workers dependsOn the leader being Ready (the
    leader takes a few seconds to start in the sandbox, as an image pull would)."""
    workers = _replicated_job("workers", 2, 4)
    workers["dependsOn"] = [{"name": "leader", "status": "Ready"}]
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "demo", "namespace": NAMESPACE},
            "spec": {"replicatedJobs": [
                _replicated_job("leader", 1, 4,
                                annotations={"muster.dev/sandbox-startup": "3s"}),
                workers]}}


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

    def apply(self, obj: dict[str, Any]) -> None:
        """``kubectl apply -f FILE`` of ``obj``, as a user would."""
        path = self.sandbox.dir / f"{obj['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(obj, sort_keys=False))
        self.kubectl("apply", "-f", str(path))

    def run(self) -> None:
        catalog = packaged_catalog()
        self.conn.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}})

        self.step("Apply a JobSet with kubectl: 1 leader + 2 workers, 4 GPUs each. The workers "
                  "dependsOn the leader being Ready: the real JobSet controller creates them "
                  "only once the leader runs.")
        story = story_jobset()
        self.apply(story)
        tree = resolve_workload(story, catalog.require(story))
        gang = tree.gangs[0]
        self.out(f"Muster reads one workload (roles {', '.join(r.name for r in tree.roles)}): "
                 f"{tree.pods} pods, {tree.gpus} GPUs, one gang {gang.key} of "
                 f"{gang.min_member}, created in {gang.last_stage + 1} stages")

        self.step("The leader comes first. Muster plans the whole gang on its filter, binds it, "
                  "and holds the workers' 8 GPUs for them:")
        self.wait_bound("demo", 1)
        state = self.gangs().get(gang.key, {})
        stages = ", ".join(f"{'+'.join(st['roles'])} {st['state']}"
                           for st in state.get("stages", []))
        self.out(f"gang {gang.key}: {stages}")
        self.kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide")

        self.step("Once the leader is Ready the JobSet controller creates the workers; they "
                  "bind together onto the held GPUs...")
        pods = self.wait_bound("demo", 3)
        state = self.gangs().get(gang.key, {})
        self.out(f"gang {gang.key}: state={state.get('state')} bound={state.get('bound')}/"
                 f"{state.get('minMember')} reason: {state.get('lastReason')}")
        if state.get("bound") != 3:
            raise CliError(f"Muster reports gang {gang.key} as {state}", exit_code=EXIT_NO)
        self.kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide")
        self.muster("describe", "jobset/demo", "-n", NAMESPACE)
        if len([p for p in pods if p["spec"].get("nodeName")]) != 3:
            raise CliError("the gang was not bound whole", exit_code=EXIT_NO)

        self.step("Apply a gang that cannot fit: 3 workers x 6 GPUs = 18 GPUs. 20 GPUs are "
                  "free in sum, but only two nodes have 6 free. Summing capacity would say yes.")
        self.apply(fragmented_jobset())
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
        self.step("Every gang Muster serves, as kubectl lists it (one Gang object each):")
        self.wait_gang_states({"jobset-demo": "Bound", "jobset-too-big": "Waiting"})
        self.kubectl("get", "gangs", "-n", NAMESPACE, "-o", "wide")
        self.out("\nDemo complete: one gang admitted and bound whole, stage by stage; one gang "
                 "waiting whole.")

    def wait_gang_states(self, want: dict[str, str], timeout: float = 20) -> None:
        """Until the Gang objects Muster writes say ``want`` (name -> state)."""
        deadline = time.monotonic() + timeout
        while True:
            items = self.conn.request(
                "GET", f"/apis/muster.dev/v1alpha1/namespaces/{NAMESPACE}/gangs")["items"]
            seen = {g["metadata"]["name"]: g.get("status", {}).get("state") for g in items}
            if all(seen.get(name) == state for name, state in want.items()):
                return
            if time.monotonic() > deadline:
                raise CliError(f"Muster's Gang objects say {seen}, not {want}",
                               exit_code=EXIT_NO)
            time.sleep(0.5)


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
                       bind_timeout=20.0, jobset=True)
    sandbox = Sandbox(spec, say=lambda m: print(f"[sandbox] {m}", flush=True))
    print("Muster demo: starting a local control plane with 4 nodes x 8 GPUs and the real "
          "JobSet controller", flush=True)
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
