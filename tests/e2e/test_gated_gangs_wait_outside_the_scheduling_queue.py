"""Gang pods wait behind Muster's scheduling gate, not in kube-scheduler's queue, on the real
control plane with the real JobSet controller, gated either way Muster ships.

Muster's admission webhook (on loopback, installed from manifests/webhook.yaml), or the API
server's own MutatingAdmissionPolicy (manifests/gate-policy/, no call to Muster), gates
every pod the JobSet controller's Jobs create; Muster plans the gang once all its pods exist
and removes the gates of all of them together; kube-scheduler then filters and binds them
whole. A gang that cannot fit stays gated (``kubectl get pods`` shows ``SchedulingGated``),
its reason on its pods and its JobSet, until capacity is freed.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from extender.kube.client import Connection
from extender.kube.ungate import KubeUngater
from extender.sandbox.config import GateBy
from extender.sandbox.sandbox import Sandbox
from extender.state.ports import PodRef
from tests.e2e.conftest import (
    bound,
    describe,
    pods_in,
    scratch_namespace,
    start_sandbox,
    wait_until,
)
from tests.e2e.test_real_pod_lifecycle import kubectl, muster_gangs

pytestmark = pytest.mark.e2e
GATE = "muster.dev/gang"


@pytest.fixture(scope="module", params=[GateBy.WEBHOOK, GateBy.POLICY], ids=str)
def gated_box(request: pytest.FixtureRequest,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    by: GateBy = request.param
    box = start_sandbox(tmp_path_factory.mktemp(f"gating-{by}"), jobset=True, gating=True,
                        gate_by=by)
    try:
        yield box
    finally:
        box.down()


@pytest.fixture()
def ns(gated_box: Sandbox) -> Iterator[str]:
    with scratch_namespace(gated_box.connection(), "gate") as name:
        yield name


def jobset(name: str, namespace: str, *, pods: int, gpus: int = 8) -> dict[str, Any]:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {
                "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 0,
                         "template": {"spec": {
                             "schedulerName": "muster", "restartPolicy": "Never",
                             "containers": [{"name": "main", "image": "trainer",
                                             "resources": {"limits": {
                                                 "nvidia.com/gpu": gpus}}}]}}}}}]}}


def blocker(name: str) -> dict[str, Any]:
    """A bare pod (no gang, never gated) holding a whole 8-GPU node."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"schedulerName": "muster", "containers": [{
                "name": "main", "image": "hold",
                "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}


