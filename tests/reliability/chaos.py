"""Chaos trials on a real control plane: kill, delete and race, then check what the API says.

Each trial runs in its own namespace of a sandbox (4 nodes x 8 GPUs), does one harmful thing
at a chosen moment of a gang's life, waits until nothing changes, and returns the invariants
that broke (:func:`invariants`), read from the API server, never from Muster:

- no gang partly bound; no node's GPUs oversubscribed; no pod bound to a node that does not
  exist; no ``PodScheduled=False`` written onto a newer pod of the same name.

    python -m tests.reliability.chaos                 # every trial once, on its own sandbox
    python -m tests.reliability.chaos --repeat 8 double_bind
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from extender.core.workloads.catalog import Catalog
from extender.files.catalog import packaged_catalog
from extender.kube.client import Connection
from extender.sandbox.controllers import adopt
from extender.sandbox.nodes import fake_node
from extender.sandbox.sandbox import Sandbox
from extender.sandbox.submit import create
from tests.e2e.conftest import bound, delete_pods, pods_in, start_sandbox, wait_until
from tests.e2e.test_gang_scheduling_with_stand_in_operators import bare_pod, jobset, staged

GPU = "nvidia.com/gpu"
GANG_LABEL = "jobset.sigs.k8s.io/jobset-name"


@dataclass
class Trial:
    """One chaos trial's context and outcome."""

    box: Sandbox
    conn: Connection
    catalog: Catalog
    namespace: str
    gangs: dict[str, int] = field(default_factory=dict)
    """Gang (JobSet) name -> members: each must end with none or all bound."""
    recreated: dict[str, str] = field(default_factory=dict)
    """Pod name -> UID of the newer pod made after the first was deleted."""
    deleted_nodes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """What a trial saw go wrong itself (beyond the invariants every trial checks)."""

    # --- building blocks -------------------------------------------------------------------
    def gang(self, name: str, members: int, gpus: int = 8) -> tuple[list[dict[str, Any]],
                                                                    dict[tuple[str, str], str]]:
        self.gangs[name] = members
        return staged(self.conn, jobset(name, self.namespace, ("workers", members, gpus)),
                      self.catalog)

    def pod(self, pod: dict[str, Any], uids: dict[tuple[str, str], str], *,
            gated: bool = False) -> dict[str, Any]:
        body = adopt(dict(pod), uids)
        if gated:  # in the API (and Muster's cache) but not yet offered to kube-scheduler
            body["spec"] = {**body["spec"], "schedulingGates": [{"name": "chaos/hold"}]}
        return create(self.conn, body, "pods")

    def ungate(self, pod: dict[str, Any]) -> None:
        self.conn.request("PATCH", f"/api/v1/namespaces/{self.namespace}/pods/"
                          f"{pod['metadata']['name']}", body={"spec": {"schedulingGates": None}},
                          content_type="application/strategic-merge-patch+json")

    def fill(self, nodes: list[str]) -> None:
        """Whole-node pods (no gang) on ``nodes``, so a gang has only the others."""
        for node in nodes:
            pod = bare_pod(f"filler-{node}", self.namespace, 8)
            pod["spec"]["nodeName"] = node
            create(self.conn, pod, "pods")

    def muster(self, method: str, path: str, body: object = None,
               timeout: float = 30) -> Any:
        info = self.box.info()
        assert info is not None and info.muster_url
        request = urllib.request.Request(info.muster_url + path, method=method,
                                         data=None if body is None else orjson.dumps(body))
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return orjson.loads(reply.read())

    def held(self, gang: str) -> int:
        with contextlib.suppress(OSError):
            for g in self.muster("GET", "/inspect/gangs", timeout=5)["gangs"]:
                if g["gang"] == f"{self.namespace}/{gang}":  # not a past trial's namesake
                    return int(g["heldAtBind"])
        return 0

    def wait_held(self, gang: str, count: int, timeout: float = 20, interval: float = 0.25,
                  ) -> None:
        """Wait until ``count`` members of ``gang`` are held; a note says if they never were
        (then the trial did not test what it says)."""
        if not wait_until(lambda: self.held(gang) >= count, timeout=timeout, interval=interval):
            self.notes.append(f"only {self.held(gang)} of {count} members of {gang} were held")

    def planned_node(self, pod: dict[str, Any], nodes: list[str]) -> list[str]:
        """The nodes Muster's filter passes for ``pod`` (a gated member: its planned slot)."""
        return list(self.muster("POST", "/filter", {"Pod": pod, "Nodes": None,
                                                    "NodeNames": nodes})["NodeNames"] or [])

    def delete_node(self, name: str) -> None:
        self.conn.request("DELETE", f"/api/v1/nodes/{name}")
        self.deleted_nodes.append(name)

    def delete_pod(self, name: str) -> None:
        self.conn.request("DELETE", f"/api/v1/namespaces/{self.namespace}/pods/{name}",
                          body={"gracePeriodSeconds": 0})
        wait_until(lambda: name not in {p["metadata"]["name"]
                                        for p in pods_in(self.conn, self.namespace)}, timeout=10)

    def settle(self, quiet: float = 6.0, timeout: float = 90.0) -> None:
        """Wait until no pod's binding changes for ``quiet`` seconds and no bind is held."""
        deadline, last, since = time.monotonic() + timeout, None, time.monotonic()
        while time.monotonic() < deadline:
            now = sorted((p["metadata"]["name"], p["spec"].get("nodeName") or "")
                         for p in pods_in(self.conn, self.namespace))
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet and not any(
                    self.held(g) for g in self.gangs):
                return
            time.sleep(0.5)
        self.notes.append(f"did not settle within {timeout:g}s")

    # --- the invariants ----------------------------------------------------------------------
    def invariants(self) -> list[str]:
        problems = list(self.problems)
        nodes = {n["metadata"]["name"]: int(n["status"]["allocatable"].get(GPU, "0"))
                 for n in self.conn.request("GET", "/api/v1/nodes")["items"]}
        pods = self.conn.request("GET", "/api/v1/pods")["items"]
        used: dict[str, int] = {}
        on: dict[str, list[str]] = {}
        for pod in bound(pods):
            node = pod["spec"]["nodeName"]
            if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                continue
            if node not in nodes:
                problems.append(f"pod {pod['metadata']['name']} is bound to {node}, "
                                "which does not exist")
            on.setdefault(node, []).append(pod["metadata"]["name"])
            used[node] = used.get(node, 0) + sum(
                int(c.get("resources", {}).get("limits", {}).get(GPU, "0"))
                for c in pod["spec"]["containers"])
        problems += [f"node {n} has {u} GPUs bound, {nodes[n]} allocatable ({', '.join(on[n])})"
                     for n, u in sorted(used.items()) if n in nodes and u > nodes[n]]
        mine = pods_in(self.conn, self.namespace)
        for gang, size in sorted(self.gangs.items()):
            done = len(bound(members(mine, gang)))
            if 0 < done < size:
                problems.append(f"gang {gang} is partly bound: {done} of {size}")
        for pod in mine:
            uid = pod["metadata"]["uid"]
            if self.recreated.get(pod["metadata"]["name"]) != uid:
                continue
            for cond in pod.get("status", {}).get("conditions") or []:
                if cond["type"] == "PodScheduled" and cond["status"] == "False" and (
                        pod["spec"].get("nodeName") or "held member" in cond.get("message", "")):
                    problems.append(f"newer pod {pod['metadata']['name']} got "
                                    f"PodScheduled=False: {cond.get('message', '')[:200]}")
        return problems

    def summary(self) -> str:
        mine = pods_in(self.conn, self.namespace)
        return "bound: " + ", ".join(f"{g} {len(bound(members(mine, g)))}/{n}"
                                     for g, n in sorted(self.gangs.items()))


