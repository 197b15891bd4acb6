"""Gangs under the real kube-scheduler with Muster as its extender: all or nothing, for real.

Each test asserts on API state (which pods have ``spec.nodeName``), never on Muster's own word.
The session sandbox has 4 nodes x 8 GPUs; each test's namespace is emptied afterwards. These
tests use STAND-INS for the JobSet and LWS operators (``extender.sandbox.controllers``, hence
the module's name): they make the Jobs (whose pods the real Job controller makes) and the LWS
pods, and the tests that order the pods themselves (races, restarts, chaos) make them from
``children()`` with Jobs the Job controller leaves alone, which a real operator would not
allow. What the real operators do is tested in ``test_real_*.py`` and
``test_staged_gangs_with_real_operators.py``.
"""

from __future__ import annotations

import copy
import time
import urllib.error
import urllib.request
from typing import Any

import orjson
import pytest

from extender.core.workloads.catalog import Catalog
from extender.core.workloads.workload import resolve_workload
from extender.kube.client import Connection
from extender.sandbox.controllers import adopt, children
from extender.sandbox.sandbox import Sandbox
from extender.sandbox.submit import create, submit
from tests.e2e.conftest import bound, pods_in, scheduled_message, start_sandbox, wait_until

pytestmark = pytest.mark.e2e


def jobset(name: str, namespace: str, *groups: tuple[str, int, int]) -> dict[str, Any]:
    """A JobSet with one replicatedJob per ``(name, pods, gpus per pod)``."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicatedJobs": [
            {"name": rj, "replicas": 1, "template": {"spec": {
                "parallelism": pods, "completions": pods,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{
                    "name": "main", "image": "registry.example/train:1",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)},
                                  "requests": {"cpu": "1"}}}]}}}}}
            for rj, pods, gpus in groups]},
    }


def bare_pod(name: str, namespace: str, gpus: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [{"name": "main", "image": "registry.example/serve:1",
                                     "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def names(pods: list[dict[str, Any]]) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods)


def of_workload(pods: list[dict[str, Any]], workload: str) -> list[dict[str, Any]]:
    return [p for p in pods
            if p["metadata"].get("labels", {}).get("jobset.sigs.k8s.io/jobset-name") == workload]


def stays(conn: Connection, namespace: str, check: Any, seconds: float) -> bool:
    """``check(pods)`` holds at every look for ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not check(pods_in(conn, namespace)):
            return False
        time.sleep(0.5)
    return True


def staged(conn: Connection, workload: dict[str, Any],
           catalog: Catalog) -> tuple[list[dict[str, Any]], dict[tuple[str, str], str]]:
    """Create the workload and its Jobs, but not its pods: the test creates those itself,
    in the order it needs. Returns the pods and the Job UIDs to :func:`adopt` them with."""
    sub = submit(conn, workload, catalog, with_children=False)
    intermediates, pods = children(sub.workload, sub.tree, catalog.require(sub.workload))
    uids = {}
    for item in intermediates:
        done = create(conn, item, "jobs")
        uids[(done["kind"], done["metadata"]["name"])] = done["metadata"]["uid"]
    return pods, uids


def test_a_stand_in_jobset_gang_that_fits_is_bound_completely(sandbox: Sandbox, namespace: str,
                                              catalog: Catalog) -> None:
    conn = sandbox.connection()
    submit(conn, jobset("story", namespace, ("leader", 1, 4), ("workers", 2, 4)), catalog)
    assert wait_until(lambda: len(bound(pods_in(conn, namespace))) == 3, timeout=60)


def test_a_gang_too_big_for_the_cluster_has_no_member_bound_and_says_why(
        sandbox: Sandbox, namespace: str, catalog: Catalog) -> None:
    conn = sandbox.connection()
    # 5 pods x 8 GPUs on 4 nodes x 8 GPUs: 4 would fit one by one; none may bind.
    submit(conn, jobset("huge", namespace, ("workers", 5, 8)), catalog)
    assert wait_until(lambda: all(scheduled_message(p) for p in pods_in(conn, namespace)),
                      timeout=30)
    assert stays(conn, namespace, lambda pods: not bound(pods), seconds=8)
    message = scheduled_message(pods_in(conn, namespace)[0])
    assert "gang" in message and "4 of 5 pods fit" in message, message


