"""Gangs whose GPUs Kubernetes 1.37 allocates through DRA, with the real kube-scheduler, its
DynamicResources plugin, kube-controller-manager's resource-claim controller and the real
JobSet controller, on a sandbox of device-plugin nodes and DRA nodes side by side.

A JobSet whose pods take 8 GPUs each through a ResourceClaimTemplate is bound whole; a second
that no longer fits is bound not at all (its claims never allocated) until the first is gone,
while kube-scheduler alone, given the same JobSets on the same nodes, binds part of it; a
gang asking plain ``nvidia.com/gpu`` is served by the device plugin and, through the class's
``extendedResourceName``, by DRA nodes whose allocatable has no GPUs at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from extender.sandbox.config import SchedulerMode
from extender.sandbox.dra import DRA_NODE_PREFIX, GPU_CLASS, GpuModel
from extender.sandbox.sandbox import Sandbox
from tests.e2e.conftest import (
    allocated,
    bound,
    claims,
    of,
    pods_in,
    running,
    scratch_namespace,
    start_sandbox,
    stays_unbound,
    wait_until,
    where,
)
from tests.e2e.test_real_pod_lifecycle import kubectl, muster_gangs

pytestmark = pytest.mark.e2e


#: 2 device-plugin nodes and 3 DRA nodes of 8 GPUs each, the real JobSet controller.
DRA_SANDBOX = {"nodes": 2, "gpu_model": GpuModel.MIXED, "dra_nodes": 3, "jobset": True}


@pytest.fixture(scope="module")
def alone_box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """The nodes and controllers of :data:`DRA_SANDBOX`, scheduled by kube-scheduler alone
    (no extender). The descriptors stay: without them the sandbox installs no JobSet CRD."""
    box = start_sandbox(tmp_path_factory.mktemp("dra-alone"),
                        **{**DRA_SANDBOX, "mode": SchedulerMode.DEFAULT})
    try:
        yield box
    finally:
        box.down()


@pytest.fixture()
def ns(dra_box: Sandbox) -> Iterator[str]:
    with scratch_namespace(dra_box.connection(), "dra") as name:
        yield name


@pytest.fixture()
def alone_ns(alone_box: Sandbox) -> Iterator[str]:
    with scratch_namespace(alone_box.connection(), "alone") as name:
        yield name


def claim_template(namespace: str, name: str, *, count: int) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": GPU_CLASS, "count": count}}]}}}}


def jobset(namespace: str, name: str, *, pods: int, claim: str = "",
           gpus: int = 0) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "train", "image": "registry.example/train:1"}
    pod_spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if claim:
        pod_spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": claim}]
        container["resources"] = {"claims": [{"name": "gpus"}]}
    else:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
                "parallelism": pods, "completions": pods, "backoffLimit": 0,
                "template": {"spec": pod_spec}}}}]}}


def apply(box: Sandbox, *objects: dict[str, Any]) -> None:
    kubectl(box, "apply", "-f", "-", stdin=yaml.safe_dump_all(objects))


def dra_nodes_in_use(box: Sandbox) -> list[str]:
    """Pods on DRA nodes and claims still allocated, anywhere in the cluster."""
    conn = box.connection()
    pods = conn.request("GET", "/api/v1/pods").get("items", [])
    left = [p["metadata"]["name"] for p in pods
            if (p["spec"].get("nodeName") or "").startswith(DRA_NODE_PREFIX)]
    found = conn.request("GET", "/apis/resource.k8s.io/v1/resourceclaims").get("items", [])
    return left + [c["metadata"]["name"] for c in allocated(found)]


def owned_claims(box: Sandbox, namespace: str, pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The claims kube-controller-manager made from templates for ``pod``."""
    uid = pod["metadata"]["uid"]
    return [c for c in claims(box, namespace)
            if any(o.get("uid") == uid for o in c["metadata"].get("ownerReferences", []))]


def started(box: Sandbox, namespace: str, name: str, *, pods: int) -> list[dict[str, Any]]:
    """The pods of JobSet ``name`` once ``pods`` of them run (waits up to 90 s)."""
    conn = box.connection()
    assert wait_until(lambda: len(running(of(pods_in(conn, namespace), name))) == pods,
                      timeout=90), where(pods_in(conn, namespace))
    return of(pods_in(conn, namespace), name)


def reserved_for(made: dict[str, Any]) -> list[str]:
    return [r["name"] for r in (made.get("status") or {}).get("reservedFor", [])]


