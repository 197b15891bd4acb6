"""What the allocator leaves allocated when a member goes or a bind fails, with the real
kube-scheduler 1.37.2 and its DynamicResources plugin, kube-controller-manager's resource-claim
controller and the real JobSet controller, on 3 DRA nodes of 8 GPUs, gang pods gated by
Muster's webhook.

kube-scheduler writes a claim's allocation and reservation in PreBind, before it asks Muster to
bind; a bind that fails (Muster's barrier timed out, the pod went) leaves the claim allocated,
as kube-scheduler's Unreserve takes only the pod out of ``reservedFor``; the claim controller
deletes a template's claim with its pod. Whatever the allocator holds, Muster counts it as the
claims' ``status.allocation`` say (each node's free GPUs, read from Muster's own reasons), plans
no gang onto another's claimed GPUs, and binds a gang whole or not at all. A claim gang waiting
for GPUs that claims of running pods hold is told how many are free, never that it would not fit
an empty cluster. A waiting gang does not take the GPUs a bound gang's deleted member freed
before its replacement exists: Muster holds them for the replacement.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from extender.kube.client import KubeError, NotFound
from extender.sandbox.dra import GPU_DRIVER, GpuModel
from extender.sandbox.sandbox import Sandbox
from tests.e2e.conftest import bound, pods_in, running, scratch_namespace, wait_until
from tests.e2e.test_dra_gangs_are_bound_whole import (
    allocated,
    apply,
    claim_template,
    of,
    owned_claims,
    reserved_for,
    where,
)
from tests.e2e.test_real_pod_lifecycle import kubectl, muster_gangs

pytestmark = pytest.mark.e2e

DRA_NODES = 3
GPUS = 8
BIND_TIMEOUT = 8.0
#: 3 DRA nodes of 8 GPUs, the real JobSet controller, Muster's gates; a short bind barrier.
DRA_SANDBOX = {"gpu_model": GpuModel.DRA, "dra_nodes": DRA_NODES, "jobset": True,
               "gating": True, "bind_timeout": BIND_TIMEOUT}
#: A gate of the test's own: the member carrying it stays out of kube-scheduler's queue after
#: Muster has lifted its gate, so the gang's other members wait at Muster's bind barrier.
HOLD = "e2e.muster.dev/hold"
RESOURCE = "/apis/resource.k8s.io/v1"
_FREE = re.compile(r"the most free is (\d+)")
_PROBES = itertools.count()


@pytest.fixture()
def ns(dra_box: Sandbox) -> Iterator[str]:
    with scratch_namespace(dra_box.connection(), "left") as name:
        yield name


def role(name: str, *, pods: int = 1, template: str = "", claim: str = "", gate: str = "",
         node: str = "", backoff: int = 0) -> dict[str, Any]:
    """A replicatedJob of ``pods`` pods taking the devices of a claim made from ``template``,
    or of the ResourceClaim ``claim`` itself; ``gate``: a scheduling gate of its own;
    ``node``: pinned there; ``backoff``: pods its Job replaces when they fail or go."""
    source = {"resourceClaimTemplateName": template} if template else \
        {"resourceClaimName": claim}
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "resourceClaims": [{"name": "gpus", **source}],
        "containers": [{"name": "train", "image": "registry.example/train:1",
                        "resources": {"claims": [{"name": "gpus"}]}}]}
    if gate:
        spec["schedulingGates"] = [{"name": gate}]
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"name": name, "replicas": 1, "template": {"spec": {
        "parallelism": pods, "completions": pods, "backoffLimit": backoff,
        "template": {"spec": spec}}}}


def gang(namespace: str, name: str, *roles: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicatedJobs": list(roles)}}


def resource_claim(namespace: str, name: str, *, count: int = GPUS) -> dict[str, Any]:
    made = claim_template(namespace, name, count=count)
    return {"apiVersion": made["apiVersion"], "kind": "ResourceClaim",
            "metadata": made["metadata"], "spec": made["spec"]["spec"]}


def dra_node_names(box: Sandbox) -> list[str]:
    nodes = box.connection().request("GET", "/api/v1/nodes").get("items", [])
    return sorted(n["metadata"]["name"] for n in nodes)


def allocator_free(box: Sandbox) -> dict[str, int]:
    """Each node's GPUs not in any claim's ``status.allocation``, anywhere in the cluster
    (the sandbox's pools are named after their nodes)."""
    taken: dict[str, int] = {}
    found = box.connection().request("GET", f"{RESOURCE}/resourceclaims").get("items", [])
    for made in allocated(found):
        for result in made["status"]["allocation"]["devices"]["results"]:
            if result["driver"] == GPU_DRIVER:
                taken[result["pool"]] = taken.get(result["pool"], 0) + 1
    return {node: GPUS - taken.get(node, 0) for node in dra_node_names(box)}


def muster_free(box: Sandbox, namespace: str) -> dict[str, int]:
    """Each node's free GPUs as Muster counts them: per node a new one-pod JobSet pinned there
    asking 9 GPUs, which Muster leaves gated with a reason naming what is free on that node."""
    names = {node: f"probe-{next(_PROBES)}" for node in dra_node_names(box)}
    apply(box, claim_template(namespace, "nine", count=GPUS + 1),
          *(gang(namespace, name, role("p", template="nine", node=node))
            for node, name in names.items()))
    seen: dict[str, int] = {}

    def told() -> bool:
        gangs = muster_gangs(box)
        for node, name in names.items():
            reason = gangs.get(f"{namespace}/{name}", {}).get("lastReason", "")
            match = _FREE.search(reason)
            if match:
                seen[node] = int(match.group(1))
        return len(seen) == len(names)

    assert wait_until(told, timeout=60), (seen, muster_gangs(box))
    kubectl(box, "delete", "jobset", *names.values(), "-n", namespace, "--wait=false")
    return seen


def counts_agree(box: Sandbox, namespace: str) -> bool:
    """Muster's free GPUs per node are the allocator's (asked again while they settle)."""
    def same() -> bool:
        return muster_free(box, namespace) == allocator_free(box)

    return wait_until(same, timeout=60, interval=1.0)


def check_whole_or_none(box: Sandbox, namespace: str, gangs: dict[str, int]) -> None:
    """Each of ``gangs`` (JobSet name: pods) has all or none of its pods bound; no device is
    in two claims' allocations; no gang's plan counts on GPUs a claim of other pods holds."""
    plans = muster_gangs(box)
    conn = box.connection()
    pods = pods_in(conn, namespace)
    for name, size in gangs.items():
        assert len(bound(of(pods, name))) in (0, size), where(pods)
    found = conn.request("GET", f"{RESOURCE}/resourceclaims").get("items", [])
    devices = [(r["driver"], r["pool"], r["device"]) for c in allocated(found)
               for r in c["status"]["allocation"]["devices"]["results"]]
    assert len(devices) == len(set(devices)), devices
    for key, seen in plans.items():
        if not key.startswith(f"{namespace}/") or not seen["plan"]:
            continue
        name = key.split("/", 1)[1]
        own = claim_names(of(pods, name)) | named_claims(box, namespace, name)
        others = [c for c in allocated(found) if c["metadata"]["name"] not in own
                  or c["metadata"]["namespace"] != namespace]
        for slot in seen["plan"]:
            held = sum(r["pool"] == slot["node"] for c in others
                       for r in c["status"]["allocation"]["devices"]["results"])
            assert held + GPUS * slot["pods"] <= GPUS, (key, seen["plan"], devices)


def claim_names(pods: list[dict[str, Any]]) -> set[str]:
    """The claims ``pods`` use: named in their spec, or made for them from a template."""
    names = {c["resourceClaimName"] for p in pods for c in p["spec"].get("resourceClaims", [])
             if c.get("resourceClaimName")}
    return names | {c["resourceClaimName"] for p in pods
                    for c in (p.get("status") or {}).get("resourceClaimStatuses") or []
                    if c.get("resourceClaimName")}


def named_claims(box: Sandbox, namespace: str, name: str) -> set[str]:
    """The ResourceClaims JobSet ``name``'s pod templates name (none once it is gone)."""
    with contextlib.suppress(NotFound):
        made = box.connection().request(
            "GET", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{namespace}/jobsets/{name}")
        return {c["resourceClaimName"] for job in made["spec"]["replicatedJobs"]
                for c in job["template"]["spec"]["template"]["spec"].get("resourceClaims", [])
                if c.get("resourceClaimName")}
    return set()


def watch(box: Sandbox, namespace: str, gangs: dict[str, int], until: Callable[[], bool], *,
          timeout: float) -> bool:
    """Wait for ``until``, checking :func:`check_whole_or_none` at every look."""
    def look() -> bool:
        check_whole_or_none(box, namespace, gangs)
        return until()

    return wait_until(look, timeout=timeout, interval=0.5)


def lift(box: Sandbox, namespace: str, pod: str, gate: str) -> None:
    """Take ``gate`` off ``pod``, leaving its other gates (Muster may lift its own meanwhile:
    the patch tests what it read, and is tried again)."""
    conn = box.connection()
    path = f"/api/v1/namespaces/{namespace}/pods/{pod}"

    def once() -> bool:
        gates = conn.request("GET", path)["spec"].get("schedulingGates") or []
        if gate not in {g["name"] for g in gates}:
            return True
        with contextlib.suppress(KubeError):
            conn.request("PATCH", path, content_type="application/json-patch+json", body=[
                {"op": "test", "path": "/spec/schedulingGates", "value": gates},
                {"op": "replace", "path": "/spec/schedulingGates",
                 "value": [g for g in gates if g["name"] != gate]}])
        return False

    assert wait_until(once, timeout=10)


def settled(box: Sandbox) -> bool:
    """Every GPU free again (an earlier test's claims gone)."""
    return wait_until(lambda: set(allocator_free(box).values()) == {GPUS}, timeout=90)


def delete_pod(box: Sandbox, namespace: str, pod: dict[str, Any]) -> None:
    box.connection().request(
        "DELETE", f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}",
        body={"gracePeriodSeconds": 0})


def replaced(box: Sandbox, namespace: str, name: str, gone: dict[str, Any], *,
             pods: int) -> bool:
    """JobSet ``name`` runs ``pods`` pods again, ``gone`` not among them."""
    now = of(pods_in(box.connection(), namespace), name)
    return len(now) == pods and len(running(now)) == pods \
        and gone["metadata"]["uid"] not in {p["metadata"]["uid"] for p in now}


def first_gang_whole(box: Sandbox, namespace: str) -> list[dict[str, Any]]:
    """The JobSet ``first`` (2 pods of 8 claim GPUs, its Job replacing a pod that goes), once
    both pods run on two nodes (every GPU free before)."""
    assert settled(box)
    conn = box.connection()
    apply(box, claim_template(namespace, "eight", count=GPUS),
          gang(namespace, "first", role("w", pods=2, template="eight", backoff=3)))
    assert wait_until(lambda: len(running(of(pods_in(conn, namespace), "first"))) == 2,
                      timeout=90), where(pods_in(conn, namespace))
    return of(pods_in(conn, namespace), "first")


def second_gang_waiting(box: Sandbox, namespace: str) -> list[dict[str, Any]]:
    """:func:`first_gang_whole`, then the JobSet ``second`` of 2 pods of 8 more, which cannot
    fit (one node is free): its pods exist, none bound. Returns the first's pods."""
    first = first_gang_whole(box, namespace)
    apply(box, gang(namespace, "second", role("w", pods=2, template="eight")))
    assert watch(box, namespace, {"second": 2},
                 lambda: len(of(pods_in(box.connection(), namespace), "second")) == 2,
                 timeout=30)
    return first


def test_a_member_deleted_from_a_bound_claim_gang_is_replaced_and_its_gpus_counted_as_claimed(
        dra_box: Sandbox, ns: str) -> None:
    """The claim controller deletes the member's claim with it; its Job makes another pod
    (after its backoff), which Muster places on the GPUs left free: the gang is whole again,
    each claim reserved for its own pod on its own node, and Muster counts each node's free
    GPUs as the claims say, before and after."""
    conn = dra_box.connection()
    [victim, _] = first_gang_whole(dra_box, ns)
    assert counts_agree(dra_box, ns)
    delete_pod(dra_box, ns, victim)
    assert watch(dra_box, ns, {}, lambda: replaced(dra_box, ns, "first", victim, pods=2),
                 timeout=90), where(pods_in(conn, ns))
    assert not owned_claims(dra_box, ns, victim)
    first = of(pods_in(conn, ns), "first")
    assert len({p["spec"]["nodeName"] for p in first}) == 2
    for pod in first:
        [made] = owned_claims(dra_box, ns, pod)
        assert reserved_for(made) == [pod["metadata"]["name"]]
        assert {r["pool"] for r in made["status"]["allocation"]["devices"]["results"]} == \
            {pod["spec"]["nodeName"]}
    gangs = muster_gangs(dra_box)
    assert (gangs[f"{ns}/first"]["bound"], gangs[f"{ns}/first"]["state"]) == (2, "bound")
    assert counts_agree(dra_box, ns)


def test_a_bind_failed_at_the_barrier_leaves_its_claim_allocated_and_counted_until_bound_whole(
        dra_box: Sandbox, ns: str) -> None:
    """Member ``a`` reaches Muster's bind while ``b`` is held back by a gate of the test's own:
    kube-scheduler has allocated and reserved ``a``'s claim in PreBind; the barrier times out,
    the bind fails, and Unreserve leaves the claim allocated to no one. ``a`` is deleted then:
    the claim stays allocated with no pod at all, and Muster counts its GPUs as taken. The
    Job's new ``a`` takes that claim, which lets it onto the claim's node only: Muster plans
    it there. Once ``b`` is let go the gang is bound whole, never in part, ``a`` on its
    claim's node, and no plan of Muster's counts on GPUs another claim holds."""
    assert settled(dra_box)
    conn = dra_box.connection()
    apply(dra_box, resource_claim(ns, "claim-a"), resource_claim(ns, "claim-b"),
          gang(ns, "pair", role("a", claim="claim-a", backoff=3),
               role("b", claim="claim-b", gate=HOLD, backoff=3)))
    path = f"{RESOURCE}/namespaces/{ns}/resourceclaims/claim-a"

    def claim_a() -> dict[str, Any]:
        made: dict[str, Any] = conn.request("GET", path)
        return made

    def pods_a() -> list[dict[str, Any]]:
        return [p for p in of(pods_in(conn, ns), "pair")
                if p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "a"]

    def pod_a() -> dict[str, Any]:
        [pod] = pods_a()
        return pod

    def reserved_for_a() -> bool:
        pods = pods_a()  # none until the JobSet's Job makes it
        return len(pods) == 1 and reserved_for(claim_a()) == [pods[0]["metadata"]["name"]]

    # PreBind ran: the claim is allocated and reserved for a pod Muster holds unbound.
    assert watch(dra_box, ns, {"pair": 2}, reserved_for_a, timeout=60)
    assert not pod_a()["spec"].get("nodeName")
    assert muster_gangs(dra_box)[f"{ns}/pair"]["heldAtBind"] == 1
    node = claim_a()["status"]["allocation"]["devices"]["results"][0]["pool"]

    # The barrier times out: allocated, reserved for no one.
    def left_behind() -> bool:
        status = claim_a().get("status") or {}
        return bool(status.get("allocation")) and not status.get("reservedFor")

    assert watch(dra_box, ns, {"pair": 2}, left_behind, timeout=BIND_TIMEOUT * 3)
    first_a = pod_a()
    delete_pod(dra_box, ns, first_a)
    assert wait_until(lambda: first_a["metadata"]["uid"] not in
                      {p["metadata"]["uid"] for p in pods_a()}, timeout=30)
    assert left_behind(), claim_a().get("status")
    assert counts_agree(dra_box, ns)  # the claim's GPUs taken, though no pod holds them
    assert allocator_free(dra_box)[node] == 0

    # The Job's new ``a`` takes the claim; ``b`` let go: the gang is bound whole.
    assert watch(dra_box, ns, {"pair": 2},
                 lambda: any(p["metadata"]["uid"] != first_a["metadata"]["uid"]
                             for p in pods_a()), timeout=60)
    lift(dra_box, ns, next(p["metadata"]["name"] for p in of(pods_in(conn, ns), "pair")
                           if p["metadata"]["name"].startswith("pair-b")), HOLD)
    assert watch(dra_box, ns, {"pair": 2},
                 lambda: len(running(of(pods_in(conn, ns), "pair"))) == 2, timeout=90), \
        where(pods_in(conn, ns))
    pair = of(pods_in(conn, ns), "pair")
    assert len({p["spec"]["nodeName"] for p in pair}) == 2
    assert pod_a()["spec"]["nodeName"] == node, where(pods_in(conn, ns))
    for pod in pair:
        [name] = claim_names([pod])
        made = conn.request("GET", f"{RESOURCE}/namespaces/{ns}/resourceclaims/{name}")
        assert reserved_for(made) == [pod["metadata"]["name"]]
        assert {r["pool"] for r in made["status"]["allocation"]["devices"]["results"]} == \
            {pod["spec"]["nodeName"]}
    assert counts_agree(dra_box, ns)


def test_a_gang_waiting_for_gpus_does_not_take_those_a_bound_gangs_deleted_member_freed(
        dra_box: Sandbox, ns: str) -> None:
    """Muster holds the deleted member's node for its replacement (``replacement_ttl``)
    during its Job's pod-failure backoff (about 10 s): the replacement binds there, the
    first gang is whole again and the waiting gang binds none of its pods."""
    conn = dra_box.connection()
    [victim, _] = second_gang_waiting(dra_box, ns)
    delete_pod(dra_box, ns, victim)

    def settled_either_way() -> bool:
        return replaced(dra_box, ns, "first", victim, pods=2) \
            or len(running(of(pods_in(conn, ns), "second"))) == 2

    assert watch(dra_box, ns, {"second": 2}, settled_either_way, timeout=90), \
        where(pods_in(conn, ns))
    assert replaced(dra_box, ns, "first", victim, pods=2), where(pods_in(conn, ns))
    assert not bound(of(pods_in(conn, ns), "second"))
    assert counts_agree(dra_box, ns)


def test_a_claim_gang_waiting_for_allocated_gpus_is_not_told_it_would_not_fit_an_empty_cluster(
        dra_box: Sandbox, ns: str) -> None:
    second_gang_waiting(dra_box, ns)

    def reason() -> str:
        return str(muster_gangs(dra_box).get(f"{ns}/second", {}).get("lastReason", ""))

    assert wait_until(lambda: "the most free is" in reason(), timeout=30), reason()
    assert "would not fit an empty cluster" not in reason(), reason()
