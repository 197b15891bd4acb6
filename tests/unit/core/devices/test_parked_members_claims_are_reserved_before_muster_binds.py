"""A parked gang member's ResourceClaims are checked and reserved for it before Muster binds it.

kube-scheduler's Unreserve took the member out of each claim's ``reservedFor`` when its request
was refused; its PostFilter may deallocate such a claim. Muster binds the member only while
every claim is still allocated to the member's node, and puts the member back in
``reservedFor`` first, as kube-scheduler's PreBind would have left it.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.core.devices.reservation import (
    RESERVED_FOR_MAX,
    not_allocated_to,
    pod_claim_names,
    reserved_for,
)
from extender.state.memory import MemoryBinder
from extender.state.ports import BindError, PodRef
from tests.unit.core.devices.dra_objects import claim, claim_pod
from tests.unit.server.builders import store_of


def _on(node_name: str, *, reserved: list[str] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    made = claim("w-gpus", "ml", allocated=[(node_name, "gpu-0")])
    made["metadata"]["resourceVersion"] = "41"
    made["status"]["allocation"]["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}
    made["status"]["reservedFor"] = [{"resource": "pods", "name": n, "uid": f"uid-{n}"}
                                     for n in reserved]
    return made


def test_a_claim_allocated_to_the_node_may_be_used_there() -> None:
    assert not_allocated_to(_on("dra-0"), "dra-0") is None


def test_a_claim_deallocated_or_on_another_node_may_not() -> None:
    assert "no longer allocated" in str(not_allocated_to(claim("w-gpus", "ml"), "dra-0"))
    assert "allocated on dra-1, not dra-0" in str(not_allocated_to(_on("dra-1"), "dra-0"))


def test_a_selector_by_labels_alone_is_taken_as_given() -> None:
    made = _on("dra-0")
    made["status"]["allocation"]["nodeSelector"] = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "rack", "operator": "In", "values": ["r1"]}]}]}
    assert not_allocated_to(made, "dra-5") is None


def test_the_pod_is_added_to_reserved_for_and_the_version_kept() -> None:
    body = reserved_for(_on("dra-0"), name="w", uid="uid-w")
    assert body is not None
    assert body["status"]["reservedFor"] == [{"resource": "pods", "name": "w", "uid": "uid-w"}]
    assert body["metadata"]["resourceVersion"] == "41"
    assert reserved_for(body, name="w", uid="uid-w") is None  # already there: nothing to write


def test_a_claim_reserved_for_the_most_consumers_is_refused() -> None:
    full = _on("dra-0", reserved=[f"p{i}" for i in range(RESERVED_FOR_MAX)])
    with pytest.raises(ValueError, match="the most allowed"):
        reserved_for(full, name="w", uid="uid-w")


def test_a_pods_claims_are_named_whether_named_or_made_from_a_template() -> None:
    named = claim_pod("a", claim_name="shared")
    made = claim_pod("b", template_name="gpus", generated="b-gpus-x7")
    not_yet = claim_pod("c", template_name="gpus")
    assert (pod_claim_names(named), pod_claim_names(made), pod_claim_names(not_yet)) == (
        ["shared"], ["b-gpus-x7"], [])


def test_the_memory_binder_reserves_in_the_store_and_refuses_a_moved_claim() -> None:
    store = store_of([_on("dra-0"), claim_pod("w", claim_name="w-gpus", namespace="ml")])
    binder = MemoryBinder(store)
    pod = PodRef("ml", "w", "uid-w")
    binder.reserve_claims(pod, "dra-0", ["w-gpus"])
    stored = store.find_object("ml", "ResourceClaim", "w-gpus")
    assert stored is not None
    assert [r["uid"] for r in stored["status"]["reservedFor"]] == ["uid-w"]
    with pytest.raises(BindError, match="allocated on dra-0, not dra-1"):
        binder.reserve_claims(pod, "dra-1", ["w-gpus"])
    with pytest.raises(BindError, match="not found"):
        binder.reserve_claims(pod, "dra-0", ["gone"])
