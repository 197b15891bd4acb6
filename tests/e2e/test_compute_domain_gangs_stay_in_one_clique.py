"""A ComputeDomain-style gang (multi-node NVLink on GB200-like systems) with the real
kube-scheduler, its DynamicResources plugin and the real JobSet controller: every pod takes GPUs
through one claim and one IMEX channel device through another, and the gang must stay within
one NVLink clique (``nvidia.com/gpu.clique``, JobSet's exclusive topology).

Each DRA node publishes one ``channel-0``: Muster counts it as a device like any other, so two
of the gang's pods never share a node even when their GPUs would, and the whole gang lands in
one clique or waits.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from extender.sandbox.dra import CHANNEL_CLASS, CLIQUE_LABEL, GPU_CLASS, GpuModel
from extender.sandbox.sandbox import Sandbox
from tests.e2e.conftest import bound, pods_in, running, scratch_namespace, wait_until
from tests.e2e.test_dra_gangs_are_bound_whole import apply, claims, of, where

pytestmark = pytest.mark.e2e


#: 4 DRA nodes of 8 GPUs in 2 NVLink cliques of 2 nodes, the real JobSet controller.
DRA_SANDBOX = {"gpu_model": GpuModel.DRA, "dra_nodes": 4, "nodes_per_rack": 2, "jobset": True}


@pytest.fixture()
def ns(dra_box: Sandbox) -> Iterator[str]:
    with scratch_namespace(dra_box.connection(), "cd") as name:
        yield name


def templates(namespace: str, gpus: int) -> list[dict[str, Any]]:
    def one(name: str, device_class: str, count: int) -> dict[str, Any]:
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"spec": {"devices": {"requests": [{"name": "d", "exactly": {
                    "deviceClassName": device_class, "count": count}}]}}}}

    return [one("gpus", GPU_CLASS, gpus), one("channel", CHANNEL_CLASS, 1)]


def domain_jobset(namespace: str, name: str, *, pods: int) -> dict[str, Any]:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": namespace, "annotations": {
                "alpha.jobset.sigs.k8s.io/exclusive-topology": CLIQUE_LABEL}},
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {"spec": {
                "parallelism": pods, "completions": pods, "backoffLimit": 0,
                "template": {"spec": {
                    "restartPolicy": "Never",
                    "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "gpus"},
                                       {"name": "channel",
                                        "resourceClaimTemplateName": "channel"}],
                    "containers": [{"name": "train", "image": "registry.example/train:1",
                                    "resources": {"claims": [{"name": "gpus"},
                                                             {"name": "channel"}]}}]}}}}}]}}


def cliques(box: Sandbox) -> dict[str, str]:
    nodes = box.connection().request("GET", "/api/v1/nodes").get("items", [])
    return {n["metadata"]["name"]: n["metadata"]["labels"][CLIQUE_LABEL] for n in nodes}


def test_a_domain_gang_takes_one_channel_per_node_within_one_clique(
        dra_box: Sandbox, ns: str) -> None:
    conn = dra_box.connection()
    # 4 GPUs a pod: two pods would fit one node's GPUs, not its one channel device.
    apply(dra_box, *templates(ns, gpus=4), domain_jobset(ns, "domain", pods=2))
    assert wait_until(lambda: len(running(of(pods_in(conn, ns), "domain"))) == 2,
                      timeout=120), where(pods_in(conn, ns))
    pods = of(pods_in(conn, ns), "domain")
    nodes = {p["spec"]["nodeName"] for p in pods}
    assert len(nodes) == 2
    assert len({cliques(dra_box)[n] for n in nodes}) == 1
    channels = [c for c in claims(dra_box, ns)
                if c["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"]
                == CHANNEL_CLASS]
    assert len(channels) == 2
    assert all(c["status"]["allocation"]["devices"]["results"][0]["device"] == "channel-0"
               for c in channels)


def test_a_domain_gang_larger_than_any_clique_waits_whole(
        dra_box: Sandbox, ns: str) -> None:
    """3 pods, one channel each, cliques of 2 nodes: no clique can hold it. (JobSet's pod
    webhook creates the followers only once the leader has a node: they never appear.)"""
    conn = dra_box.connection()
    apply(dra_box, *templates(ns, gpus=4), domain_jobset(ns, "wide", pods=3))
    assert wait_until(lambda: bool(of(pods_in(conn, ns), "wide")), timeout=60)
    assert not wait_until(lambda: bool(bound(of(pods_in(conn, ns), "wide"))), timeout=10)
    assert not [c for c in claims(dra_box, ns) if (c.get("status") or {}).get("allocation")]
