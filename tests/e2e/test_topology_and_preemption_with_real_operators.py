"""Topology domains and gang-level preemption, with the real JobSet and LWS controllers.

Eight KWOK nodes of 8 GPUs in two racks of four (label ``muster.dev/rack``). No test creates
a pod: ``kubectl apply`` of the workloads is all; the operators make the pods, Muster and
kube-scheduler place them, KWOK runs them and completes their deletions.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import yaml

from extender.kube.client import NotFound
from extender.sandbox.nodes import RACK_LABEL
from extender.sandbox.sandbox import Sandbox
from tests.e2e.conftest import bound, describe, pods_in, scheduled_message, wait_until, whole
from tests.e2e.test_real_pod_lifecycle import kubectl

pytestmark = pytest.mark.e2e
REAL_OPERATORS = ("jobset", "lws")
NODES = 8  # two racks of 4 x 8 GPUs

EXCLUSIVE = "leaderworkerset.sigs.k8s.io/exclusive-topology"
GROUP = "leaderworkerset.sigs.k8s.io/group-index"
JOBSET = "jobset.sigs.k8s.io/jobset-name"


def apply(box: Sandbox, obj: dict[str, Any]) -> None:
    kubectl(box, "apply", "-f", "-", stdin=yaml.safe_dump(obj))


def gpu_container(gpus: int = 8) -> dict[str, Any]:
    return {"name": "main", "image": "trainer", "resources": {"limits": {"nvidia.com/gpu": gpus}}}


def exclusive_lws(namespace: str, name: str, *, replicas: int, size: int) -> dict[str, Any]:
    """An LWS whose every group must run alone in one rack (LWS exclusive-topology)."""
    pod = {"spec": {"containers": [gpu_container()]}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": {EXCLUSIVE: RACK_LABEL}},
            "spec": {"replicas": replicas,
                     "leaderWorkerTemplate": {"size": size, "leaderTemplate": pod,
                                              "workerTemplate": pod}}}


def node_racks(box: Sandbox) -> dict[str, str]:
    nodes = box.connection().request("GET", "/api/v1/nodes")["items"]
    return {n["metadata"]["name"]: n["metadata"]["labels"][RACK_LABEL] for n in nodes}


def racks_by(pods: list[dict[str, Any]], label: str,
             racks: dict[str, str]) -> dict[str, set[str]]:
    """The racks the pods run in, per value of their ``label`` (a group, a subgroup)."""
    out: dict[str, set[str]] = {}
    for pod in pods:
        out.setdefault(pod["metadata"]["labels"][label], set()).add(
            racks[pod["spec"]["nodeName"]])
    return out


def live(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Bound pods not being deleted."""
    return [p for p in bound(pods) if not p["metadata"].get("deletionTimestamp")]


def events(box: Sandbox, namespace: str, reason: str) -> list[str]:
    items = box.connection().request("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    return [e.get("message", "") for e in items if e.get("reason") == reason]


def test_an_exclusive_topology_lws_group_no_rack_holds_waits_whole_and_names_the_racks(
        real_box: Sandbox, real_ns: str) -> None:
    """One group of 5 x 8 GPUs: 40 GPUs fit the cluster (64 free) but no rack (32 each). The
    LWS controller creates an exclusive group's workers only once its leader is scheduled,
    so the leader alone is there: it waits, bound nowhere, and says why."""
    conn = real_box.connection()
    apply(real_box, exclusive_lws(real_ns, "wide", replicas=1, size=5))
    assert wait_until(lambda: bool(pods_in(conn, real_ns)) and all(
        "rack" in scheduled_message(p) for p in pods_in(conn, real_ns)), timeout=60), \
        [(p["metadata"]["name"], scheduled_message(p)) for p in pods_in(conn, real_ns)]
    assert not wait_until(lambda: bool(bound(pods_in(conn, real_ns))), timeout=8), \
        describe(conn, real_ns)
    why = scheduled_message(pods_in(conn, real_ns)[0])
    assert "gang" in why and "no single muster.dev/rack domain holds it" in why, why


def priority_class(box: Sandbox, name: str, value: int) -> None:
    with contextlib.suppress(NotFound):
        box.connection().request("DELETE",
                                 f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")
    apply(box, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": name}, "value": value})


def jobset(namespace: str, name: str, *, pods: int, priority: str) -> dict[str, Any]:
    """One replicated Job of ``pods`` pods of 8 GPUs: one gang."""
    template = {"spec": {"priorityClassName": priority, "restartPolicy": "Never",
                         "containers": [gpu_container()]}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {
                "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 10,
                         "template": template}}}]}}