def events(conn: Connection, namespace: str, reason: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = conn.request(
        "GET", f"/api/v1/namespaces/{namespace}/events").get("items", [])
    return [e for e in items if e.get("reason") == reason]


def gates(pod: dict[str, Any]) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def statuses(box: Sandbox, namespace: str) -> dict[str, str]:
    out = kubectl(box, "get", "pods", "-n", namespace, "--no-headers")
    return {line.split()[0]: line.split()[2] for line in out.splitlines() if line.strip()}


def test_a_jobset_applied_with_kubectl_is_gated_then_ungated_together_and_bound_whole(
        gated_box: Sandbox, ns: str) -> None:
    conn = gated_box.connection()
    kubectl(gated_box, "apply", "-f", "-", stdin=yaml.safe_dump(jobset("fits", ns, pods=3)))
    assert wait_until(lambda: len(bound(pods_in(conn, ns))) == 3, timeout=90), \
        describe(conn, ns)
    pods = pods_in(conn, ns)
    assert all(gates(p) == [] for p in pods)
    # Each pod was created gated and Muster removed the gate of all three together.
    [ungated] = [e for e in events(conn, ns, "GangUngated")
                 if e["involvedObject"]["kind"] == "JobSet"]
    assert "ungating 3 members together" in ungated["message"], ungated
    # None was bound before the last of them existed (the gang was planned whole).
    created = max(p["metadata"]["creationTimestamp"] for p in pods)
    scheduled = [c["lastTransitionTime"] for p in pods for c in p["status"]["conditions"]
                 if c["type"] == "PodScheduled" and c["status"] == "True"]
    assert len(scheduled) == 3 and min(scheduled) >= created
    assert muster_gangs(gated_box)[f"{ns}/fits"]["bound"] == 3


def test_an_unfit_gang_stays_gated_saying_why_until_its_blockers_go(
        gated_box: Sandbox, ns: str) -> None:
    conn = gated_box.connection()
    for i in range(3):
        conn.request("POST", f"/api/v1/namespaces/{ns}/pods", body=blocker(f"blocker-{i}"))
    assert wait_until(lambda: len(bound(pods_in(conn, ns))) == 3, timeout=60), \
        describe(conn, ns)
    kubectl(gated_box, "apply", "-f", "-", stdin=yaml.safe_dump(jobset("big", ns, pods=2)))

    def members() -> list[dict[str, Any]]:
        return [p for p in pods_in(conn, ns) if p["metadata"]["name"].startswith("big-")]

    assert wait_until(lambda: len(members()) == 2, timeout=60), describe(conn, ns)
    # The JobSet is told at once, its pods once the gang waited a few seconds.
    assert wait_until(lambda: {e["involvedObject"]["kind"] for e in events(
        conn, ns, "GangWaiting")} == {"Pod", "JobSet"}, timeout=30), describe(conn, ns)
    assert not wait_until(lambda: bool(bound(members())), timeout=6)
    assert all(gates(p) == [GATE] for p in members())
    shown = statuses(gated_box, ns)
    assert {shown[p["metadata"]["name"]] for p in members()} == {"SchedulingGated"}, shown
    waiting = events(conn, ns, "GangWaiting")
    kinds = {e["involvedObject"]["kind"] for e in waiting}
    assert kinds == {"Pod", "JobSet"}, waiting
    assert all(f"gang {ns}/big" in e["message"] for e in waiting), waiting
    for i in range(2):
        conn.request("DELETE", f"/api/v1/namespaces/{ns}/pods/blocker-{i}",
                     body={"gracePeriodSeconds": 0})
    assert wait_until(lambda: len(bound(members())) == 2, timeout=90), describe(conn, ns)
    assert muster_gangs(gated_box)[f"{ns}/big"]["bound"] == 2


def gated_bare(name: str, *, scheduler: str) -> dict[str, Any]:
    pod = blocker(name)
    pod["spec"]["schedulerName"] = scheduler
    pod["spec"]["schedulingGates"] = [{"name": "example.com/other"}, {"name": GATE}]
    return pod


def test_ungating_removes_only_musters_gate_and_only_from_the_pod_it_names(
        gated_box: Sandbox, ns: str) -> None:
    conn = gated_box.connection()
    # A pod of Muster's scheduler in no gang, gated by someone: Muster removes its own gate
    # at once and leaves the other one, so the pod still waits (SchedulingGated).
    conn.request("POST", f"/api/v1/namespaces/{ns}/pods",
                 body=gated_bare("lone", scheduler="muster"))
    path = f"/api/v1/namespaces/{ns}/pods"
    assert wait_until(lambda: gates(conn.request("GET", f"{path}/lone"))
                      == ["example.com/other"], timeout=30)
    assert statuses(gated_box, ns)["lone"] == "SchedulingGated"
    # The patch carries the pod's UID: one naming another UID (a pod recreated under the same
    # name) changes nothing. A pod of another scheduler, which Muster leaves alone.
    made = conn.request("POST", path, body=gated_bare("theirs", scheduler="other-scheduler"))
    ungater = KubeUngater(conn, gate=GATE)
    ungater.ungate([PodRef(ns, "theirs", "not-its-uid")], "test")
    ungater.flush()
    assert gates(conn.request("GET", f"{path}/theirs")) == ["example.com/other", GATE]
    ungater.ungate([PodRef(ns, "theirs", made["metadata"]["uid"])], "test")
    ungater.flush()
    assert gates(conn.request("GET", f"{path}/theirs")) == ["example.com/other"]


def admission_reviews(box: Sandbox) -> float:
    """How many AdmissionReviews Muster's webhook has answered (its decisions counter)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{box.ports.muster}/metrics",
                                timeout=10) as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("muster_decisions_total{") and 'verb="admission"' in line)


def admitted_gates(conn: Connection, namespace: str, pod: dict[str, Any]) -> list[str]:
    """The gates ``pod`` would be created with: a dry run, admitted (webhook or policy) and
    never stored."""
    return gates(conn.request("POST", f"/api/v1/namespaces/{namespace}/pods?dryRun=All",
                              body=pod))


def test_pods_that_cannot_join_a_gang_are_left_alone_and_no_pod_of_no_gang_is_held(
        gated_box: Sandbox, ns: str) -> None:
    conn = gated_box.connection()
    by_webhook = gated_box.spec.gate_by is GateBy.WEBHOOK
    path = f"/api/v1/namespaces/{ns}/pods"
    before = admission_reviews(gated_box)
    # No owner and none of the catalog's workload labels: neither the webhook (its
    # may-join-a-gang matchCondition) nor the policy (the same condition) touches it.
    plain = blocker("plain")
    plain["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 1
    assert admitted_gates(conn, ns, plain) == []
    conn.request("POST", path, body=plain)
    assert admission_reviews(gated_box) == before
    # A workload label (an LLMInferenceService's pods carry app.kubernetes.io/name) may mean a
    # gang. The webhook asks Muster, which finds it in no gang and leaves it ungated; the
    # policy cannot follow owners, so the API server gates it and Muster ungates it at once.
    labelled = {**plain, "metadata": {"name": "labelled",
                                      "labels": {"app.kubernetes.io/name": "web"}}}
    assert admitted_gates(conn, ns, labelled) == ([] if by_webhook else [GATE])
    conn.request("POST", path, body=labelled)
    # A pod created bound is never gated (the API server refuses a gate beside nodeName).
    placed = {**plain, "metadata": {"name": "placed", "labels": {"app.kubernetes.io/name": "x"}},
              "spec": {**plain["spec"], "nodeName": "gpu-node-3"}}
    conn.request("POST", path, body=placed)
    assert wait_until(lambda: len(bound(pods_in(conn, ns))) == 3, timeout=60), \
        describe(conn, ns)
    assert all(gates(p) == [] for p in pods_in(conn, ns))
    # Pods with an owner may be in a gang: the JobSet's two, gated and then bound whole.
    kubectl(gated_box, "apply", "-f", "-", stdin=yaml.safe_dump(jobset("owned", ns, pods=2)))
    assert wait_until(lambda: len(bound(pods_in(conn, ns))) == 5, timeout=90), \
        describe(conn, ns)
    # Muster's webhook was asked about the labelled pods and the JobSet's, and only those (the
    # dry runs too); under the policy it is not served and never asked.
    assert admission_reviews(gated_box) == before + (5 if by_webhook else 0)
