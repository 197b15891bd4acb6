"""``muster describe`` and ``muster get`` against a real kube-apiserver (the session sandbox:
4 nodes x 8 GPUs, kube-scheduler with Muster as its extender), and against a dead one."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from extender.cli.main import main
from extender.core.workloads.catalog import Catalog
from extender.sandbox.sandbox import Sandbox
from tests.e2e.conftest import bound, pods_in, scheduled_message, submit, wait_until

pytestmark = pytest.mark.e2e

STORY = Path(__file__).resolve().parents[1] / "unit/cli/data/story-jobset.yaml"


def _story(namespace: str, *, name: str = "story", worker_gpus: int = 4) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load(STORY.read_text())
    obj["metadata"] = {"name": name, "namespace": namespace}
    workers = obj["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]
    workers["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = worker_gpus
    return obj


def _muster(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _kubeconfig(sandbox: Sandbox) -> str:
    info = sandbox.info()
    assert info is not None
    return info.kubeconfig


def test_describe_shows_the_live_tree_with_pods_nodes_and_gpus(
        sandbox: Sandbox, namespace: str, catalog: Catalog,
        capsys: pytest.CaptureFixture[str]) -> None:
    conn = sandbox.connection()
    submit(conn, _story(namespace), catalog, namespace=namespace)
    assert wait_until(lambda: len(bound(pods_in(conn, namespace))) == 3, timeout=120), [
        (p["metadata"]["name"], scheduled_message(p)) for p in pods_in(conn, namespace)]
    code, out, err = _muster(capsys, "describe", "jobset/story", "-n", namespace,
                             "--kubeconfig", _kubeconfig(sandbox), "-o", "json")
    assert code == 0, err
    data = orjson.loads(out)
    assert (data["kind"], data["name"], data["namespace"]) == ("JobSet", "story", namespace)
    # The sandbox applies the catalog as WorkloadDescriptor objects; the cluster's copy wins.
    assert data["descriptorSource"] == "cluster"
    assert [(r["name"], r["pods"], r["gpusPerPod"], r["gpus"]) for r in data["roles"]] == [
        ("leader", 1, 4, 4), ("workers", 2, 4, 8)]
    [gang] = data["gangs"]
    assert {k: gang[k] for k in ("name", "minMember", "pods", "gpus", "roles")} == {
        "name": f"{namespace}/story", "minMember": 3, "pods": 3, "gpus": 12,
        "roles": {"leader": 1, "workers": 2}}
    assert (gang["state"], gang["bound"]) == ("Bound", 3)
    assert "GangAdmitted" in [e["reason"] for e in data["events"]]
    assert data["totals"]["observedPods"] == 3 and data["totals"]["gpus"] == 12
    observed = [p for r in data["roles"] for p in r["observed"]]
    live = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods_in(conn, namespace)}
    assert {p["name"]: p["node"] for p in observed} == live
    assert all(p["gpus"] == 4 and p["gang"] == f"{namespace}/story" for p in observed)
    # TYPE NAME spelling, a short name, and the table.
    code, table, _ = _muster(capsys, "describe", "JS", "story", "-n", namespace,
                             "--kubeconfig", _kubeconfig(sandbox))
    assert code == 0
    assert "descriptor: jobset (muster, cluster)" in table
    assert "TOTAL" in table and f"gang: {namespace}/story (minimum 3 of 3 pods" in table


def test_a_gang_that_cannot_fit_shows_pending_unschedulable_pods(
        sandbox: Sandbox, namespace: str, catalog: Catalog,
        capsys: pytest.CaptureFixture[str]) -> None:
    conn = sandbox.connection()
    # Workers want 16 GPUs each; no 8-GPU node holds one, so no member of the gang binds.
    submit(conn, _story(namespace, name="toobig", worker_gpus=16), catalog, namespace=namespace)

    def unschedulable() -> bool:
        return all(any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                       for c in p.get("status", {}).get("conditions", []) or [])
                   for p in pods_in(conn, namespace)) and len(pods_in(conn, namespace)) == 3
    assert wait_until(unschedulable, timeout=60)
    code, out, err = _muster(capsys, "describe", "jobsets/toobig", "-n", namespace,
                             "--kubeconfig", _kubeconfig(sandbox))
    assert code == 0, err
    assert out.count("Pending (Unschedulable)") == 3
    assert not bound(pods_in(conn, namespace))


def test_a_waiting_jobset_says_why_on_itself_in_kubectl_and_muster_describe(
        sandbox: Sandbox, namespace: str, catalog: Catalog,
        capsys: pytest.CaptureFixture[str]) -> None:
    conn = sandbox.connection()
    submit(conn, _story(namespace, name="waits", worker_gpus=16), catalog, namespace=namespace)
    info = sandbox.info()
    assert info is not None

    def told() -> str:
        done = subprocess.run([info.kubectl, "describe", "jobset", "waits", "-n", namespace],
                              capture_output=True, text=True, timeout=60, check=False,
                              env={**os.environ, "KUBECONFIG": info.kubeconfig})
        assert done.returncode == 0, done.stderr
        return done.stdout
    assert wait_until(lambda: "GangWaiting" in told(), timeout=60), told()
    described = told()
    assert "Events:  <none>" not in described
    assert f"gang {namespace}/waits: " in described and "muster" in described
    code, out, err = _muster(capsys, "describe", "jobset/waits", "-n", namespace,
                             "--kubeconfig", _kubeconfig(sandbox),
                             "--muster-url", str(info.muster_url))
    assert code == 0, err
    # The Gang object first, Muster's own view when the object is not written yet.
    assert re.search(r"^  state: Waiting \(0 of minimum 3 bound; from (its Gang object|Muster)\)$",
                     out, re.MULTILINE), out
    assert f"  reason: gang {namespace}/waits: " in out
    assert "GangWaiting" in out and "jobset/waits" in out


def test_get_lists_workloads_across_namespaces_with_ready_and_gpus(
        sandbox: Sandbox, namespace: str, catalog: Catalog,
        capsys: pytest.CaptureFixture[str]) -> None:
    conn = sandbox.connection()
    submit(conn, _story(namespace, name="listed"), catalog, namespace=namespace)
    code, out, err = _muster(capsys, "get", "jobsets", "-A", "--kubeconfig",
                             _kubeconfig(sandbox), "-o", "json")
    assert code == 0, err
    # -o json prints the workload objects themselves, as the API server holds them.
    objects = {(i["metadata"]["namespace"], i["metadata"]["name"]): i
               for i in orjson.loads(out)["items"]}
    assert objects[(namespace, "listed")]["kind"] == "JobSet"
    code, out, _ = _muster(capsys, "get", "--all-types", "-n", namespace, "--kubeconfig",
                           _kubeconfig(sandbox), "-o", "json")
    # Jobs and pods the JobSet owns are parts of it, not workloads of their own.
    items = orjson.loads(out)["items"]
    assert code == 0 and [(i["kind"], i["metadata"]["name"]) for i in items] == [
        ("JobSet", "listed")]
    code, table, _ = _muster(capsys, "get", "--all-types", "-n", namespace, "--kubeconfig",
                             _kubeconfig(sandbox))
    header, row = table.splitlines()[:2]
    # The sandbox serves gangs.muster.dev: each workload's Gang object and its state too.
    assert header.split() == ["NAME", "PHASE", "READY", "GANGS", "GANG", "STATE", "GPUS", "AGE"]
    assert row.split()[0] == "listed" and "/3 " in row and "1 (min 3)" in row, table
    assert row.split()[-2] == "12", table


def test_a_missing_workload_and_an_unknown_type_exit_1(
        sandbox: Sandbox, namespace: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _muster(capsys, "describe", "jobset/nope", "-n", namespace,
                           "--kubeconfig", _kubeconfig(sandbox))
    assert code == 1 and f"JobSet nope not found in namespace {namespace}" in err
    code, _, err = _muster(capsys, "get", "gizmo", "--kubeconfig", _kubeconfig(sandbox))
    assert code == 1 and "known kinds:" in err


def test_a_dead_api_server_exits_1_naming_it(
        sandbox: Sandbox, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = yaml.safe_load(Path(_kubeconfig(sandbox)).read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{port}"
    dead = tmp_path / "dead.kubeconfig"
    dead.write_text(yaml.safe_dump(config))
    for argv in (("describe", "jobset/story"), ("get", "jobsets", "-A")):
        code, _, err = _muster(capsys, *argv, "--kubeconfig", str(dead))
        assert code == 1
        assert f"cannot reach the API server at https://127.0.0.1:{port}" in err
        assert "Traceback" not in err


class _Watching:
    """``muster ARGV`` run as kubectl's users run ``-w``: a process of its own, its lines read
    as they come."""

    def __init__(self, *argv: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "extender.cli.main", *argv],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        assert self.proc.stdout is not None
        threading.Thread(target=lambda out: [self.lines.put(x) for x in out],
                         args=(self.proc.stdout,), daemon=True).start()

    def line(self, matching: Callable[[str], bool], *, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            with contextlib.suppress(queue.Empty):
                line = self.lines.get(timeout=left)
                if matching(line):
                    return line
        raise AssertionError(f"no such line in {timeout}s; stderr so far: {self.stop()[1]}")

    def stop(self) -> tuple[int, str]:
        """Interrupt it as Ctrl-C does: the exit code and what it said on stderr."""
        self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return self.proc.returncode, err


def test_get_watch_prints_a_row_when_a_gang_or_workload_changes(
        sandbox: Sandbox, namespace: str, catalog: Catalog) -> None:
    conn = sandbox.connection()
    submit(conn, _story(namespace, name="waits", worker_gpus=16), catalog, namespace=namespace)
    gangs = f"/apis/muster.dev/v1alpha1/namespaces/{namespace}/gangs"
    assert wait_until(lambda: bool(conn.request("GET", gangs).get("items")), timeout=60)
    kubeconfig = _kubeconfig(sandbox)
    watching_gangs = _Watching("get", "gangs", "-w", "-n", namespace, "--kubeconfig", kubeconfig)
    watching_jobsets = _Watching("get", "js", "--watch", "-n", namespace,
                                 "--kubeconfig", kubeconfig)
    try:
        assert watching_gangs.line(lambda x: x.split()[:1] == ["NAME"], timeout=60)
        assert "Waiting" in watching_gangs.line(lambda x: "jobset-waits" in x, timeout=30)
        assert watching_jobsets.line(lambda x: x.startswith("waits "), timeout=60)
        # A change: a JobSet that fits. Its Gang object appears, then says it is bound.
        submit(conn, _story(namespace, name="fits"), catalog, namespace=namespace)
        row = watching_gangs.line(lambda x: "jobset-fits" in x and " Bound " in x, timeout=120)
        assert row.split()[1:] == [f"JobSet/{namespace}/fits", "Bound", "3/3", row.split()[-1]]
        assert watching_jobsets.line(
            lambda x: x.startswith("fits ") and "jobset-fits" in x and "Bound" in x, timeout=60)
    finally:
        gangs_exit, gangs_err = watching_gangs.stop()
        jobsets_exit, jobsets_err = watching_jobsets.stop()
    assert (gangs_exit, jobsets_exit) == (130, 130), gangs_err + jobsets_err
    assert "Traceback" not in gangs_err + jobsets_err


def test_kubectl_explain_reads_what_each_gang_field_means(sandbox: Sandbox) -> None:
    info = sandbox.info()
    assert info is not None
    done = subprocess.run([info.kubectl, "explain", "gang.status", "--kubeconfig",
                           info.kubeconfig], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "Members that hold resources on a node now." in done.stdout
    assert "<no description>" not in done.stdout


def test_a_tab_offers_the_clusters_namespaces_and_names_to_muster_and_kubectl_muster(
        sandbox: Sandbox, namespace: str, catalog: Catalog) -> None:
    conn = sandbox.connection()
    submit(conn, _story(namespace, name="tabbed"), catalog, namespace=namespace)
    info = sandbox.info()
    assert info is not None
    gangs = f"/apis/muster.dev/v1alpha1/namespaces/{namespace}/gangs"
    assert wait_until(lambda: bool(conn.request("GET", gangs).get("items")), timeout=60)
    # kubectl finds kubectl-muster and kubectl_complete-muster on PATH, as installed.
    env = {**os.environ, "KUBECONFIG": info.kubeconfig,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}

    def tab(*argv: str) -> list[str]:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                              env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    muster = [sys.executable, "-m", "extender.cli.main", "__complete"]
    assert tab(*muster, "get", "-n", namespace, "js/ta") == ["js/tabbed", ":4"]
    assert tab(*muster, "describe", "jobsets", "-n", namespace, "") == ["tabbed", ":4"]
    assert tab(*muster, "get", "gangs", "-n", namespace, "") == ["jobset-tabbed", ":4"]
    assert namespace in tab(*muster, "get", "js", "-n", namespace[:4])
    # The plugin, through kubectl's own completion.
    offered = tab(info.kubectl, "__complete", "muster", "get", "-n", namespace, "js/")
    assert offered[:2] == ["js/tabbed", ":4"], offered
