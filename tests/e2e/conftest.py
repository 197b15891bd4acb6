"""End-to-end fixtures: a real etcd, kube-apiserver, kube-scheduler, kube-controller-manager,
KWOK and Muster on loopback.

The control plane is built once from pinned Go modules and cached under ``~/.cache/muster``
(``tests/e2e/controlplane/build.sh``). Each sandbox picks its own free ports and directory, so
test sessions and a person's own ``muster sandbox`` do not collide.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.core.workloads.catalog import Catalog
from extender.files.catalog import packaged_catalog
from extender.kube.client import Connection, NotFound
from extender.sandbox.config import GateBy, Ports, SchedulerMode
from extender.sandbox.dra import GpuModel
from extender.sandbox.sandbox import Sandbox, SandboxSpec
from extender.sandbox.submit import Submitted, submit

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"


def start_sandbox(tmp: Path, *, mode: SchedulerMode = SchedulerMode.MUSTER, nodes: int = 4,
                  gpus_per_node: int = 8, bind_timeout: float = 15.0,
                  plan_ttl: float = 30.0, controller_manager: bool = True,
                  jobset: bool = False, lws: bool = False, kuberay: bool = False,
                  nodes_per_rack: int = 4, gating: bool = False,
                  gate_by: GateBy = GateBy.WEBHOOK,
                  gpu_model: GpuModel = GpuModel.DEVICE_PLUGIN, dra_nodes: int | None = None,
                  dra_partitions: bool = False, install_descriptors: bool = True) -> Sandbox:
    """A sandbox on free ports (``Ports()`` picks them at ``up``), with the real operators
    asked for; ``gpu_model``, ``dra_nodes`` and ``dra_partitions`` as :class:`SandboxSpec`
    reads them (with a DRA model, ``nodes`` counts the device-plugin nodes of ``mixed``
    only)."""
    spec = SandboxSpec(directory=tmp, nodes=nodes, gpus_per_node=gpus_per_node, mode=mode,
                       ports=Ports(), bind_timeout=bind_timeout, plan_ttl=plan_ttl,
                       controller_manager=controller_manager, jobset=jobset, lws=lws,
                       kuberay=kuberay, nodes_per_rack=nodes_per_rack, gating=gating,
                       gate_by=gate_by, gpu_model=gpu_model, dra_nodes=dra_nodes,
                       dra_partitions=dra_partitions, install_descriptors=install_descriptors)
    sandbox = Sandbox(spec, say=lambda _m: None)
    sandbox.up()
    return sandbox


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return packaged_catalog()


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """One Muster sandbox for the session: 4 nodes x 8 GPUs."""
    box = start_sandbox(tmp_path_factory.mktemp("sandbox"))
    try:
        yield box
    finally:
        box.down()


@pytest.fixture(scope="module")
def real_box(request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """A sandbox for one module, 4 nodes x 8 GPUs (or the module's ``NODES``; 4 per rack),
    running the real operators its ``REAL_OPERATORS`` names (``("lws",)``); no stand-in then
    runs for their kinds."""
    names = tuple(getattr(request.module, "REAL_OPERATORS", ()))
    if not names or not set(names) <= {"jobset", "lws", "kuberay"}:
        raise pytest.UsageError(f"{request.module.__name__}: REAL_OPERATORS must name jobset, "
                                f"lws or kuberay, not {names!r}")
    box = start_sandbox(tmp_path_factory.mktemp("-".join(names)), jobset="jobset" in names,
                        lws="lws" in names, kuberay="kuberay" in names,
                        nodes=int(getattr(request.module, "NODES", 4)))
    try:
        yield box
    finally:
        box.down()


@pytest.fixture(scope="module")
def dra_box(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """A sandbox for one module whose fake nodes offer GPUs through DRA, as the module's
    ``DRA_SANDBOX`` asks: keywords of :func:`start_sandbox`, ``gpu_model`` among them."""
    settings = getattr(request.module, "DRA_SANDBOX", None)
    if not isinstance(settings, dict) or not isinstance(settings.get("gpu_model"), GpuModel) \
            or not settings["gpu_model"].has_dra_nodes:
        raise pytest.UsageError(f"{request.module.__name__}: DRA_SANDBOX must give "
                                f"start_sandbox's keywords with a DRA gpu_model, not {settings!r}")
    box = start_sandbox(tmp_path_factory.mktemp("dra"), **settings)
    try:
        yield box
    finally:
        box.down()


@pytest.fixture()
def real_ns(real_box: Sandbox) -> Iterator[str]:
    """A fresh namespace per test in :func:`real_box`."""
    with scratch_namespace(real_box.connection(), "op") as name:
        yield name


_NAMESPACES = itertools.count()


@pytest.fixture()
def namespace(sandbox: Sandbox) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards so capacity frees up."""
    with scratch_namespace(sandbox.connection(), "e2e") as name:
        yield name


def load_example(relative: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((SHARED / "examples" / relative).read_text())
            if isinstance(d, dict)]


def pods_in(conn: Connection, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = conn.request(
        "GET", f"/api/v1/namespaces/{namespace}/pods").get("items", [])
    return items


def wait_until(check: Callable[[], bool], *, timeout: float = 30.0,
               interval: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    return check()


def bound(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p.get("spec", {}).get("nodeName")]


def scheduled_message(pod: dict[str, Any]) -> str:
    for cond in pod.get("status", {}).get("conditions", []) or []:
        if cond.get("type") == "PodScheduled":
            return str(cond.get("message", ""))
    return ""


def running(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods KWOK reports Running and Ready."""
    return [p for p in pods if p.get("status", {}).get("phase") == "Running"
            and any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in p["status"].get("conditions", []) or [])]


def whole(conn: Connection, namespace: str, pods: int) -> bool:
    """Exactly ``pods`` pods in the namespace, every one bound, Running and Ready."""
    now = pods_in(conn, namespace)
    return len(now) == pods and len(running(now)) == pods and len(bound(now)) == pods


def describe(conn: Connection, namespace: str) -> list[tuple[str, str | None, str | None]]:
    """Each pod's name, node and phase: what a failed wait shows."""
    return [(p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase"))
            for p in pods_in(conn, namespace)]


@contextlib.contextmanager
def scratch_namespace(conn: Connection, prefix: str) -> Iterator[str]:
    """A namespace for one test, deleted afterwards so capacity frees up.

    The namespace goes first: a terminating namespace admits no new pod, so no Job,
    ReplicaSet or operator refills what the test made. Its pods are then deleted at once (the
    namespace controller would get there too, only slower).
    """
    name = f"{prefix}-{os.getpid()}-{next(_NAMESPACES)}"
    conn.request("POST", "/api/v1/namespaces", body={"metadata": {"name": name}})
    yield name
    with contextlib.suppress(NotFound):
        conn.request("DELETE", f"/api/v1/namespaces/{name}")
    delete_pods(conn, name)
    left = [] if wait_until(lambda: not pods_in(conn, name), timeout=60) else pods_in(conn, name)
    assert not left, f"pods outlived namespace {name}: {[p['metadata']['name'] for p in left]}"


def of(pods: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """The pods of JobSet ``name``."""
    return [p for p in pods
            if p["metadata"].get("labels", {}).get("jobset.sigs.k8s.io/jobset-name") == name]


def where(pods: list[dict[str, Any]]) -> list[tuple[str, str | None, str | None]]:
    """Each pod's name, node and phase: what a failed assertion shows."""
    return [(p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase"))
            for p in pods]


def claims(box: Sandbox, namespace: str) -> list[dict[str, Any]]:
    """The namespace's ResourceClaims."""
    found = box.connection().request(
        "GET", f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims")
    items: list[dict[str, Any]] = found.get("items", [])
    return items


def allocated(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The claims among ``items`` that are allocated."""
    return [c for c in items if (c.get("status") or {}).get("allocation")]


def stays_unbound(box: Sandbox, namespace: str, *, seconds: float, claims_allocated: int,
                  jobset: str | None = None) -> None:
    """Assert, every half second for ``seconds``, that no pod of ``namespace`` (of JobSet
    ``jobset`` only, when named) is bound and that exactly ``claims_allocated`` of the
    namespace's ResourceClaims are allocated: a gang that does not fit waits whole, its own
    claims left unallocated."""
    conn = box.connection()
    settle = time.monotonic() + seconds
    while time.monotonic() < settle:
        pods = pods_in(conn, namespace)
        assert not bound(pods if jobset is None else of(pods, jobset)), where(pods)
        assert len(allocated(claims(box, namespace))) == claims_allocated
        time.sleep(0.5)


def delete_pods(conn: Connection, namespace: str) -> None:
    for pod in pods_in(conn, namespace):
        with contextlib.suppress(NotFound):
            conn.request("DELETE",
                         f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}",
                         body={"gracePeriodSeconds": 0})


__all__ = ["Submitted", "allocated", "bound", "claims", "delete_pods", "describe", "load_example",
           "of", "pods_in", "running", "scheduled_message", "scratch_namespace", "start_sandbox",
           "stays_unbound", "submit", "wait_until", "where", "whole"]
