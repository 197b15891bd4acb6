"""The real LeaderWorkerSet controller (sigs.k8s.io/lws v0.7.0) in the sandbox.

No test here creates a pod: ``kubectl apply`` of an upstream LeaderWorkerSet is all, and the
release's controller and webhooks (served on loopback with the sandbox's certificates) do the
rest. The LWS controller makes the leader StatefulSet, kube-controller-manager its leader
pods, the LWS pod controller one worker StatefulSet per leader pod (startupPolicy
LeaderCreated, the default: no example in ../shared/examples asks for LeaderReady), Muster
and kube-scheduler bind each group as one gang, KWOK runs them.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator
from typing import Any

import pytest

from extender.core.catalog import Catalog
from extender.kube.client import Connection, NotFound
from extender.sandbox.config import Ports
from extender.sandbox.sandbox import Sandbox, SandboxSpec
from extender.sandbox.submit import submit
from tests.e2e.conftest import SHARED, bound, delete_pods, load_example, pods_in, wait_until
from tests.e2e.test_real_pod_lifecycle import kubectl, muster_gangs, running

pytestmark = pytest.mark.e2e

VLLM = SHARED / "examples" / "lws" / "lws__docs__examples__vllm__GPU__lws.yaml"
GROUP = "leaderworkerset.sigs.k8s.io/group-index"
WORKER = "leaderworkerset.sigs.k8s.io/worker-index"
_NAMESPACES = itertools.count()


@pytest.fixture(scope="module")
def lws_box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """4 nodes x 8 GPUs with the real LWS controller (and so no LWS stand-in)."""
    box = Sandbox(SandboxSpec(directory=tmp_path_factory.mktemp("lws"), nodes=4, ports=Ports(),
                              bind_timeout=15.0, lws=True), say=lambda _m: None)
    box.up()
    try:
        yield box
    finally:
        box.down()


@pytest.fixture()
def ns(lws_box: Sandbox) -> Iterator[str]:
    """A namespace per test; afterwards its LeaderWorkerSets go first (no controller then
    refills a group), then its pods, so the next test has every GPU."""
    name = f"lws-{os.getpid()}-{next(_NAMESPACES)}"
    conn = lws_box.connection()
    conn.request("POST", "/api/v1/namespaces", body={"metadata": {"name": name}})
    yield name
    with contextlib.suppress(NotFound):
        conn.request("DELETE", f"/api/v1/namespaces/{name}")
    delete_pods(conn, name)
    assert wait_until(lambda: not pods_in(conn, name), timeout=60), \
        [p["metadata"]["name"] for p in pods_in(conn, name)]


def groups(pods: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """``group-index -> {worker-index: pod uid}`` of the pods."""
    found: dict[str, dict[str, str]] = {}
    for pod in pods:
        labels = pod["metadata"]["labels"]
        found.setdefault(labels[GROUP], {})[labels[WORKER]] = pod["metadata"]["uid"]
    return found


def whole(conn: Connection, namespace: str, pods: int) -> bool:
    now = pods_in(conn, namespace)
    return len(now) == pods and len(running(now)) == pods and len(bound(now)) == pods


def describe(conn: Connection, namespace: str) -> list[tuple[str, str | None, str | None]]:
    return [(p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase"))
            for p in pods_in(conn, namespace)]


def test_an_upstream_leaderworkerset_applied_with_kubectl_alone_runs_every_group_whole(
        lws_box: Sandbox, ns: str) -> None:
    """vLLM's GPU example: 2 groups of a leader and a worker, 8 GPUs each, on 4 x 8 GPUs."""
    kubectl(lws_box, "apply", "-n", ns, "-f", str(VLLM))
    conn = lws_box.connection()
    assert wait_until(lambda: whole(conn, ns, 4), timeout=90), describe(conn, ns)
    pods = pods_in(conn, ns)
    assert len({p["spec"]["nodeName"] for p in pods}) == 4  # 8 GPUs each: one pod per node
    assert groups(pods).keys() == {"0", "1"}
    assert all(g.keys() == {"0", "1"} for g in groups(pods).values())
    # The real controllers' objects: a leader StatefulSet, one worker StatefulSet per leader
    # pod (owned by it), and pods owned by those StatefulSets.
    sets = {s["metadata"]["name"]: s for s in
            conn.request("GET", f"/apis/apps/v1/namespaces/{ns}/statefulsets")["items"]}
    assert sorted(sets) == ["vllm", "vllm-0", "vllm-1"]
    assert [r["kind"] for r in sets["vllm"]["metadata"]["ownerReferences"]] == \
        ["LeaderWorkerSet"]
    assert {r["kind"] for name in ("vllm-0", "vllm-1")
            for r in sets[name]["metadata"]["ownerReferences"]} == {"Pod"}
    assert {r["kind"] for p in pods for r in p["metadata"]["ownerReferences"]} == \
        {"StatefulSet"}
    # The release's pod webhook ran: it wrote the worker index and the LWS environment.
    env = {e["name"]: e.get("value") for p in pods for c in p["spec"]["containers"]
           for e in c.get("env", [])}
    assert env.get("LWS_GROUP_SIZE") == "2" and "LWS_LEADER_ADDRESS" in env
    gangs = muster_gangs(lws_box)
    assert sorted((key.rsplit("/", 1)[-1], g["minMember"], g["bound"])
                  for key, g in gangs.items() if key.startswith(f"{ns}/")) == [
        ("group-0", 2, 2), ("group-1", 2, 2)], gangs


