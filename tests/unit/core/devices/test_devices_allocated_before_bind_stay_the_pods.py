"""Devices DRA allocated to a pod before its bind are the pod's, whatever the bind answers.

kube-scheduler's DynamicResources PreBind writes a pod's claim allocation (and reserves the
claim for the pod) before it asks the extender to bind. Refusing that bind does not free the
devices: Unreserve takes the pod out of ``reservedFor`` and leaves the claim allocated until
the pod's next failed scheduling cycle, and the pod's retry may go only to the claim's node.
So a pod filtered onto a node before a gang was planned over it binds there; the gang, whose
plan lost that room, is planned again; the room check still refuses what claims do not ask.
And a pod of no gang with claims is sent to one node and counted there from its filter on, so
a gang planned before its bind comes does not count on its devices.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from extender.core.decide.barrier import BindOutcome, decide_bind
from extender.core.decide.decisions import CoreSettings, FilterOutcome, decide_filter
from extender.core.devices.attach import lower_objects
from extender.core.gang.ledger import Ledger
from extender.core.model.resources import EMPTY
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import NodeName
from extender.core.workloads.cluster import build_snapshot
from extender.files.catalog import packaged_catalog
from tests.unit.core.devices.dra_objects import (
    claim,
    claim_pod,
    device_class,
    gpu_node_slice,
    node,
    template,
)
from tests.unit.server.builders import job_of, jobset, jobset_pod

SETTINGS = CoreSettings(plan_ttl=60, bind_timeout=3)
NODES = ["dra-0", "dra-1"]


def _solo_claim(*, allocated_on: str | None, reserved: bool) -> dict[str, Any]:
    made = claim("solo-gpus", "ml", count=8,
                 allocated=[(allocated_on, f"gpu-{i}") for i in range(8)] if allocated_on
                 else [])
    if allocated_on:
        made["status"]["allocation"]["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [allocated_on]}]}]}
        if reserved:
            made["status"]["reservedFor"] = [{"resource": "pods", "name": "solo",
                                              "uid": "uid-solo"}]
    return made


def _member(index: int) -> dict[str, Any]:
    pod = jobset_pod("train", index, gpus=0)
    pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "gpus"}]
    return pod


def _snapshot(solo_claim: dict[str, Any], *, solo_cpu: str = "1") -> ClusterSnapshot:
    """dra-0 and dra-1 (8 GPUs, 64 cpu each); a JobSet of two workers of 8 GPUs and 40 cpu;
    ``solo``, a pod of no gang taking 8 GPUs through its own claim."""
    nodes = [node(n) for n in NODES]
    js = jobset("train", workers=2, gpus=0)
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "gpus"}]
    solo = claim_pod("solo", claim_name="solo-gpus", namespace="ml")
    pods = [_member(0), _member(1), solo]
    solo["spec"]["containers"][0]["resources"] = {"requests": {"cpu": solo_cpu}}
    for spec in (js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"],
                 *(p["spec"] for p in pods[:2])):
        spec["containers"][0]["resources"]["requests"]["cpu"] = "40"
    dra = [device_class(), template("gpus", "ml", count=8),
           *(gpu_node_slice(n) for n in NODES), solo_claim]
    lowered = lower_objects([*nodes, *pods, js, job_of("train"), *dra])
    return build_snapshot(nodes=lowered[:2], pods=lowered[2:5], objects=lowered[5:7],
                          catalog=packaged_catalog())


def _plan_gang_over_both_nodes(snapshot: ClusterSnapshot, ledger: Ledger) -> None:
    planned = decide_filter(snapshot.pods["uid-train-0"], [NodeName(n) for n in NODES],
                            snapshot=snapshot, ledger=ledger, now=0.0, settings=SETTINGS)
    assert planned.outcome is FilterOutcome.PLANNED and planned.plan is not None, planned.reason
    assert sorted(n for n, _, _ in planned.plan.slots) == NODES


def test_a_pod_whose_claim_prebind_allocated_binds_where_a_gang_was_planned_since() -> None:
    # The gang was planned over both nodes from the supply Muster saw (solo's claim then not
    # yet allocated); solo, filtered earlier, reaches bind with its claim allocated on dra-0.
    ledger = Ledger()
    _plan_gang_over_both_nodes(_snapshot(_solo_claim(allocated_on=None, reserved=False)), ledger)
    after = _snapshot(_solo_claim(allocated_on="dra-0", reserved=True))
    decision = decide_bind("uid-solo", NodeName("dra-0"), snapshot=after, ledger=ledger,
                           now=1.0, settings=SETTINGS)
    assert decision.outcome is BindOutcome.BIND, decision.reason


def test_the_bind_does_not_wait_for_the_snapshot_to_show_the_allocation() -> None:
    # The bind request can come before Muster's watch delivers the claim PreBind wrote.
    snapshot = _snapshot(_solo_claim(allocated_on=None, reserved=False))
    ledger = Ledger()
    _plan_gang_over_both_nodes(snapshot, ledger)
    decision = decide_bind("uid-solo", NodeName("dra-0"), snapshot=snapshot, ledger=ledger,
                           now=1.0, settings=SETTINGS)
    assert decision.outcome is BindOutcome.BIND, decision.reason


def test_the_gang_that_lost_the_room_is_planned_again_and_waits() -> None:
    ledger = Ledger()
    _plan_gang_over_both_nodes(_snapshot(_solo_claim(allocated_on=None, reserved=False)), ledger)
    after = _snapshot(_solo_claim(allocated_on="dra-0", reserved=True))
    decide_bind("uid-solo", NodeName("dra-0"), snapshot=after, ledger=ledger, now=1.0,
                settings=SETTINGS)
    # kube-scheduler offers the member only dra-1 now (dra-0's devices are allocated).
    member = decide_filter(after.pods["uid-train-1"], [NodeName("dra-1")], snapshot=after,
                           ledger=ledger, now=2.0, settings=SETTINGS)
    assert member.outcome is FilterOutcome.WAITING and member.passed == (), member.reason


def test_what_the_pods_claims_do_not_ask_is_still_checked_against_the_gangs_room() -> None:
    # Its cpu: the gang's reservation keeps 40 of dra-0's 64, and solo asks 30.
    snapshot = _snapshot(_solo_claim(allocated_on=None, reserved=False), solo_cpu="30")
    ledger = Ledger()
    _plan_gang_over_both_nodes(snapshot, ledger)
    decision = decide_bind("uid-solo", NodeName("dra-0"), snapshot=snapshot, ledger=ledger,
                           now=1.0, settings=SETTINGS)
    assert decision.outcome is BindOutcome.REJECT
    assert "reserved for gang ml/train" in decision.reason, decision.reason


def test_a_claim_left_allocated_for_no_pod_is_asked_by_no_pod() -> None:
    # After a refused bind the claim is allocated and reserved for nobody: its devices are
    # out of the supply and in no pod's demand, so nothing is counted twice.
    snapshot = _snapshot(_solo_claim(allocated_on="dra-0", reserved=False))
    solo = snapshot.pods["uid-solo"]
    assert not solo.claimed and solo.shape.requests.get("nvidia.com/gpu", 0) == 0


def test_a_pod_of_no_gang_with_claims_is_sent_to_one_node_and_counted_there() -> None:
    # Filtered before any gang is planned, solo goes to one node and holds it from then on:
    # the gang planned next does not count on solo's node, and waits for room.
    snapshot = _snapshot(_solo_claim(allocated_on=None, reserved=False))
    ledger = Ledger()
    solo = decide_filter(snapshot.pods["uid-solo"], [NodeName(n) for n in NODES],
                         snapshot=snapshot, ledger=ledger, now=0.0, settings=SETTINGS)
    assert solo.outcome is FilterOutcome.NON_GANG and len(solo.passed) == 1, solo.reason
    [other] = [n for n in NODES if n not in solo.passed]
    assert "sent pod ml/solo to" in solo.failed[NodeName(other)]
    gang = decide_filter(snapshot.pods["uid-train-0"], [NodeName(n) for n in NODES],
                         snapshot=snapshot, ledger=ledger, now=1.0, settings=SETTINGS)
    assert gang.outcome is FilterOutcome.WAITING and gang.passed == (), gang.reason
    # Its bind there passes, and the pod is counted there until it is seen bound.
    bound = decide_bind("uid-solo", solo.passed[0], snapshot=snapshot, ledger=ledger, now=2.0,
                        settings=SETTINGS)
    assert bound.outcome is BindOutcome.BIND, bound.reason
    assert ledger.in_flight()["uid-solo"].node == solo.passed[0]


def test_a_pod_of_no_gang_without_claims_keeps_every_candidate_that_fits() -> None:
    snapshot = _snapshot(_solo_claim(allocated_on=None, reserved=False))
    plain = replace(snapshot.pods["uid-solo"], claimed=EMPTY,
                    shape=replace(snapshot.pods["uid-solo"].shape, claims=False))
    decision = decide_filter(plain, [NodeName(n) for n in NODES], snapshot=snapshot,
                             ledger=Ledger(), now=0.0, settings=SETTINGS)
    assert decision.passed == tuple(NODES)