def test_two_gangs_competing_for_room_for_one_end_one_bound_whole_one_waiting_whole(
        sandbox: Sandbox, namespace: str, catalog: Catalog) -> None:
    """scheduler-plugins#117: members of two gangs interleave; neither may deadlock."""
    conn = sandbox.connection()
    made = []
    for name in ("alpha", "beta"):  # 3 x 8 GPUs each; 4 x 8 GPUs in the cluster
        sub = submit(conn, jobset(name, namespace, ("workers", 3, 8)), catalog,
                     with_children=False)
        made.append(children(sub.workload, sub.tree, catalog.require(sub.workload)))
    uids: dict[tuple[str, str], str] = {}
    for intermediates, _ in made:
        for item in intermediates:
            done = create(conn, item, "jobs")
            uids[(done["kind"], done["metadata"]["name"])] = done["metadata"]["uid"]
    for a, b in zip(made[0][1], made[1][1], strict=True):  # interleave the members
        create(conn, adopt(copy.deepcopy(a), uids), "pods")
        create(conn, adopt(copy.deepcopy(b), uids), "pods")

    def one_whole_one_none(pods: list[dict[str, Any]]) -> bool:
        counts = sorted(len(bound(of_workload(pods, w))) for w in ("alpha", "beta"))
        return counts == [0, 3]

    assert wait_until(lambda: one_whole_one_none(pods_in(conn, namespace)), timeout=60)
    assert stays(conn, namespace, one_whole_one_none, seconds=6)


def test_non_gang_pods_do_not_steal_capacity_reserved_for_an_admitted_gang(
        sandbox: Sandbox, namespace: str, catalog: Catalog) -> None:
    conn = sandbox.connection()
    pods, uids = staged(conn, jobset("held", namespace, ("workers", 2, 8)), catalog)
    # The first member arrives alone: Muster plans the whole gang (2 nodes) and holds it.
    create(conn, adopt(pods[0], uids), "pods")
    time.sleep(2)
    # Three whole-node pods that are not in any gang: only the 2 unreserved nodes may take them.
    for i in range(3):
        create(conn, bare_pod(f"greedy-{i}", namespace, 8), "pods")
    assert wait_until(lambda: len(bound([p for p in pods_in(conn, namespace)
                                         if p["metadata"]["name"].startswith("greedy")])) == 2,
                      timeout=30)
    create(conn, adopt(pods[1], uids), "pods")
    assert wait_until(lambda: len(bound(of_workload(pods_in(conn, namespace), "held"))) == 2,
                      timeout=30)
    greedy = [p for p in pods_in(conn, namespace) if p["metadata"]["name"].startswith("greedy")]
    assert len(bound(greedy)) == 2


def test_a_stand_in_leaderworkerset_with_two_groups_is_two_gangs(sandbox: Sandbox, namespace: str,
                                                        catalog: Catalog) -> None:
    conn = sandbox.connection()
    container = {"name": "vllm", "image": "registry.example/vllm:1",
                 "resources": {"limits": {"nvidia.com/gpu": "4"}}}
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
           "metadata": {"name": "serve", "namespace": namespace},
           "spec": {"replicas": 2, "leaderWorkerTemplate": {
               "size": 3, "workerTemplate": {"spec": {"containers": [container]}}}}}
    sub = submit(conn, lws, catalog)
    assert [(g.pods, g.min_member) for g in sub.tree.gangs] == [(3, 3), (3, 3)]
    assert wait_until(lambda: len(bound(pods_in(conn, namespace))) == 6, timeout=60)
    by_group: dict[str, set[str]] = {}
    for pod in pods_in(conn, namespace):
        group = pod["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"]
        by_group.setdefault(group, set()).add(pod["spec"]["nodeName"])
    assert sorted(by_group) == ["0", "1"]


def test_muster_killed_and_restarted_in_the_middle_of_a_gang_ends_all_or_none(
        sandbox: Sandbox, namespace: str, catalog: Catalog) -> None:
    conn = sandbox.connection()
    pods, uids = staged(conn, jobset("crash", namespace, ("workers", 3, 8)), catalog)
    for pod in pods[:2]:
        create(conn, adopt(pod, uids), "pods")
    time.sleep(2)  # two members planned and held at the bind barrier
    sandbox.kill("muster")
    time.sleep(2)
    assert not bound(pods_in(conn, namespace))  # the barrier never released a partial gang
    sandbox.start_muster()
    create(conn, adopt(pods[2], uids), "pods")
    assert wait_until(lambda: len(bound(pods_in(conn, namespace))) == 3, timeout=90)