def members(pods: list[dict[str, Any]], gang: str) -> list[dict[str, Any]]:
    return [p for p in pods if p["metadata"].get("labels", {}).get(GANG_LABEL) == gang]


# --- the trials -----------------------------------------------------------------------------

NODES = [f"gpu-node-{i}" for i in range(4)]


def scheduler_killed_mid_gang(t: Trial) -> None:
    pods, uids = t.gang("sk", 3)
    for pod in pods[:2]:
        t.pod(pod, uids)
    t.wait_held("sk", 1, timeout=20)
    back = t.box.outage("kube-scheduler")
    time.sleep(3)
    back()
    t.pod(pods[2], uids)


def muster_killed_at_barrier(t: Trial) -> None:
    pods, uids = t.gang("mb", 3)
    for pod in pods[:2]:
        t.pod(pod, uids)
    t.wait_held("mb", 2, timeout=20)
    t.box.kill("muster")
    time.sleep(2)
    t.notes.append(f"while Muster was down: {len(bound(pods_in(t.conn, t.namespace)))} bound")
    t.box.start_muster()
    t.pod(pods[2], uids)


def muster_killed_mid_release(t: Trial) -> None:
    pods, uids = t.gang("mr", 4)
    for pod in pods[:3]:
        t.pod(pod, uids)
    t.wait_held("mr", 3, timeout=30)
    t.pod(pods[3], uids)
    # The release starts when the last member reaches bind: the held count drops then.
    wait_until(lambda: t.held("mr") < 3, timeout=20, interval=0.005)
    t.box.kill("muster")
    t.notes.append(f"killed with {len(bound(pods_in(t.conn, t.namespace)))}/4 bound")
    time.sleep(2)
    t.box.start_muster()


