"""A gang member whose ResourceClaim is already allocated is planned on the claim's node.

kube-scheduler leaves a claim allocated after a failed bind (its Unreserve takes the pod out of
``reservedFor`` only) until its DynamicResources PostFilter deallocates it; until then it lets
the pod onto the allocation's nodes only. A plan that gave that member a slot elsewhere would
send it where kube-scheduler refuses it, and the gang would time out at its barrier. The plan
keeps a slot for it on its claim's node, other members are not sent there, and a gang whose
pinned member's node cannot take it waits, saying so. Any member whose own pod's node
constraints are narrower than its template's is planned alike; one of an elastic gang's extras
whose node cannot take it is left out, and the minimum planned without it; a pinned member
whose subgroup keeps to a domain takes its subgroup to its node's domain.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from extender.core.decide.decisions import CoreSettings, FilterOutcome, decide_filter
from extender.core.decide.slots import PlannedMember, open_slots
from extender.core.devices.attach import lower_objects
from extender.core.gang.ledger import Ledger
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import (
    NodeName,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodInfo,
)
from extender.core.workloads.cluster import build_snapshot
from extender.files.catalog import packaged_catalog
from tests.unit.core.builders import (
    gang_pods,
    make_gang,
    make_node,
    make_pod,
    make_shape,
    tree_of,
    uid,
)
from tests.unit.core.devices.dra_objects import (
    claim,
    device_class,
    gpu_node_slice,
    node,
    template,
)
from tests.unit.core.gang.test_lws_subgroups_each_take_a_domain import NAMES as RACK_NODES
from tests.unit.core.gang.test_lws_subgroups_each_take_a_domain import RACKS, group, snapshot
from tests.unit.server.builders import job_of, jobset, jobset_pod, plain_pod

SETTINGS = CoreSettings(plan_ttl=60, bind_timeout=3)
NODES = ["dra-0", "dra-1", "dra-2"]
CATALOG = packaged_catalog()


def _allocated_claim(name: str, node_name: str) -> dict[str, Any]:
    """A claim of 8 GPUs left allocated on ``node_name`` and reserved for no pod."""
    made = claim(name, "ml", count=8,
                 allocated=[(node_name, f"gpu-{i}") for i in range(8)])
    made["status"]["allocation"]["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}
    return made


def _claims_entry() -> list[dict[str, str]]:
    return [{"name": "gpus", "resourceClaimTemplateName": "gpus"}]


def _member(index: int, *, claim_name: str | None = None, pod_cpu: str = "1",
            node_name: str | None = None) -> dict[str, Any]:
    pod = jobset_pod("train", index, gpus=0, node=node_name)
    pod["spec"]["resourceClaims"] = _claims_entry()
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = pod_cpu
    if claim_name is not None:
        pod["status"]["resourceClaimStatuses"] = [{"name": "gpus",
                                                   "resourceClaimName": claim_name}]
    return pod


def _snapshot(pods: list[dict[str, Any]], claims: list[dict[str, Any]], *,
              cpu: dict[str, str] | None = None, workers: int = 2) -> ClusterSnapshot:
    nodes = [node(n) for n in NODES]
    for n in nodes:
        n["status"]["allocatable"]["cpu"] = (cpu or {}).get(n["metadata"]["name"], "64")
    js = jobset("train", workers=workers, gpus=0)
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "resourceClaims"] = _claims_entry()
    dra = [device_class(), template("gpus", "ml", count=8),
           *(gpu_node_slice(n) for n in NODES), *claims]
    objects = [js, job_of("train")]
    lowered = lower_objects([*nodes, *pods, *objects, *dra])
    return build_snapshot(nodes=lowered[:len(nodes)],
                          pods=lowered[len(nodes):len(nodes) + len(pods)],
                          objects=lowered[len(nodes) + len(pods):len(nodes) + len(pods) + 2],
                          catalog=CATALOG)


def _filter(snapshot: ClusterSnapshot, ledger: Ledger, index: int, *, now: float = 0.0,
            offered: list[str] | None = None) -> Any:
    pod = snapshot.pods[f"uid-train-{index}"]
    return decide_filter(pod, [NodeName(n) for n in offered or NODES], snapshot=snapshot,
                         ledger=ledger, now=now, settings=SETTINGS)


def test_a_member_whose_claim_is_allocated_on_a_node_is_planned_there() -> None:
    # The claim of worker 1 holds every GPU of dra-2: a plan from the template alone would
    # put both workers on dra-0 and dra-1.
    snap = _snapshot([_member(0), _member(1, claim_name="w1-gpus")],
                     [_allocated_claim("w1-gpus", "dra-2")])
    ledger = Ledger()
    first = _filter(snap, ledger, 0)
    assert first.outcome is FilterOutcome.PLANNED and first.plan is not None, first.reason
    assert first.plan.kept_for == (("uid-train-1", "dra-2", "worker"),)
    assert first.passed in (("dra-0",), ("dra-1",))
    assert sorted(n for n, _, _ in first.plan.slots) == sorted(["dra-2", first.passed[0]])
    pinned = _filter(snap, ledger, 1, now=1.0, offered=["dra-2"])
    assert (pinned.outcome, pinned.passed) == (FilterOutcome.PINNED, ("dra-2",)), pinned.reason


def test_other_members_are_not_sent_to_the_slot_kept_for_a_pinned_one() -> None:
    # Three workers: the pinned one needs dra-2, and dra-2 could hold another worker's cpu
    # but not its GPUs; the two others go to dra-0 and dra-1, never to dra-2's kept slot.
    pods = [_member(0), _member(1), _member(2, claim_name="w2-gpus")]
    snap = _snapshot(pods, [_allocated_claim("w2-gpus", "dra-2")], workers=3)
    ledger = Ledger()
    first = _filter(snap, ledger, 0)
    assert first.plan is not None, first.reason
    second = _filter(snap, ledger, 1, now=1.0)
    assert {first.passed, second.passed} == {("dra-0",), ("dra-1",)}
    pinned = snap.pods["uid-train-2"]
    gang = snap.gang_of(pinned.uid)
    assert gang is not None
    assert open_slots(PlannedMember(pinned, gang, "worker", first.plan),
                      snapshot=snap, ledger=ledger, settings=SETTINGS) == {"dra-2"}


def test_a_plan_with_no_slot_on_a_pinned_members_node_is_made_again_around_it() -> None:
    # Planned before worker 1's claim was allocated: both slots went to dra-0 and dra-1.
    free = _snapshot([_member(0), _member(1)], [])
    ledger = Ledger()
    first = _filter(free, ledger, 0)
    assert first.plan is not None and "dra-2" not in {n for n, _, _ in first.plan.slots}
    # Its bind failed with the claim allocated on dra-2 (worker 0 went on to its node).
    after = _snapshot([_member(0, node_name=first.passed[0]), _member(1, claim_name="c")],
                      [_allocated_claim("c", "dra-2")])
    pinned = _filter(after, ledger, 1, now=1.0, offered=["dra-2"])
    assert (pinned.outcome, pinned.passed) == (FilterOutcome.PLANNED, ("dra-2",)), pinned.reason


def test_a_gang_whose_pinned_member_does_not_fit_its_node_waits_saying_why() -> None:
    # dra-2 has no cpu left for worker 1, which may go nowhere else until its claim is
    # deallocated: the gang is not planned, and waits (it would fit an empty cluster).
    snap = _snapshot([_member(0), _member(1, claim_name="w1-gpus", pod_cpu="8")],
                     [_allocated_claim("w1-gpus", "dra-2")], cpu={"dra-2": "4"})
    ledger = Ledger()
    decision = _filter(snap, ledger, 0)
    assert decision.outcome is FilterOutcome.WAITING and decision.passed == ()
    assert ledger.plan_for(snap.gang_of("uid-train-0").key) is None  # type: ignore[union-attr]
    assert "train-worker-0-1 may go only to dra-2" in decision.reason, decision.reason
    assert "cpu" in decision.reason, decision.reason


def test_a_gang_that_fits_an_empty_cluster_only_with_its_pinned_member_on_its_node_waits(
        ) -> None:
    # Planned from its templates, an empty cluster holds two of the three workers (dra-2's
    # GPUs are the allocated claim's); with the pinned worker on dra-2 it holds all three.
    # A pod of another workload fills dra-0 now: the gang waits for room, it is not refused.
    squatter = plain_pod("squatter", gpus=0)
    squatter["spec"]["nodeName"] = "dra-0"
    squatter["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "64"
    pods = [_member(0), _member(1), _member(2, claim_name="w2-gpus"), squatter]
    snap = _snapshot(pods, [_allocated_claim("w2-gpus", "dra-2")], workers=3)
    decision = _filter(snap, Ledger(), 0)
    assert decision.outcome is FilterOutcome.WAITING, decision.reason
    assert "empty cluster" not in decision.reason


def test_a_gang_without_pinned_members_keeps_no_slot_for_anyone() -> None:
    snap = _snapshot([_member(0), _member(1)], [])
    first = _filter(snap, Ledger(), 0)
    assert first.plan is not None and first.plan.kept_for == ()


def _only(node_name: str) -> tuple[NodeSelectorTerm, ...]:
    """A required node affinity naming one node."""
    return (NodeSelectorTerm(match_fields=(
        NodeSelectorRequirement("metadata.name", "In", (node_name,)),)),)


def _elastic(room_on_n2: bool) -> tuple[ClusterSnapshot, list[PodInfo]]:
    """Workers of 8 GPUs, 3 wanted and 2 enough, on n0..n2; worker 2's own pod may go to n2
    only (its affinity names it); n2 is full unless ``room_on_n2``."""
    gang = make_gang("g", roles=[("worker", 3, make_shape(gpus=8))], minimum={"worker": 2})
    pods, members = gang_pods(gang)
    pods[2] = replace(pods[2], shape=replace(pods[2].shape, affinity=_only("n2")))
    squatters = [] if room_on_n2 else [make_pod("squatter", shape=make_shape(gpus=8),
                                                node="n2", ns="other")]
    nodes = [make_node(f"n{i}", gpus=8) for i in range(3)]
    return ClusterSnapshot.of(nodes, [*pods, *squatters], [tree_of(gang)], members), pods


def test_an_extra_member_whose_node_is_full_is_left_out_and_the_minimum_planned() -> None:
    snap, pods = _elastic(room_on_n2=False)
    ledger = Ledger()
    first = decide_filter(pods[0], [NodeName("n0"), NodeName("n1")], snapshot=snap,
                          ledger=ledger, now=0.0, settings=SETTINGS)
    assert first.outcome is FilterOutcome.PLANNED and first.plan is not None, first.reason
    assert sorted(n for n, _, _ in first.plan.slots) == ["n0", "n1"]
    assert first.plan.kept_for == () and first.plan.narrowed == (pods[2].uid,)
    # Its own filter does not plan the gang again: it is an extra, and n2 has no room.
    narrowed = decide_filter(pods[2], [NodeName("n2")], snapshot=snap, ledger=ledger,
                             now=1.0, settings=SETTINGS)
    assert narrowed.outcome is FilterOutcome.SURPLUS and narrowed.passed == ()
    assert ledger.plan_for(first.plan.gang) == first.plan


def test_an_extra_member_whose_node_has_room_gets_its_slot_there() -> None:
    snap, pods = _elastic(room_on_n2=True)
    ledger = Ledger()
    first = decide_filter(pods[0], [NodeName(f"n{i}") for i in range(3)], snapshot=snap,
                          ledger=ledger, now=0.0, settings=SETTINGS)
    assert first.plan is not None, first.reason
    assert first.plan.kept_for == ((pods[2].uid, "n2", "worker"),)
    second = decide_filter(pods[1], [NodeName(f"n{i}") for i in range(3)], snapshot=snap,
                           ledger=ledger, now=1.0, settings=SETTINGS)
    assert {first.passed, second.passed} == {("n0",), ("n1",)}


def test_a_subgroups_pinned_leader_is_planned_on_its_node_its_subgroup_in_that_rack() -> None:
    # A LeaderWorkerSet group of two subgroups, each in a rack of its own; the leader's own
    # pod may go to z1 only, or x0 only: its subgroup takes that rack, the leader that node.
    gang = group()
    leader = uid(gang, "leader", 0)
    for node_name in ("z1", "x0"):
        made = snapshot(gang)
        pods = [replace(p, shape=replace(p.shape, affinity=_only(node_name)))
                if p.uid == leader else p for p in made.pods.values()]
        snap = ClusterSnapshot.of(RACKS, pods, [tree_of(gang)], dict(made.memberships))
        worker = decide_filter(snap.pods[uid(gang, "worker", 0)], RACK_NODES, snapshot=snap,
                               ledger=Ledger(), now=0.0, settings=SETTINGS)
        assert worker.plan is not None, worker.reason
        assert worker.plan.kept_for == ((leader, node_name, "leader"),)
        # Worker 0 is in the leader's subgroup: its rack.
        assert [n[0] for n in worker.passed] == [node_name[0]]