def test_claim_gangs_bind_whole_or_not_at_all_where_kube_scheduler_alone_binds_part(
        dra_box: Sandbox, alone_box: Sandbox, ns: str, alone_ns: str) -> None:
    """The same JobSets (2 pods of 8 claim GPUs, then 2 more) on the same nodes (3 DRA nodes
    of 8, 2 device-plugin nodes no claim can use), with Muster and with kube-scheduler alone:
    the second fits only in part. kube-scheduler alone binds one of its pods and allocates that
    pod's claim, for a gang that cannot run; Muster binds none and allocates nothing until the
    first gang is gone, then binds it whole."""
    boxes = ((dra_box, ns), (alone_box, alone_ns))
    for box, namespace in boxes:
        apply(box, claim_template(namespace, "eight", count=8),
              jobset(namespace, "first", pods=2, claim="eight"))
    for box, namespace in boxes:
        first = started(box, namespace, "first", pods=2)
        assert len({p["spec"]["nodeName"] for p in first}) == 2
        assert all(p["spec"]["nodeName"].startswith(DRA_NODE_PREFIX) for p in first)
        for pod in first:
            [made] = owned_claims(box, namespace, pod)
            assert len(made["status"]["allocation"]["devices"]["results"]) == 8
            assert reserved_for(made) == [pod["metadata"]["name"]]
        apply(box, jobset(namespace, "second", pods=2, claim="eight"))

    # kube-scheduler alone: one pod of the second bound, its claim allocated and reserved;
    # the other pending, its claim made but never allocated.
    alone = alone_box.connection()

    def split() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        second = of(pods_in(alone, alone_ns), "second")
        return bound(second), [p for p in second if not p["spec"].get("nodeName")]

    assert wait_until(lambda: [len(x) for x in split()] == [1, 1]
                      and len(running(split()[0])) == 1, timeout=90), \
        where(pods_in(alone, alone_ns))
    [placed], [pending] = split()
    [made] = owned_claims(alone_box, alone_ns, placed)
    assert len(made["status"]["allocation"]["devices"]["results"]) == 8
    assert reserved_for(made) == [placed["metadata"]["name"]]
    assert all(not (c.get("status") or {}).get("allocation")
               for c in owned_claims(alone_box, alone_ns, pending))

    # Muster, over the same time and 8 s more: none of the second bound, its claims unallocated.
    conn = dra_box.connection()
    assert wait_until(lambda: len(of(pods_in(conn, ns), "second")) == 2, timeout=30)
    stays_unbound(dra_box, ns, seconds=8, claims_allocated=2, jobset="second")
    gang = next(g for key, g in muster_gangs(dra_box).items() if key.endswith("/second"))
    assert (gang["state"], gang["bound"]) == ("waiting", 0)

    # The first gang goes: the second is bound whole onto the DRA nodes.
    kubectl(dra_box, "delete", "jobset", "first", "-n", ns, "--wait=false")
    assert wait_until(lambda: len(running(of(pods_in(conn, ns), "second"))) == 2,
                      timeout=120), where(pods_in(conn, ns))
    second = of(pods_in(conn, ns), "second")
    assert all(p["spec"]["nodeName"].startswith(DRA_NODE_PREFIX) for p in second)
    gang = next(g for key, g in muster_gangs(dra_box).items() if key.endswith("/second"))
    assert (gang["minMember"], gang["bound"]) == (2, 2)


def test_a_claim_gang_larger_than_the_dra_nodes_is_bound_not_at_all(
        dra_box: Sandbox, ns: str) -> None:
    """4 pods of 8 claim GPUs, 3 DRA nodes free (device-plugin nodes cannot serve claims):
    none is bound, no claim is allocated, and the reason names the class and what is free."""
    conn = dra_box.connection()
    assert wait_until(lambda: not dra_nodes_in_use(dra_box), timeout=90)
    apply(dra_box, claim_template(ns, "eight", count=8), jobset(ns, "big", pods=4,
                                                                  claim="eight"))
    assert wait_until(lambda: len(of(pods_in(conn, ns), "big")) == 4, timeout=30)
    stays_unbound(dra_box, ns, seconds=10, claims_allocated=0)
    gang = next(g for key, g in muster_gangs(dra_box).items() if key.endswith("/big"))
    assert gang["state"] == "waiting" and gang["bound"] == 0
    assert "needs 8 gpu.nvidia.com devices on one node, the most free is 0" \
        in gang["lastReason"], gang["lastReason"]


def test_plain_gpu_requests_are_served_by_the_device_plugin_and_by_dra_nodes(
        dra_box: Sandbox, ns: str) -> None:
    """5 pods of 8 ``nvidia.com/gpu`` on 2 device-plugin nodes and 3 DRA nodes: it fits only
    if the DRA nodes' GPUs count, which their allocatable does not show."""
    conn = dra_box.connection()
    assert wait_until(lambda: not dra_nodes_in_use(dra_box), timeout=90)  # other tests' gone
    apply(dra_box, jobset(ns, "plain", pods=5, gpus=8))
    assert wait_until(lambda: len(running(of(pods_in(conn, ns), "plain"))) == 5,
                      timeout=120), where(pods_in(conn, ns))
    pods = of(pods_in(conn, ns), "plain")
    nodes = sorted(p["spec"]["nodeName"] for p in pods)
    assert len(set(nodes)) == 5
    assert sum(n.startswith(DRA_NODE_PREFIX) for n in nodes) == 3
    served = [p for p in pods if (p.get("status") or {}).get("extendedResourceClaimStatus")]
    assert len(served) == 3  # kube-scheduler served these through DRA's hidden claims