def test_a_deleted_bound_pod_makes_the_real_controller_recreate_its_group_which_binds_whole(
        lws_box: Sandbox, ns: str) -> None:
    """RecreateGroupOnPodRestart (the example's policy): a worker deleted, the LWS controller
    deletes its leader, the garbage collector the group's worker StatefulSet, and the group
    comes back as new pods, bound whole; the other group is left alone."""
    kubectl(lws_box, "apply", "-n", ns, "-f", str(VLLM))
    conn = lws_box.connection()
    assert wait_until(lambda: whole(conn, ns, 4), timeout=90), describe(conn, ns)
    before = groups(pods_in(conn, ns))
    worker = next(p["metadata"]["name"] for p in pods_in(conn, ns)
                  if p["metadata"]["labels"][GROUP] == "1"
                  and p["metadata"]["labels"][WORKER] == "1")
    kubectl(lws_box, "delete", "pod", "-n", ns, worker, "--wait=false")

    def recreated() -> bool:
        now = groups(pods_in(conn, ns))
        return whole(conn, ns, 4) and now.get("1", {}).keys() == {"0", "1"} and not (
            set(now["1"].values()) & set(before["1"].values()))

    assert wait_until(recreated, timeout=90), describe(conn, ns)
    after = groups(pods_in(conn, ns))
    assert after["0"] == before["0"], "the other group was recreated too"
    events = conn.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]
    assert any(e.get("reason") == "RecreateGroupOnPodRestart" for e in events), \
        sorted({e.get("reason") for e in events})
    gang = next(g for key, g in muster_gangs(lws_box).items()
                if key == f"{ns}/vllm/group-1")
    assert (gang["minMember"], gang["bound"]) == (2, 2)
    assert {m["uid"] for m in gang["members"]} == set(after["1"].values())


def test_submitting_an_lws_where_the_real_controller_runs_makes_no_stand_in_pods(
        lws_box: Sandbox, ns: str, catalog: Catalog) -> None:
    """The stand-in hands over: the workload is only created, and the pods are the real
    controller's (owned by its StatefulSets), exactly replicas x size of them."""
    [sglang] = [d for d in load_example("lws/lws__docs__examples__sglang__lws.yaml")
                if d["kind"] == "LeaderWorkerSet"]
    made = submit(lws_box.connection(), sglang, catalog, namespace=ns)
    assert made.pods == [] and made.intermediates == []
    conn = lws_box.connection()
    assert wait_until(lambda: whole(conn, ns, 4), timeout=90), describe(conn, ns)
    pods = pods_in(conn, ns)
    assert {r["kind"] for p in pods for r in p["metadata"]["ownerReferences"]} == \
        {"StatefulSet"}
    assert not any("muster.dev/sandbox-workload" in p["metadata"]["labels"] for p in pods)