def test_a_bind_barrier_timeout_releases_everything(tmp_path: Any, catalog: Catalog) -> None:
    box = start_sandbox(tmp_path, nodes=2, bind_timeout=4.0, plan_ttl=6.0)
    try:
        conn = box.connection()
        conn.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "t"}})
        pods, uids = staged(conn, jobset("short", "t", ("workers", 2, 8)), catalog)
        create(conn, adopt(pods[0], uids), "pods")  # its partner never comes
        time.sleep(4.0 + 6.0 + 2.0)
        assert not bound(pods_in(conn, "t"))
        # Everything the lone member held is free again: two whole-node pods both bind.
        for i in range(2):
            create(conn, bare_pod(f"after-{i}", "t", 8), "pods")
        assert wait_until(lambda: names(bound(pods_in(conn, "t"))) == ["after-0", "after-1"],
                          timeout=45)
    finally:
        box.down()


def test_pods_that_reached_the_scheduler_before_their_workload_bind_once_it_is_observed(
        tmp_path: Any, catalog: Catalog) -> None:
    """Informers lag: a gang's pods may reach kube-scheduler before Muster has seen their
    JobSet, and are turned away. A JobSet or Job appearing is no event kube-scheduler
    watches, so without Muster's requeue they would sit for its five-minute flush.

    The lag is played by creating the pods before their owners; the real garbage collector
    would delete pods whose owners do not exist at once, so this sandbox runs without
    kube-controller-manager."""
    box = start_sandbox(tmp_path, nodes=2, controller_manager=False)
    try:
        conn = box.connection()
        namespace = "t"
        conn.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
        workload = jobset("late", namespace, ("workers", 2, 4))
        descriptor = catalog.require(workload)
        unborn = {**workload, "metadata": {**workload["metadata"], "uid": "not-created-yet"}}
        intermediates, pods = children(unborn, resolve_workload(unborn, descriptor),
                                       descriptor)
        owners = {(i["kind"], i["metadata"]["name"]): "not-created-yet" for i in intermediates}
        for pod in pods:
            create(conn, adopt(pod, owners), "pods")
        assert wait_until(lambda: all("not observed yet" in scheduled_message(p)
                                      for p in pods_in(conn, namespace)), timeout=30)
        time.sleep(2)  # both are in kube-scheduler's unschedulable queue now
        staged(conn, workload, catalog)  # the JobSet and its Job, no pod, no node change
        assert wait_until(lambda: len(bound(pods_in(conn, namespace))) == 2, timeout=30), [
            scheduled_message(p) for p in pods_in(conn, namespace)]
        requeued = [c for p in pods_in(conn, namespace)
                    for c in p.get("status", {}).get("conditions", [])
                    if c["type"] == "muster.dev/Gang"]
        assert requeued and all(c["reason"] == "Requeued" for c in requeued)
    finally:
        box.down()


def _muster(box: Sandbox, method: str, path: str, body: object = None) -> tuple[int, Any]:
    info = box.info()
    assert info is not None and info.muster_url
    request = urllib.request.Request(info.muster_url + path, method=method,
                                     data=None if body is None else orjson.dumps(body))
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, orjson.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, orjson.loads(err.read())


def test_while_the_api_server_is_away_muster_fails_closed_then_recovers(
        tmp_path: Any, catalog: Catalog) -> None:
    box = start_sandbox(tmp_path, nodes=2)
    try:
        back = box.outage("kube-apiserver")
        assert wait_until(lambda: _muster(box, "GET", "/readyz")[0] == 503, timeout=30)
        status, answer = _muster(box, "POST", "/filter", {
            "Pod": bare_pod("during", "t", 1), "NodeNames": ["gpu-node-0", "gpu-node-1"]})
        assert status == 200  # the protocol: an answer, never an HTTP failure
        assert answer["NodeNames"] == [] and "not trusted" in answer["Error"], answer
        back()
        assert wait_until(lambda: _muster(box, "GET", "/readyz")[0] == 200, timeout=60)
        conn = box.connection()
        conn.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "t"}})
        submit(conn, jobset("after", "t", ("workers", 2, 8)), catalog)
        assert wait_until(lambda: len(bound(pods_in(conn, "t"))) == 2, timeout=60)
    finally:
        box.down()
