"""A pod whose claim template was never turned into a claim is never tried by kube-scheduler
(DynamicResources' PreEnqueue): the burst bench says so in a labelled note instead of
reporting a silent zero for that mode."""

from __future__ import annotations

from typing import Any

from tests.bench.peer_compare import claims_never_made


def _pod(name: str, *, group: str | None = None, made: bool = False,
         node: str | None = None, template: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {"resourceClaims": [
        {"name": "gpus", "resourceClaimTemplateName": "gpu-2"} if template
        else {"name": "gpus", "resourceClaimName": "shared"}]}
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    if node:
        spec["nodeName"] = node
    status: dict[str, Any] = {}
    if made:
        status["resourceClaimStatuses"] = [{"name": "gpus", "resourceClaimName": f"{name}-x"}]
    return {"metadata": {"name": name}, "spec": spec, "status": status}


def test_pods_of_podgroups_without_their_claims_are_counted_as_never_tried() -> None:
    pods = [_pod("train-0-0", group="train-0"), _pod("train-0-1", group="train-0"),
            _pod("single-0"), _pod("single-1", made=True, node="n1")]
    note = claims_never_made(pods)
    assert note is not None
    assert note.startswith("NOT TRIED: 3 pods (2 in a PodGroup) have no ResourceClaim made")
    assert "kube-controller-manager.log" in note


def test_no_note_when_every_template_claim_was_made_or_the_pod_names_its_claim() -> None:
    pods = [_pod("a", group="g", made=True), _pod("b", made=True, node="n1"),
            _pod("c", template=False), {"metadata": {"name": "d"}, "spec": {}}]
    assert claims_never_made(pods) is None
