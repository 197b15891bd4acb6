"""Gangs whose GPUs Kubernetes 1.37 allocates through DRA, with the real kube-scheduler, its
DynamicResources plugin, kube-controller-manager's resource-claim controller and the real
JobSet controller, on a sandbox of device-plugin nodes and DRA nodes side by side.

A JobSet whose pods take 8 GPUs each through a ResourceClaimTemplate is bound whole; a second
that no longer fits is bound not at all (its claims never allocated) until the first is gone; a
gang asking plain ``nvidia.com/gpu`` is served by the device plugin and, through the class's
``extendedResourceName``, by DRA nodes whose allocatable has no GPUs at all.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from extender.sandbox.config import Ports
from extender.sandbox.dra import DRA_NODE_PREFIX, GPU_CLASS, GpuModel
from extender.sandbox.sandbox import Sandbox, SandboxSpec
from tests.e2e.conftest import bound, pods_in, running, scratch_namespace, wait_until
from tests.e2e.test_real_pod_lifecycle import kubectl, muster_gangs

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def mixed_box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """2 device-plugin nodes and 3 DRA nodes of 8 GPUs each, the real JobSet controller."""
    spec = SandboxSpec(directory=tmp_path_factory.mktemp("dra"), nodes=2, ports=Ports(),
                       gpu_model=GpuModel.MIXED, dra_nodes=3, jobset=True, plan_ttl=30.0,
                       bind_timeout=15.0)
    box = Sandbox(spec, say=lambda _m: None)
    box.up()
    try:
        yield box
    finally:
        box.down()


@pytest.fixture()
def ns(mixed_box: Sandbox) -> Iterator[str]:
    with scratch_namespace(mixed_box.connection(), "dra") as name:
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


def of(pods: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [p for p in pods
            if p["metadata"].get("labels", {}).get("jobset.sigs.k8s.io/jobset-name") == name]


def claims(box: Sandbox, namespace: str) -> list[dict[str, Any]]:
    found = box.connection().request(
        "GET", f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims")
    items: list[dict[str, Any]] = found.get("items", [])
    return items


def allocated(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in items if (c.get("status") or {}).get("allocation")]


def dra_nodes_in_use(box: Sandbox) -> list[str]:
    """Pods on DRA nodes and claims still allocated, anywhere in the cluster."""
    conn = box.connection()
    pods = conn.request("GET", "/api/v1/pods").get("items", [])
    left = [p["metadata"]["name"] for p in pods
            if (p["spec"].get("nodeName") or "").startswith(DRA_NODE_PREFIX)]
    found = conn.request("GET", "/apis/resource.k8s.io/v1/resourceclaims").get("items", [])
    return left + [c["metadata"]["name"] for c in allocated(found)]


def where(pods: list[dict[str, Any]]) -> list[tuple[str, str | None, str | None]]:
    return [(p["metadata"]["name"], p["spec"].get("nodeName"), p["status"].get("phase"))
            for p in pods]


def test_claim_gangs_are_bound_whole_and_one_that_does_not_fit_waits_whole(
        mixed_box: Sandbox, ns: str) -> None:
    conn = mixed_box.connection()
    apply(mixed_box, claim_template(ns, "eight", count=8),
          jobset(ns, "first", pods=3, claim="eight"))
    assert wait_until(lambda: len(running(of(pods_in(conn, ns), "first"))) == 3, timeout=90), \
        where(pods_in(conn, ns))
    first = of(pods_in(conn, ns), "first")
    nodes = {p["spec"]["nodeName"] for p in first}
    assert len(nodes) == 3 and all(n.startswith(DRA_NODE_PREFIX) for n in nodes)
    taken = allocated(claims(mixed_box, ns))
    assert len(taken) == 3
    assert all(len(c["status"]["allocation"]["devices"]["results"]) == 8 for c in taken)

    # Every DRA GPU is taken: a second claim gang of 2 must not start any pod.
    apply(mixed_box, jobset(ns, "second", pods=2, claim="eight"))
    assert wait_until(lambda: len(of(pods_in(conn, ns), "second")) == 2, timeout=30)
    settle = time.monotonic() + 8
    while time.monotonic() < settle:
        assert not bound(of(pods_in(conn, ns), "second")), where(pods_in(conn, ns))
        assert len(allocated(claims(mixed_box, ns))) == 3
        time.sleep(0.5)

    # The first gang goes: the second is bound whole onto the DRA nodes.
    kubectl(mixed_box, "delete", "jobset", "first", "-n", ns, "--wait=false")
    assert wait_until(lambda: len(running(of(pods_in(conn, ns), "second"))) == 2,
                      timeout=120), where(pods_in(conn, ns))
    second = of(pods_in(conn, ns), "second")
    assert all(p["spec"]["nodeName"].startswith(DRA_NODE_PREFIX) for p in second)
    gang = next(g for key, g in muster_gangs(mixed_box).items() if key.endswith("/second"))
    assert (gang["minMember"], gang["bound"]) == (2, 2)


def test_a_claim_gang_larger_than_the_dra_nodes_is_bound_not_at_all(
        mixed_box: Sandbox, ns: str) -> None:
    """4 pods of 8 claim GPUs, 3 DRA nodes free (device-plugin nodes cannot serve claims):
    kube-scheduler alone binds 3 of them (test_sandbox_publishes_dra_gpus.py); with Muster
    none is bound and no claim is allocated."""
    conn = mixed_box.connection()
    assert wait_until(lambda: not dra_nodes_in_use(mixed_box), timeout=90)
    apply(mixed_box, claim_template(ns, "eight", count=8), jobset(ns, "big", pods=4,
                                                                  claim="eight"))
    assert wait_until(lambda: len(of(pods_in(conn, ns), "big")) == 4, timeout=30)
    settle = time.monotonic() + 10
    while time.monotonic() < settle:
        assert not bound(pods_in(conn, ns)), where(pods_in(conn, ns))
        assert not allocated(claims(mixed_box, ns))
        time.sleep(0.5)
    gang = next(g for key, g in muster_gangs(mixed_box).items() if key.endswith("/big"))
    assert gang["state"] == "waiting" and gang["bound"] == 0
    assert "needs 8 gpu.nvidia.com devices on one node, the most free is 0" \
        in gang["lastReason"], gang["lastReason"]


def test_plain_gpu_requests_are_served_by_the_device_plugin_and_by_dra_nodes(
        mixed_box: Sandbox, ns: str) -> None:
    """5 pods of 8 ``nvidia.com/gpu`` on 2 device-plugin nodes and 3 DRA nodes: it fits only
    if the DRA nodes' GPUs count, which their allocatable does not show."""
    conn = mixed_box.connection()
    assert wait_until(lambda: not dra_nodes_in_use(mixed_box), timeout=90)  # other tests' gone
    apply(mixed_box, jobset(ns, "plain", pods=5, gpus=8))
    assert wait_until(lambda: len(running(of(pods_in(conn, ns), "plain"))) == 5,
                      timeout=120), where(pods_in(conn, ns))
    pods = of(pods_in(conn, ns), "plain")
    nodes = sorted(p["spec"]["nodeName"] for p in pods)
    assert len(set(nodes)) == 5
    assert sum(n.startswith(DRA_NODE_PREFIX) for n in nodes) == 3
    served = [p for p in pods if (p.get("status") or {}).get("extendedResourceClaimStatus")]
    assert len(served) == 3  # kube-scheduler served these through DRA's hidden claims
