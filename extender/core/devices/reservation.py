"""A pod's ResourceClaim reserved for it, as kube-scheduler's DynamicResources PreBind leaves it.

A kubelet prepares a claim's devices only for a pod in its ``status.reservedFor``. When Muster
binds a parked gang member itself, kube-scheduler has already taken the pod out of its claims'
``reservedFor`` (its Unreserve ran when the member's request was refused) and left the claims
allocated, free for its PostFilter to deallocate; Muster checks each claim is still allocated
to the member's node and puts the pod back first. Pure: claims in, the claim to write (or why
not) out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.core.devices.lowering import MAX_POD_CLAIMS, claim_statuses
from extender.core.model.objects import as_mapping

RESERVED_FOR_MAX = 256
"""``status.reservedFor`` entries the API server accepts (ResourceClaimReservedForMaxSize)."""


def not_allocated_to(claim: Mapping[str, Any], node: str) -> str | None:
    """Why ``claim``'s devices are not the pod's to use on ``node``; ``None`` when they are:
    allocated, and (when the allocation names nodes by name, as node-local devices do) to
    ``node``. A selector by labels only is taken as given: the allocation was made for this
    node's bind."""
    meta = as_mapping(claim.get("metadata"))
    who = f"ResourceClaim {meta.get('namespace')}/{meta.get('name')}"
    allocation = as_mapping(as_mapping(claim.get("status")).get("allocation"))
    if not allocation:
        return f"{who} is no longer allocated (kube-scheduler deallocated it)"
    terms = as_mapping(allocation.get("nodeSelector")).get("nodeSelectorTerms")
    named: list[str] = []
    for term in terms if isinstance(terms, list) else ():
        for field in as_mapping(term).get("matchFields") or ():
            f = as_mapping(field)
            if f.get("key") == "metadata.name" and f.get("operator") == "In":
                named += [str(v) for v in f.get("values") or ()]
    if named and node not in named:
        return f"{who} is allocated on {', '.join(sorted(set(named)))}, not {node}"
    return None


def reserved_for(claim: Mapping[str, Any], *, name: str, uid: str) -> dict[str, Any] | None:
    """``claim`` with the pod added to ``status.reservedFor`` (the object to write back, its
    ``resourceVersion`` kept so a concurrent change fails the write); ``None`` when the pod is
    there already."""
    status = as_mapping(claim.get("status"))
    entries = [e for e in status.get("reservedFor") or () if isinstance(e, Mapping)]
    if any(e.get("uid") == uid for e in entries):
        return None
    if len(entries) >= RESERVED_FOR_MAX:
        raise ValueError(f"ResourceClaim {as_mapping(claim.get('metadata')).get('name')} is "
                         f"reserved for {len(entries)} consumers already, the most allowed")
    return {**claim, "status": {**status, "reservedFor": [
        *entries, {"resource": "pods", "name": name, "uid": uid}]}}


def pod_claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The ResourceClaims a pod's ``spec.resourceClaims`` name, in its order: a named claim,
    or the claim made from a template once ``status.resourceClaimStatuses`` names it (an
    entry whose claim was not made, or needs none, is left out)."""
    entries = as_mapping(pod.get("spec")).get("resourceClaims")
    if not isinstance(entries, list):
        return []
    statuses = claim_statuses(pod)
    out = []
    for raw in entries[:MAX_POD_CLAIMS]:
        entry = as_mapping(raw)
        name = entry.get("resourceClaimName") or statuses.get(str(entry.get("name")))
        if isinstance(name, str) and name:
            out.append(name)
    return out
