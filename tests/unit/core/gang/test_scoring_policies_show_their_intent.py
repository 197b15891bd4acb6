"""Each scoring policy does what its name promises, seen in what a later gang can still do."""

from __future__ import annotations

from extender.core.decide.decisions import CoreSettings, decide_filter, decide_prioritize
from extender.core.gang.capacity import index_of
from extender.core.gang.charging import take
from extender.core.gang.ledger import Ledger
from extender.core.gang.nodecapacity import demand_of, empty_capacity
from extender.core.gang.placement import plan_gang
from extender.core.gang.plans import Plan
from extender.core.gang.scoring import Policy, node_score
from extender.core.model.values import NodeName, TopologyConstraint
from tests.unit.core.builders import make_gang, make_node, make_pod, make_shape, make_snapshot, uid

# n1 is fuller (2 of 4 GPUs taken whole); n2 has one device half taken by a sharing pod.
NODES = [make_node("n1", gpus=4), make_node("n2", gpus=4)]
BUSY = [make_pod("whole", shape=make_shape(gpus=2), node="n1", ns="other"),
        make_pod("half", shape=make_shape(share=500), node="n2", ns="other", devices=(0,))]


def _after(snapshot, plan):  # type: ignore[no-untyped-def]
    caps = dict(index_of(snapshot).base)
    for node, role, count in plan.slots:
        caps[node] = take(caps[node], demand_of(plan.shape(role)), count)
    return caps


def test_fragmentation_aware_fills_a_shared_device_and_keeps_whole_gpus_for_later_gangs() -> None:
    small = make_gang("small", roles=[("worker", 1, make_shape(share=500))])
    later = make_gang("later", roles=[("worker", 2, make_shape(gpus=2))])
    snap = make_snapshot(NODES, gangs=[small, later], pods=BUSY)
    base = index_of(snap).base
    tidy = plan_gang(small, snapshot=snap, capacity=base, policy=Policy.FRAGMENTATION)
    packed = plan_gang(small, snapshot=snap, capacity=base, policy=Policy.BINPACK)
    assert isinstance(tidy, Plan) and isinstance(packed, Plan)
    assert tidy.nodes_for("worker") == ("n2",)  # into the half-used device
    assert packed.nodes_for("worker") == ("n1",)  # the fuller node, splitting a whole GPU
    # What the later gang of 2 x 2 whole GPUs finds afterwards:
    assert isinstance(plan_gang(later, snapshot=snap, capacity=_after(snap, tidy)), Plan)
    assert not isinstance(plan_gang(later, snapshot=snap, capacity=_after(snap, packed)), Plan)


def test_fragmentation_scores_a_placement_that_leaves_a_sliver_lower() -> None:
    empty = empty_capacity(NODES[1])
    base = index_of(make_snapshot(NODES, pods=BUSY)).base
    share = demand_of(make_shape(share=500))
    fills = node_score(Policy.FRAGMENTATION, base[NodeName("n2")], share, empty=empty)
    splits = node_score(Policy.FRAGMENTATION, base[NodeName("n1")], share, empty=empty)
    assert (fills, splits) == (10, 9)


def test_spread_leaves_the_most_room_on_each_node_and_binpack_the_least() -> None:
    gang = make_gang("g", roles=[("worker", 2, make_shape(gpus=1))])
    snap = make_snapshot(NODES, gangs=[gang], pods=BUSY)
    base = index_of(snap).base
    spread = plan_gang(gang, snapshot=snap, capacity=base, policy=Policy.SPREAD)
    binpack = plan_gang(gang, snapshot=snap, capacity=base, policy=Policy.BINPACK)
    assert isinstance(spread, Plan) and isinstance(binpack, Plan)
    assert spread.by_node() == {"n2": {"worker": 2}}
    assert binpack.by_node() == {"n1": {"worker": 2}}


RACKS = [make_node(f"{rack}{i}", gpus=8, labels={"rack": rack}) for rack in "xy" for i in range(2)]


def _elastic_in_rack_x(topology: TopologyConstraint):  # type: ignore[no-untyped-def]
    """A gang whose minimum (2 pods) is bound in rack x; its 3rd pod is an elastic extra, and
    rack y's y0 is the fuller node (6 GPUs taken)."""
    gang = make_gang("g", roles=[("worker", 3, make_shape(gpus=1))], minimum={"worker": 2},
                     topology=topology)
    busy = [make_pod("other", shape=make_shape(gpus=6), node="y0", ns="other")]
    snap = make_snapshot(RACKS, gangs=[gang], pods=busy,
                         bound={"g-worker-0": "x0", "g-worker-1": "x0"})
    return gang, snap


def test_topology_scores_the_gangs_own_rack_above_a_fuller_node_elsewhere() -> None:
    gang, snap = _elastic_in_rack_x(TopologyConstraint("rack", required=False))
    extra = snap.pods[uid(gang, "worker", 2)]
    names = [n.name for n in RACKS]
    for policy in (Policy.TOPOLOGY, Policy.BINPACK):
        scores = dict(decide_prioritize(extra, names, snapshot=snap, ledger=Ledger(), now=0,
                                        settings=CoreSettings(scoring=policy.value)))
        assert max(scores, key=lambda n: (scores[n], n)) == "x0", (policy, scores)
        assert scores["x1"] > scores["y0"], (policy, scores)
    spread = dict(decide_prioritize(extra, names, snapshot=snap, ledger=Ledger(), now=0,
                                    settings=CoreSettings(scoring="spread")))
    assert spread["x1"] == spread["y1"]  # spread ignores the rack


def test_a_required_rack_keeps_the_whole_gang_in_one_rack_label() -> None:
    gang = make_gang("g", roles=[("worker", 4, make_shape(gpus=4))],
                     topology=TopologyConstraint("rack", required=True))
    busy = [make_pod("other", shape=make_shape(gpus=4), node="x0", ns="other")]
    snap = make_snapshot(RACKS, gangs=[gang], pods=busy)
    for policy in Policy:
        plan = plan_gang(gang, snapshot=snap, capacity=index_of(snap).base, policy=policy)
        assert isinstance(plan, Plan)
        racks = {snap.nodes[n].label("rack") for n in plan.by_node()}
        assert racks == {"y"} and plan.domain == "y", (policy, plan.by_node())


def test_the_default_prioritize_puts_planned_nodes_first_then_packing_and_tidiness() -> None:
    gang = make_gang("g", roles=[("worker", 1, make_shape(gpus=1))])
    loner = make_pod("web", shape=make_shape(share=500))
    snap = make_snapshot(NODES, gangs=[gang], pods=[*BUSY, loner])
    ledger = Ledger()
    names = [NodeName("n1"), NodeName("n2")]
    member = snap.pods[uid(gang, "worker", 0)]
    planned = decide_filter(member, names, snapshot=snap, ledger=ledger, now=0,
                            settings=CoreSettings()).passed
    scores = dict(decide_prioritize(member, names, snapshot=snap, ledger=ledger, now=0,
                                    settings=CoreSettings()))
    assert [scores[n] for n in planned] == [10] and sorted(scores.values()) == [0, 10]
    # A sharing pod: n1 is fuller, but n2's half-used device takes it without a new sliver.
    shared = dict(decide_prioritize(loner, names, snapshot=snap, ledger=Ledger(), now=0,
                                    settings=CoreSettings()))
    assert shared["n2"] > shared["n1"]
    assert all(0 <= s <= 9 for s in shared.values())