def by_jobset(pods: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        out.setdefault(pod["metadata"]["labels"].get(JOBSET, ""), []).append(pod)
    return out


def test_a_high_priority_jobset_evicts_exactly_enough_whole_low_priority_jobsets_or_none(
        real_box: Sandbox, real_ns: str) -> None:
    conn = real_box.connection()
    priority_class(real_box, "muster-e2e-low", 10)
    priority_class(real_box, "muster-e2e-high", 1000)
    lows = [f"low-{i}" for i in range(4)]
    for name in lows:  # 4 gangs of 2 x 8 GPUs fill the 8 nodes
        apply(real_box, jobset(real_ns, name, pods=2, priority="muster-e2e-low"))
    assert wait_until(lambda: len(live(pods_in(conn, real_ns))) == 8, timeout=120), \
        describe(conn, real_ns)
    first = {js: {p["metadata"]["uid"] for p in ps}
             for js, ps in by_jobset(pods_in(conn, real_ns)).items()}

    # Larger than the cluster: no plan lets it fit whole, so nothing is evicted.
    apply(real_box, jobset(real_ns, "huge", pods=9, priority="muster-e2e-high"))
    assert wait_until(lambda: bool(events(real_box, real_ns, "GangNotPreempting")),
                      timeout=60), describe(conn, real_ns)
    assert not wait_until(lambda: len(live(pods_in(conn, real_ns))) < 8, timeout=6)
    assert {js: {p["metadata"]["uid"] for p in ps} for js, ps in
            by_jobset(live(pods_in(conn, real_ns))).items()} == first
    kubectl(real_box, "delete", "jobset", "huge", "-n", real_ns, "--wait=true")
    assert wait_until(lambda: "huge" not in by_jobset(pods_in(conn, real_ns)), timeout=60)

    # Three nodes' worth: two whole low gangs (four nodes) go, the other two are untouched.
    apply(real_box, jobset(real_ns, "high", pods=3, priority="muster-e2e-high"))
    assert wait_until(lambda: len(live(by_jobset(pods_in(conn, real_ns)).get("high", []))) == 3,
                      timeout=120), describe(conn, real_ns)
    plan = events(real_box, real_ns, "GangPreempting")[0]
    assert "2 whole victims" in plan, plan
    settled = by_jobset(pods_in(conn, real_ns))
    kept = [js for js in lows if {p["metadata"]["uid"] for p in live(settled.get(js, []))}
            == first[js]]
    evicted = [js for js in lows if not {p["metadata"]["uid"] for p in settled.get(js, [])}
               & first[js]]
    assert len(kept) == 2 and len(evicted) == 2, (kept, evicted, describe(conn, real_ns))
    # The victims' Jobs made new pods; with one node free they wait whole, none bound.
    assert not wait_until(lambda: any(live(by_jobset(pods_in(conn, real_ns)).get(js, []))
                                      for js in evicted), timeout=6), describe(conn, real_ns)

    # `kubectl get gangs` says each gang's state: the preemptor and the kept ones bound, the
    # victims waiting (their recreated pods do not fit whole) with Muster's reason.
    def states() -> dict[str, tuple[str, str]]:
        listed = yaml.safe_load(kubectl(real_box, "get", "gangs", "-n", real_ns, "-o", "yaml"))
        return {g["metadata"]["name"]: (g["status"]["state"], g["status"]["reason"])
                for g in listed["items"]}

    want = {f"jobset-{js}": "Bound" for js in [*kept, "high"]} | {
        f"jobset-{js}": "Waiting" for js in evicted}
    assert wait_until(lambda: {k: v[0] for k, v in states().items()} == want, timeout=30), \
        states()
    assert all(states()[f"jobset-{js}"][1] for js in evicted), states()
    table = kubectl(real_box, "get", "gangs", "-n", real_ns)
    assert "STATE" in table and "jobset-high" in table, table


def test_each_group_of_an_exclusive_topology_lws_runs_whole_and_alone_in_its_own_rack(
        real_box: Sandbox, real_ns: str) -> None:
    """Two groups of 4 x 8 GPUs. The LWS controller creates a group's workers only once its
    leader has a node: Muster plans each group whole in a rack of its own, releases the
    leader first and holds the rack for the workers."""
    conn = real_box.connection()
    racks = node_racks(real_box)
    apply(real_box, exclusive_lws(real_ns, "racks", replicas=2, size=4))
    assert wait_until(lambda: whole(conn, real_ns, 8), timeout=120), describe(conn, real_ns)
    per_group = racks_by(pods_in(conn, real_ns), GROUP, racks)
    assert sorted(per_group) == ["0", "1"]
    assert all(len(r) == 1 for r in per_group.values()), per_group
    assert per_group["0"] != per_group["1"], per_group


SUBGROUP_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"
SUBGROUP = "leaderworkerset.sigs.k8s.io/subgroup-index"


def muster_log(box: Sandbox) -> str:
    """Muster's log lines about the JobSet that should wait (what a failed wait shows)."""
    logs = sorted(box.dir.rglob("muster*.log"))
    return "\n".join(line for log in logs for line in log.read_text().splitlines()
                     if "outside" in line)[-4000:]


def subgroup_lws(namespace: str, name: str, *, size: int, subgroup: int) -> dict[str, Any]:
    """One group whose every subgroup must run alone in one rack (LWS
    subgroup-exclusive-topology); LWS creates the leader and workers at once."""
    pod = {"spec": {"priorityClassName": "muster-e2e-low", "containers": [gpu_container()]}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": {SUBGROUP_EXCLUSIVE: RACK_LABEL}},
            "spec": {"replicas": 1,
                     "leaderWorkerTemplate": {"size": size, "workerTemplate": pod,
                                              "subGroupPolicy": {"subGroupSize": subgroup}}}}


def test_each_subgroup_of_a_subgroup_exclusive_lws_runs_whole_and_alone_in_its_own_rack(
        real_box: Sandbox, real_ns: str) -> None:
    """A group of 4 x 8 GPUs in subgroups of 2: the leader with worker 1, then workers 2-3
    (LWS's pod webhook labels each pod's subgroup-index and writes affinity to its subgroup's
    rack, anti-affinity to other subgroups'). Muster gives each subgroup a rack of its own,
    the group is bound whole, and Muster keeps both racks to it: a JobSet, which LWS's
    anti-affinity does not repel, waits whole until the group is gone (without the
    per-subgroup rule it was bound into the group's racks)."""
    conn = real_box.connection()
    racks = node_racks(real_box)
    priority_class(real_box, "muster-e2e-low", 10)  # the same for both: no preemption
    apply(real_box, subgroup_lws(real_ns, "split", size=4, subgroup=2))
    assert wait_until(lambda: whole(conn, real_ns, 4), timeout=120), describe(conn, real_ns)
    per_subgroup = racks_by(pods_in(conn, real_ns), SUBGROUP, racks)
    assert sorted(per_subgroup) == ["0", "1"], per_subgroup
    assert all(len(r) == 1 for r in per_subgroup.values()), per_subgroup
    assert per_subgroup["0"] != per_subgroup["1"], per_subgroup

    # Four nodes are free, two in each rack, but each rack is held by a subgroup: a JobSet of
    # two pods (which LWS's anti-affinity does not repel) waits whole until the group goes.
    apply(real_box, jobset(real_ns, "outside", pods=2, priority="muster-e2e-low"))

    def outside() -> list[dict[str, Any]]:
        return by_jobset(pods_in(conn, real_ns)).get("outside", [])

    assert wait_until(lambda: len(outside()) == 2 and all(
        "exclusive gang holds" in scheduled_message(p) for p in outside()), timeout=60), \
        ([(p["metadata"]["name"], scheduled_message(p)) for p in outside()],
         describe(conn, real_ns), muster_log(real_box))
    assert not bound(outside()), describe(conn, real_ns)
    kubectl(real_box, "delete", "leaderworkerset", "split", "-n", real_ns, "--wait=true")
    assert wait_until(lambda: len(live(outside())) == 2, timeout=120), describe(conn, real_ns)