def _two_free_nodes(t: Trial, name: str) -> tuple[list[dict[str, Any]], dict[Any, str],
                                                   dict[str, Any], str, str]:
    """A 2 x 8-GPU gang on the two free nodes: member 0 held at its node, member 1 created
    gated; returns (pods, uids, the gated member, its planned node, member 0's node)."""
    t.fill(NODES[2:])
    pods, uids = t.gang(name, 2)
    t.pod(pods[0], uids)
    t.wait_held(name, 1)
    gated = t.pod(pods[1], uids, gated=True)
    [planned] = t.planned_node(gated, NODES[:2])
    held_at = next(n for n in NODES[:2] if n != planned)
    return pods, uids, gated, planned, held_at


def node_deleted_while_planned(t: Trial) -> None:
    _, _, gated, planned, _ = _two_free_nodes(t, "np")
    t.delete_node(planned)
    t.ungate(gated)


def node_deleted_while_held(t: Trial) -> None:
    _, _, gated, _, held_at = _two_free_nodes(t, "nh")
    t.delete_node(held_at)
    t.ungate(gated)


def member_deleted_while_held(t: Trial) -> None:
    pods, uids = t.gang("md", 3)
    for pod in pods[:2]:
        t.pod(pod, uids)
    t.wait_held("md", 2, timeout=20)
    t.delete_pod(pods[0]["metadata"]["name"])
    newer = t.pod(pods[0], uids)  # its controller makes it again, same name
    t.recreated[newer["metadata"]["name"]] = newer["metadata"]["uid"]
    t.pod(pods[2], uids)


def oversubscribed_3x(t: Trial) -> None:
    """Six 2 x 8-GPU gangs (96 GPUs) for 32 GPUs, their members interleaved."""
    made = [t.gang(f"o{i}", 2) for i in range(6)]
    for j in range(2):
        for pods, uids in made:
            t.pod(pods[j], uids)


def double_bind(t: Trial) -> None:
    """kube-scheduler's bind of member 0 held at one node; a second bind of the same member
    to the node planned for member 1 (issue 16, item 2); then member 1 comes."""
    _, _, gated, planned, held_at = _two_free_nodes(t, "db")
    member = pods_in(t.conn, t.namespace)
    first = next(p for p in member if p["metadata"]["name"].endswith("-0"))
    answer: list[Any] = []
    second = threading.Thread(target=lambda: answer.append(t.muster("POST", "/bind", {
        "PodName": first["metadata"]["name"], "PodNamespace": t.namespace,
        "PodUID": first["metadata"]["uid"], "Node": planned})))
    second.start()
    t.wait_held("db", 2, timeout=10, interval=0.05)
    t.ungate(gated)
    second.join(60)
    t.settle()
    now = next(p for p in pods_in(t.conn, t.namespace) if p["metadata"]["name"].endswith("-0"))
    node = now["spec"].get("nodeName")
    t.notes.append(f"member 0 held at {held_at}, second bind to {planned} answered {answer}; "
                   f"member 0 ended on {node}")


