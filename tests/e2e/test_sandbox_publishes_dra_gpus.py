"""GPUs that exist only through DRA, on the real control plane with kube-scheduler alone.

The sandbox publishes, as NVIDIA's GPU DRA driver would, the DeviceClasses of its chart and the
ResourceSlices of fake nodes whose status has no ``nvidia.com/gpu``. The real
kube-controller-manager makes a pod's ResourceClaim from its template, the real
kube-scheduler's DynamicResources plugin allocates the claim's devices from those slices and
reserves it for the pod, and KWOK runs the pod although no DRA plugin prepared anything. With
``dra-extended`` the class ``gpu.nvidia.com`` also serves a plain ``nvidia.com/gpu`` request
through a claim the scheduler makes itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from extender.kube.client import Connection
from extender.sandbox.config import SchedulerMode
from extender.sandbox.dra import CLIQUE_LABEL, GPU_CLASS, GpuModel, dra_node, node_slices
from extender.sandbox.sandbox import Sandbox
from tests.e2e.conftest import pods_in, running, scratch_namespace, wait_until

pytestmark = pytest.mark.e2e

DRA_NODES = 2
RESOURCE = "/apis/resource.k8s.io/v1"


#: kube-scheduler alone (no Muster, no descriptors) over DRA nodes only.
DRA_SANDBOX = {"mode": SchedulerMode.DEFAULT, "gpu_model": GpuModel.DRA_EXTENDED,
               "dra_nodes": DRA_NODES, "install_descriptors": False}


@pytest.fixture()
def ns(dra_box: Sandbox) -> Iterator[str]:
    with scratch_namespace(dra_box.connection(), "dra") as name:
        yield name


def pod(name: str, namespace: str, *, gpus: int = 0,
        template: str | None = None) -> dict[str, Any]:
    """A pod asking ``gpus`` of ``nvidia.com/gpu``, or the devices of a claim made from
    ``template``."""
    container: dict[str, Any] = {"name": "train", "image": "registry.example/train:1"}
    spec: dict[str, Any] = {"containers": [container]}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if template:
        container["resources"] = {"claims": [{"name": "gpus"}]}
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": template}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": spec}


def started(conn: Connection, namespace: str, name: str) -> dict[str, Any]:
    """The pod once KWOK reports it Running and Ready (waits up to 30 s)."""
    def now() -> list[dict[str, Any]]:
        return [p for p in running(pods_in(conn, namespace)) if p["metadata"]["name"] == name]

    assert wait_until(lambda: bool(now()), timeout=30), \
        conn.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}").get("status")
    return now()[0]


def claim(conn: Connection, namespace: str, name: str) -> dict[str, Any]:
    made: dict[str, Any] = conn.request(
        "GET", f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{name}")
    return made


def allocated(made: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(driver, pool, device) of every device the claim was allocated."""
    results = made.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
    return sorted((r["driver"], r["pool"], r["device"]) for r in results)


def test_the_dra_nodes_have_no_nvidia_gpu_and_publish_their_gpus_in_slices(
        dra_box: Sandbox) -> None:
    conn = dra_box.connection()
    nodes = conn.request("GET", "/api/v1/nodes")["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == [f"dra-node-{i}"
                                                            for i in range(DRA_NODES)]
    for node in nodes:
        assert "nvidia.com/gpu" not in node["status"]["allocatable"]
        assert CLIQUE_LABEL in node["metadata"]["labels"]
    slices = conn.request("GET", f"{RESOURCE}/resourceslices")["items"]
    gpus = {(s["spec"]["pool"]["name"], d["name"]) for s in slices
            if s["spec"]["driver"] == "gpu.nvidia.com" for d in s["spec"]["devices"]}
    assert len(gpus) == 8 * DRA_NODES
    classes = conn.request("GET", f"{RESOURCE}/deviceclasses")["items"]
    assert {c["metadata"]["name"]: c["spec"].get("extendedResourceName") for c in classes} == {
        GPU_CLASS: "nvidia.com/gpu", "mig.nvidia.com": None,
        "compute-domain-default-channel.nvidia.com": None}


def test_a_claim_template_pod_gets_a_claim_eight_gpus_of_one_node_and_runs(
        dra_box: Sandbox, ns: str) -> None:
    conn = dra_box.connection()
    conn.request("POST", f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates", body={
        "metadata": {"name": "eight-gpus", "namespace": ns},
        "spec": {"spec": {"devices": {
            "requests": [{"name": "gpus", "exactly": {"deviceClassName": GPU_CLASS,
                                                      "count": 8}}],
            # One NVLink clique: the stand-in's own attribute, as a claim would name it.
            "constraints": [{"requests": ["gpus"],
                             "matchAttribute": "gpu.nvidia.com/cliqueID"}]}}}})
    conn.request("POST", f"/api/v1/namespaces/{ns}/pods",
                 body=pod("train", ns, template="eight-gpus"))
    ran = started(conn, ns, "train")
    node = ran["spec"]["nodeName"]
    assert node.startswith("dra-node-")
    # kube-controller-manager made the claim and wrote its name into the pod's status.
    [status] = ran["status"]["resourceClaimStatuses"]
    made = claim(conn, ns, status["resourceClaimName"])
    assert status["name"] == "gpus"
    assert made["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpus"
    [owner] = made["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Pod", "train", True)
    # kube-scheduler allocated all eight GPUs of the node it bound the pod to, and reserved
    # the claim for the pod.
    assert allocated(made) == [("gpu.nvidia.com", node, f"gpu-{i}") for i in range(8)]
    assert [r["uid"] for r in made["status"]["reservedFor"]] == [ran["metadata"]["uid"]]


def test_a_plain_nvidia_gpu_request_is_served_by_dra_on_a_node_without_the_device_plugin(
        dra_box: Sandbox, ns: str) -> None:
    conn = dra_box.connection()
    conn.request("POST", f"/api/v1/namespaces/{ns}/pods", body=pod("serve", ns, gpus=4))
    ran = started(conn, ns, "serve")
    node = ran["spec"]["nodeName"]
    assert node.startswith("dra-node-")
    # The scheduler made a claim for the request itself and recorded it on the pod.
    extended = ran["status"]["extendedResourceClaimStatus"]
    made = claim(conn, ns, extended["resourceClaimName"])
    assert made["metadata"]["annotations"][
        "resource.kubernetes.io/extended-resource-claim"] == "true"
    assert [(m["containerName"], m["resourceName"]) for m in extended["requestMappings"]] == [
        ("train", "nvidia.com/gpu")]
    devices = allocated(made)
    assert len(devices) == 4 and {(d, p) for d, p, _ in devices} == {("gpu.nvidia.com", node)}


def test_partitionable_gpus_pass_the_api_servers_validation(dra_box: Sandbox) -> None:
    """The DynamicMIG layout (counter sets, full GPUs and MIG placements consuming them)
    as resource.k8s.io/v1 validates it: a dry run stores nothing."""
    conn = dra_box.connection()
    node = dra_node(9, slot=9, nodes_per_rack=4)
    for made in node_slices(node, gpus=8, partitions=True):
        conn.request("POST", f"{RESOURCE}/resourceslices?dryRun=All", body=made)
