"""With no ``managedResources`` (so that claim-only GPU pods reach Muster), kube-scheduler asks
Muster about every pod of its profile. Pods that take no GPU and no DRA device are answered as
kube-scheduler alone would place them, as before: every candidate passes, nothing is scored,
the bind happens at once. A CPU-only pod of a gang's workload that no role describes (KubeRay's
RayJob submitter) is therefore placed, not held for a role it does not have; a pod taking its
GPUs through a claim is planned as a gang member."""

from __future__ import annotations

import time
from typing import Any

import orjson

from extender.core.model.objects import pod_from_api
from extender.server.app import create_app
from extender.server.settings import Settings
from extender.state.memory import MemoryBinder
from extender.state.ports import MemoryEvents
from tests.unit.core.devices.dra_objects import (
    claim,
    claim_pod,
    device_class,
    gpu_node_slice,
    node,
    template,
)
from tests.unit.server.builders import (
    bind_body,
    filter_body,
    gpu_node,
    job_of,
    jobset,
    jobset_pod,
    plain_pod,
    store_of,
)


def submitter(js: str) -> dict[str, Any]:
    """A CPU-only pod the JobSet's Job owns, with no role label the descriptor maps."""
    pod = jobset_pod(js, 0, gpus=0)
    pod["metadata"]["name"] = f"{js}-submitter"
    pod["metadata"]["uid"] = f"uid-{js}-submitter"
    pod["metadata"]["labels"].pop("jobset.sigs.k8s.io/replicatedjob-name", None)
    return pod


def test_a_pod_taking_no_devices_passes_every_candidate_and_binds_at_once() -> None:
    js = jobset("train", workers=2, gpus=8)
    store = store_of([gpu_node("n0"), gpu_node("n1"), js, job_of("train")])
    binder = MemoryBinder(store)
    app = create_app(Settings(), store, time.time, binder=binder, events=MemoryEvents())
    client = app.test_client()
    pod = submitter("train")
    answer = orjson.loads(client.post("/filter", data=filter_body(pod, ["n0", "n1"])).data)
    assert (answer["NodeNames"], answer["Error"]) == (["n0", "n1"], "")
    scores = orjson.loads(client.post("/prioritize", data=filter_body(pod, ["n0", "n1"])).data)
    assert [s["Score"] for s in scores] == [0, 0]
    bound = orjson.loads(client.post("/bind", data=bind_body(pod, "n1")).data)
    assert bound["Error"] == ""
    assert binder.bindings == {"ml/train-submitter": "n1"}


def test_a_node_muster_has_not_seen_fails_a_gpu_pod_and_passes_one_taking_none() -> None:
    store = store_of([gpu_node("n0")])
    client = create_app(Settings(), store, time.time).test_client()
    gpu = orjson.loads(client.post("/filter", data=filter_body(
        plain_pod("solo", gpus=1), ["n0", "zz"])).data)
    assert gpu["NodeNames"] == ["n0"]
    alone = orjson.loads(client.post("/filter", data=filter_body(
        plain_pod("solo", gpus=1), ["zz"])).data)
    assert alone["FailedNodes"].keys() == {"zz"}
    cpu = orjson.loads(client.post("/filter", data=filter_body(
        plain_pod("tool", gpus=0), ["n0", "zz"])).data)
    assert cpu["NodeNames"] == ["n0", "zz"]


def claims_instead(obj: dict[str, Any]) -> dict[str, Any]:
    """A JobSet or pod whose containers take their 8 GPUs through the claim template."""
    spec = obj["spec"]
    if "replicatedJobs" in spec:
        spec = spec["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    for container in spec["containers"]:
        container["resources"] = {"requests": {"cpu": "1"}, "claims": [{"name": "gpus"}]}
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "eight"}]
    return obj


def test_a_pod_taking_gpus_only_through_a_claim_is_planned_as_its_gangs_member() -> None:
    """Two members of 8 claim GPUs, one DRA node of 8: the gang does not fit, and the filter
    says which devices are short; it never passes the node for one member alone."""
    js = claims_instead(jobset("train", workers=2, gpus=8))
    store = store_of([device_class(), template("eight", "ml", count=8), node("d0"),
                      gpu_node_slice("d0", gpus=8), js, job_of("train")])
    app = create_app(Settings(), store, time.time, binder=MemoryBinder(store),
                     events=MemoryEvents())
    pod = claims_instead(jobset_pod("train", 0, gpus=8))
    answer = orjson.loads(app.test_client().post("/filter", data=filter_body(pod, ["d0"])).data)
    assert not answer["NodeNames"]
    reasons = {**(answer["FailedNodes"] or {}), **(answer["FailedAndUnresolvableNodes"] or {})}
    assert "needs 8 gpu.nvidia.com devices on one node, the most free is 0" in reasons["d0"], \
        reasons


def test_a_claim_pod_whose_claim_is_allocated_still_takes_devices() -> None:
    """kube-scheduler allocates a claim in PreBind, before it calls Muster's bind: the pod's
    devices are then in the supply's numbers, not its requests, and it must still meet the
    gang's barrier, not be bound at once."""
    allocated = claim("w-gpus", "ml", count=8, owner_uid="uid-w",
                      allocated=[("d0", f"gpu-{i}") for i in range(8)])
    store = store_of([device_class(), template("eight", "ml", count=8), node("d0"),
                      gpu_node_slice("d0", gpus=8), allocated])
    raw = claim_pod("w", template_name="eight", generated="w-gpus", namespace="ml")
    lowered = pod_from_api(store.lowered_pod(raw))
    assert not lowered.shape.requests  # the allocation holds its devices
    assert lowered.shape.takes_devices("nvidia.com/gpu")
