"""Claims come and go by the second (kube-scheduler makes a hidden claim for every pod a
DRA-backed extended resource serves, and allocates it in PreBind): the device catalog, whose
CEL matching is the costly part, is matched again only for a signature never seen, never for a
claim that merely appears or is allocated."""

from __future__ import annotations

from typing import Any

from extender.core.devices.attach import DeviceLowering
from extender.core.gang.constraints import ineligibility
from extender.core.model.objects import node_from_api, pod_from_api
from tests.unit.core.devices.dra_objects import (
    claim,
    claim_pod,
    device_class,
    gpu_node_slice,
    template,
)

SLICES = [gpu_node_slice("dra-0"), gpu_node_slice("dra-1")]
CLASSES = [device_class(extended="nvidia.com/gpu")]
CLASS = "deviceclass.resource.kubernetes.io/gpu.nvidia.com"
H100 = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"


def _refresh(lowering: DeviceLowering, claims: list[dict[str, Any]],
             templates: list[dict[str, Any]] = (),  # type: ignore[assignment]
             pods: list[dict[str, Any]] = ()) -> bool:  # type: ignore[assignment]
    lowering.invalidate("resource.k8s.io/v1/ResourceClaim")
    return lowering.refresh(slices=SLICES, classes=CLASSES, claims=claims,
                            templates=templates, pods=pods)


def test_hidden_claims_appearing_and_allocated_leave_the_catalog_as_it_is() -> None:
    lowering = DeviceLowering()
    pod = claim_pod("w-0", gpus=8, uid="u0")
    assert _refresh(lowering, [], pods=[pod]) is True  # the first build
    first = lowering.view
    assert first is not None
    hidden = claim("w-0-extended-resources-x", owner_uid="u0", extended=True)
    assert _refresh(lowering, [hidden], pods=[pod]) is False
    allocated = claim("w-0-extended-resources-x", owner_uid="u0", extended=True,
                      allocated=[("dra-0", f"gpu-{i}") for i in range(8)])
    assert _refresh(lowering, [allocated], pods=[pod]) is False
    assert _refresh(lowering, [], pods=[]) is False
    view = lowering.view
    assert view is not None and view.catalog is first.catalog
    # The counts still follow the claims: dra-0's eight GPUs went while the hidden claim of a
    # pod that is gone held them.
    assert _refresh(lowering, [allocated], pods=[]) is False
    view = lowering.view
    assert view is not None
    assert view.free.get("dra-0", {}).get("nvidia.com/gpu", 0) == 0
    assert view.free["dra-1"]["nvidia.com/gpu"] == 8


def test_a_new_selector_is_matched_alone_and_stays_matched_after_its_claim_is_allocated(
        ) -> None:
    lowering = DeviceLowering()
    assert _refresh(lowering, [], templates=[template()]) is True
    base = lowering.view
    assert base is not None
    narrow = claim("h100", selectors=(H100,))
    assert _refresh(lowering, [narrow], templates=[template()]) is True
    view = lowering.view
    assert view is not None
    wanted = ("gpu.nvidia.com", (H100,), "")
    assert wanted in view.catalog.matches.devices
    # The class's own signature kept what it had matched: no CEL evaluated again for it.
    own = ("gpu.nvidia.com", (), "")
    assert view.catalog.matches.devices[own] is base.catalog.matches.devices[own]
    allocated = claim("h100", selectors=(H100,), allocated=[("dra-1", "gpu-0")])
    assert _refresh(lowering, [allocated], templates=[template()]) is False
    after = lowering.view
    assert after is not None and after.catalog is view.catalog
    assert after.free["dra-1"]["nvidia.com/gpu"] == 7


def test_new_slices_match_every_signature_again() -> None:
    lowering = DeviceLowering()
    assert _refresh(lowering, [claim("h100", selectors=(H100,))]) is True
    before = lowering.view
    assert before is not None
    lowering.invalidate("resource.k8s.io/v1/ResourceSlice")
    more = [*SLICES, gpu_node_slice("dra-2")]
    assert lowering.refresh(slices=more, classes=CLASSES, claims=[], templates=[],
                            pods=[]) is True
    after = lowering.view
    assert after is not None and after.catalog is not before.catalog
    assert after.free["dra-2"]["nvidia.com/gpu"] == 8


def _allocated_to(node: str, **kw: Any) -> dict[str, Any]:
    made = claim("w-0-gpus-x", count=8, allocated=[(node, f"gpu-{i}") for i in range(8)], **kw)
    made["status"]["allocation"]["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [node]}]}]}
    return made


def test_a_pod_whose_claim_a_failed_bind_left_allocated_may_go_only_where_its_devices_are(
        ) -> None:
    # kube-scheduler's Unreserve takes the pod out of reservedFor and leaves the allocation:
    # its DynamicResources plugin lets the retry onto dra-1 only, so must Muster's plans.
    pod = claim_pod("w-0", template_name="gpus", generated="w-0-gpus-x", uid="u0")
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}}}
    lowering = DeviceLowering()
    _refresh(lowering, [_allocated_to("dra-1")], templates=[template()], pods=[pod])
    shape = pod_from_api(lowering.pod(pod)).shape
    nodes = [node_from_api({"kind": "Node", "metadata": {"name": n, "labels": {"zone": z}},
                            "status": {"allocatable": {"cpu": "8"}}})
             for n, z in (("dra-0", "a"), ("dra-1", "a"), ("dra-1", "c"), ("dra-2", "b"))]
    assert [n.name for n in nodes if ineligibility(shape, n) is None] == ["dra-1"]
    assert shape.requests.get(CLASS, 0) == 0  # its devices are in no node's free count
    # Not allocated yet: the pod may go wherever its own affinity lets it.
    free = DeviceLowering()
    _refresh(free, [], templates=[template()], pods=[pod])
    assert [n.name for n in nodes
            if ineligibility(pod_from_api(free.pod(pod)).shape, n) is None] == [
        "dra-0", "dra-1", "dra-2"]