def billion_gpu_pod_bound_by_hand(t: Trial) -> None:
    """A pod asking for 10^9 GPUs placed on a node by hand (the API server takes it): Muster
    must keep answering, in its usual time, and treat the node as full (issue 16, item 1)."""
    pod = bare_pod("greedy", t.namespace, 1)
    pod["spec"]["containers"][0]["resources"]["limits"][GPU] = "1000000000"
    pod["spec"]["nodeName"] = NODES[3]
    create(t.conn, pod, "pods")
    time.sleep(2)  # Muster's informer sees it
    probe = bare_pod("probe", t.namespace, 1) | {"metadata": {
        "name": "probe", "namespace": t.namespace, "uid": "probe-uid"}}
    for what, call in (("/readyz", lambda: t.muster("GET", "/readyz", timeout=5)),
                       ("/filter", lambda: t.planned_node(probe, NODES))):
        started = time.monotonic()
        try:
            answer = call()
        except OSError as err:
            t.problems.append(f"{what} gave no answer within 5 s with the pod bound ({err})")
            continue
        took = time.monotonic() - started
        if took > 1:
            t.problems.append(f"{what} took {took:.1f} s with the pod bound")
        if what == "/filter" and NODES[3] in answer:
            t.problems.append(f"filter passes {NODES[3]}, which the pod fills: {answer}")
    t.delete_pod("greedy")
    if t.problems:  # a wedged Muster does not recover by itself; the next trial needs one
        t.box.kill("muster")
        t.box.start_muster()


TRIALS: dict[str, Callable[[Trial], None]] = {f.__name__: f for f in (
    scheduler_killed_mid_gang, muster_killed_at_barrier, muster_killed_mid_release,
    node_deleted_while_planned, node_deleted_while_held, member_deleted_while_held,
    oversubscribed_3x, double_bind, billion_gpu_pod_bound_by_hand)}


def run_trial(box: Sandbox, catalog: Catalog, name: str, namespace: str) -> tuple[
        list[str], str, float]:
    """Run one trial, settle, check; restore the sandbox. (violations, summary, seconds)"""
    conn = box.connection()
    conn.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
    t = Trial(box, conn, catalog, namespace)
    started = time.monotonic()
    try:
        TRIALS[name](t)
        t.settle()
        problems = t.invariants()
        summary = "; ".join([t.summary(), *t.notes])
    finally:
        # The namespace first, as the e2e tests' scratch namespaces: its workloads go with it
        # (a JobSet left without pods is a workload still to start, to a forecast), and a
        # terminating namespace admits no new pod.
        with contextlib.suppress(Exception):
            conn.request("DELETE", f"/api/v1/namespaces/{namespace}")
        delete_pods(conn, namespace)
        wait_until(lambda: not pods_in(conn, namespace), timeout=30)
        for node in t.deleted_nodes:  # the sandbox's shape again, for the next trial
            index = NODES.index(node)
            with contextlib.suppress(Exception):
                created = conn.request("POST", "/api/v1/nodes", body=fake_node(index, gpus=8))
                if not created.get("status", {}).get("allocatable"):
                    conn.request("PATCH", f"/api/v1/nodes/{node}/status",
                                 body={"status": fake_node(index, gpus=8)["status"]})
    return problems, summary, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("trials", nargs="*", help=f"any of {', '.join(TRIALS)} (default: all)")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--bind-timeout", type=float, default=6.0)
    args = p.parse_args(argv)
    unknown = set(args.trials) - set(TRIALS)
    if unknown:
        p.error(f"no such trial: {', '.join(sorted(unknown))}")
    catalog, failed = packaged_catalog(), 0
    with tempfile.TemporaryDirectory() as tmp:
        box = start_sandbox(Path(tmp), bind_timeout=args.bind_timeout,
                            plan_ttl=args.bind_timeout * 2)
        try:
            for name in args.trials or list(TRIALS):
                for i in range(args.repeat):
                    problems, summary, seconds = run_trial(box, catalog, name, f"chaos-{i}-"
                                                           + name.replace("_", "-"))
                    failed += bool(problems)
                    verdict = "FAIL " + " | ".join(problems) if problems else "ok"
                    print(f"{name} #{i + 1}: {verdict} ({seconds:.0f} s; {summary})",
                          flush=True)
        finally:
            box.down()
    return 1 if failed else 0

if __name__ == "__main__":
    raise SystemExit(main())
