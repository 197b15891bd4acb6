"""The real LeaderWorkerSet controller (sigs.k8s.io/lws v0.7.0) in the sandbox.

No test here creates a pod: ``kubectl apply`` of an upstream LeaderWorkerSet is all, and the
release's controller and webhooks (served on loopback with the sandbox's certificates) do the
rest. The LWS controller makes the leader StatefulSet, kube-controller-manager its leader
pods, the LWS pod controller one worker StatefulSet per leader pod (startupPolicy
LeaderCreated, the default: no example in ../shared/examples asks for LeaderReady), Muster
and kube-scheduler bind each group as one gang, KWOK runs them.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.core.workloads.catalog import Catalog
from extender.sandbox.sandbox import Sandbox
from extender.sandbox.submit import submit
from tests.e2e.conftest import (
    SHARED,
    describe,
    load_example,
    pods_in,
    wait_until,
    whole,
)
from tests.e2e.test_real_pod_lifecycle import kubectl, muster_gangs

pytestmark = pytest.mark.e2e
REAL_OPERATORS = ("lws",)

VLLM = SHARED / "examples" / "lws" / "lws__docs__examples__vllm__GPU__lws.yaml"
GROUP = "leaderworkerset.sigs.k8s.io/group-index"
WORKER = "leaderworkerset.sigs.k8s.io/worker-index"


def groups(pods: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """``group-index -> {worker-index: pod uid}`` of the pods."""
    found: dict[str, dict[str, str]] = {}
    for pod in pods:
        labels = pod["metadata"]["labels"]
        found.setdefault(labels[GROUP], {})[labels[WORKER]] = pod["metadata"]["uid"]
    return found


def test_an_upstream_leaderworkerset_applied_with_kubectl_alone_runs_every_group_whole(
        real_box: Sandbox, real_ns: str) -> None:
    """vLLM's GPU example: 2 groups of a leader and a worker, 8 GPUs each, on 4 x 8 GPUs."""
    kubectl(real_box, "apply", "-n", real_ns, "-f", str(VLLM))
    conn = real_box.connection()
    assert wait_until(lambda: whole(conn, real_ns, 4), timeout=90), describe(conn, real_ns)
    pods = pods_in(conn, real_ns)
    assert len({p["spec"]["nodeName"] for p in pods}) == 4  # 8 GPUs each: one pod per node
    assert groups(pods).keys() == {"0", "1"}
    assert all(g.keys() == {"0", "1"} for g in groups(pods).values())
    # The real controllers' objects: a leader StatefulSet, one worker StatefulSet per leader
    # pod (owned by it), and pods owned by those StatefulSets.
    sets = {s["metadata"]["name"]: s for s in
            conn.request("GET", f"/apis/apps/v1/namespaces/{real_ns}/statefulsets")["items"]}
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
    gangs = muster_gangs(real_box)
    assert sorted((key.rsplit("/", 1)[-1], g["minMember"], g["bound"])
                  for key, g in gangs.items() if key.startswith(f"{real_ns}/")) == [
        ("group-0", 2, 2), ("group-1", 2, 2)], gangs


def test_a_deleted_bound_pod_makes_the_real_controller_recreate_its_group_which_binds_whole(
        real_box: Sandbox, real_ns: str) -> None:
    """RecreateGroupOnPodRestart (the example's policy): a worker deleted, the LWS controller
    deletes its leader, the garbage collector the group's worker StatefulSet, and the group
    comes back as new pods, bound whole; the other group is left alone."""
    kubectl(real_box, "apply", "-n", real_ns, "-f", str(VLLM))
    conn = real_box.connection()
    assert wait_until(lambda: whole(conn, real_ns, 4), timeout=90), describe(conn, real_ns)
    before = groups(pods_in(conn, real_ns))
    worker = next(p["metadata"]["name"] for p in pods_in(conn, real_ns)
                  if p["metadata"]["labels"][GROUP] == "1"
                  and p["metadata"]["labels"][WORKER] == "1")
    kubectl(real_box, "delete", "pod", "-n", real_ns, worker, "--wait=false")

    def recreated() -> bool:
        now = groups(pods_in(conn, real_ns))
        return whole(conn, real_ns, 4) and now.get("1", {}).keys() == {"0", "1"} and not (
            set(now["1"].values()) & set(before["1"].values()))

    assert wait_until(recreated, timeout=90), describe(conn, real_ns)
    after = groups(pods_in(conn, real_ns))
    assert after["0"] == before["0"], "the other group was recreated too"
    events = conn.request("GET", f"/api/v1/namespaces/{real_ns}/events")["items"]
    assert any(e.get("reason") == "RecreateGroupOnPodRestart" for e in events), \
        sorted({e.get("reason") for e in events})
    gang = next(g for key, g in muster_gangs(real_box).items()
                if key == f"{real_ns}/vllm/group-1")
    assert (gang["minMember"], gang["bound"]) == (2, 2)
    assert {m["uid"] for m in gang["members"]} == set(after["1"].values())


def test_submitting_an_lws_where_the_real_controller_runs_makes_no_stand_in_pods(
        real_box: Sandbox, real_ns: str, catalog: Catalog) -> None:
    """The stand-in hands over: the workload is only created, and the pods are the real
    controller's (owned by its StatefulSets), exactly replicas x size of them."""
    [sglang] = [d for d in load_example("lws/lws__docs__examples__sglang__lws.yaml")
                if d["kind"] == "LeaderWorkerSet"]
    made = submit(real_box.connection(), sglang, catalog, namespace=real_ns)
    assert made.pods == [] and made.intermediates == []
    conn = real_box.connection()
    assert wait_until(lambda: whole(conn, real_ns, 4), timeout=90), describe(conn, real_ns)
    pods = pods_in(conn, real_ns)
    assert {r["kind"] for p in pods for r in p["metadata"]["ownerReferences"]} == \
        {"StatefulSet"}
    assert not any("muster.dev/sandbox-workload" in p["metadata"]["labels"] for p in pods)

