"""Whole-gang placement: per node, deterministic, topology-aware, with reasons people act on."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from extender.core.decide.decisions import FilterOutcome, decide_filter
from extender.core.decide.fit import fit_workload
from extender.core.decide.settings import CoreSettings
from extender.core.gang.capacity import index_of
from extender.core.gang.charging import take
from extender.core.gang.ledger import Ledger
from extender.core.gang.nodecapacity import Demand, NodeCapacity, demand_of, empty_capacity
from extender.core.gang.packing import place_gang
from extender.core.gang.placement import plan_gang
from extender.core.gang.plans import Infeasible, Plan, RoleDemand
from extender.core.gang.scoring import Policy
from extender.core.model.resources import Resources
from extender.core.model.values import NodeName, PodInfo, Taint, TopologyConstraint
from tests.unit.core.builders import (
    make_gang,
    make_node,
    make_pod,
    make_shape,
    make_snapshot,
    tree_of,
    uid,
)


def _plan(gang, snapshot, **kw):  # type: ignore[no-untyped-def]
    return plan_gang(gang, snapshot=snapshot, capacity=index_of(snapshot).base, **kw)


def test_fragmented_gpus_summing_to_enough_do_not_fit_a_pod_needing_one_node() -> None:
    nodes = [make_node("a", gpus=8), make_node("b", gpus=8)]
    busy = [make_pod("x", shape=make_shape(gpus=4), node="a"),
            make_pod("y", shape=make_shape(gpus=4), node="b")]
    gang = make_gang("llama", roles=[("worker", 1, make_shape(gpus=8))])
    result = _plan(gang, make_snapshot(nodes, gangs=[gang], pods=busy))
    assert isinstance(result, Infeasible)  # 8 GPUs free in sum, 4 per node
    assert result.reason == ("gang ml/llama: 0 of 1 pods fit; a worker needs 8 nvidia.com/gpu "
                             "on one node, the largest free is 4")


def test_the_reason_counts_how_many_pods_fit() -> None:
    nodes = [make_node("a", gpus=8), make_node("b", gpus=8)]
    busy = [make_pod("x", shape=make_shape(gpus=4), node="b")]
    gang = make_gang("llama", roles=[("worker", 4, make_shape(gpus=4))])
    result = _plan(gang, make_snapshot(nodes, gangs=[gang], pods=busy))
    assert isinstance(result, Infeasible)
    # Which pods fit and what the one left lacks, not "3 fit" beside "the largest free is 0".
    assert result.reason == ("gang ml/llama: 3 of 4 pods fit; the worker pod left needs 4 "
                             "nvidia.com/gpu on one node, the largest free is 0 once those "
                             "that fit are placed")
    assert (result.placed, result.needed) == (3, 4)


def test_cpu_not_gpu_can_be_the_limit() -> None:
    nodes = [make_node("a", gpus=8, cpu=16)]
    gang = make_gang("g", roles=[("worker", 2, make_shape(gpus=2, cpu=12))])
    result = _plan(gang, make_snapshot(nodes, gangs=[gang]))
    assert isinstance(result, Infeasible)
    assert "1 of 2 pods fit" in result.reason
    assert "needs cpu=12 on one node, the largest free is 4" in result.reason


def test_taints_can_be_the_limit_and_the_reason_says_so() -> None:
    nodes = [make_node("a", taints=[Taint("dedicated", "infer", "NoSchedule")])]
    gang = make_gang("g", roles=[("worker", 1, make_shape(gpus=1))])
    result = _plan(gang, make_snapshot(nodes, gangs=[gang]))
    assert isinstance(result, Infeasible)
    assert "no node accepts a worker: 1 node: taint dedicated=infer:NoSchedule" in result.reason


def test_roles_of_different_shapes_share_nodes_and_the_plan_is_per_node() -> None:
    nodes = [make_node("a", gpus=8), make_node("b", gpus=8)]
    gang = make_gang("g", roles=[("leader", 1, make_shape(cpu=4)),
                                 ("worker", 4, make_shape(gpus=4))])
    plan = _plan(gang, make_snapshot(nodes, gangs=[gang]))
    assert isinstance(plan, Plan)
    assert plan.pods == 5
    for node, roles in plan.by_node().items():
        gpus = roles.get("worker", 0) * 4
        assert gpus <= 8, node


def test_binpack_fills_the_fullest_node_and_spread_the_emptiest() -> None:
    nodes = [make_node("a", gpus=8), make_node("b", gpus=8)]
    busy = [make_pod("x", shape=make_shape(gpus=4), node="b")]
    gang = make_gang("g", roles=[("worker", 1, make_shape(gpus=2))])
    snap = make_snapshot(nodes, gangs=[gang], pods=busy)
    binpack, spread = _plan(gang, snap), _plan(gang, snap, policy=Policy.SPREAD)
    assert isinstance(binpack, Plan) and isinstance(spread, Plan)
    assert binpack.nodes_for("worker") == ("b",)
    assert spread.nodes_for("worker") == ("a",)


def test_required_topology_keeps_the_gang_in_one_domain_and_picks_the_fullest() -> None:
    nodes = [make_node(f"{r}{i}", gpus=8, labels={"rack": r}) for r in "xyz" for i in range(2)]
    busy = [make_pod("p", shape=make_shape(gpus=2), node="y0")]
    gang = make_gang("g", roles=[("worker", 3, make_shape(gpus=4))],
                     topology=TopologyConstraint("rack", required=True))
    plan = _plan(gang, make_snapshot(nodes, gangs=[gang], pods=busy))
    assert isinstance(plan, Plan)
    assert plan.domain == "y"
    assert {n[0] for n in plan.by_node()} == {"y"}


def test_required_topology_fails_when_only_two_domains_together_would_fit() -> None:
    nodes = [make_node(f"{r}0", gpus=8, labels={"rack": r}) for r in "xy"]
    gang = make_gang("g", roles=[("worker", 2, make_shape(gpus=8))],
                     topology=TopologyConstraint("rack", required=True))
    result = _plan(gang, make_snapshot(nodes, gangs=[gang]))
    assert isinstance(result, Infeasible)
    assert "no single rack domain holds it; the best, x, fits 1 of 2 pods" in result.reason
    preferred = make_gang("g", roles=[("worker", 2, make_shape(gpus=8))],
                          topology=TopologyConstraint("rack", required=False))
    assert isinstance(_plan(preferred, make_snapshot(nodes, gangs=[preferred])), Plan)


def test_elastic_gangs_plan_the_minimum_and_add_extras_only_where_they_fit() -> None:
    nodes = [make_node("a", gpus=8)]
    gang = make_gang("g", roles=[("worker", 4, make_shape(gpus=4))], minimum={"worker": 1})
    plan = _plan(gang, make_snapshot(nodes, gangs=[gang]))
    assert isinstance(plan, Plan)
    assert plan.required == 1
    assert plan.pods == 2


def test_members_already_placed_count_toward_the_minimum() -> None:
    nodes = [make_node("a", gpus=8)]
    gang = make_gang("g", roles=[("worker", 3, make_shape(gpus=4))])
    plan = _plan(gang, make_snapshot(nodes, gangs=[gang]), placed={"worker": 2})
    assert isinstance(plan, Plan)
    assert plan.slots == (("a", "worker", 1),)


def test_search_finds_what_greedy_best_fit_misses() -> None:
    # Largest-first best fit puts "big" on a (fullest by GPUs), "small" on b, and then the
    # CPU-only pod finds 2 and 1 CPUs left. Swapping big and small leaves a with 3 CPUs.
    nodes = [make_node("a", gpus=2, cpu=4), make_node("b", gpus=4, cpu=2)]
    gang = make_gang("g", roles=[("big", 1, make_shape(gpus=2, cpu=2)),
                                 ("small", 1, make_shape(gpus=2, cpu=1)),
                                 ("cpu", 1, make_shape(gpus=0, cpu=3))])
    plan = _plan(gang, make_snapshot(nodes, gangs=[gang]))
    assert isinstance(plan, Plan)
    assert plan.by_node() == {"a": {"cpu": 1, "small": 1}, "b": {"big": 1}}
    _assert_plan_fits(plan, {n.name: empty_capacity(n) for n in nodes}, gang)


def _assert_plan_fits(plan, caps, gang) -> None:  # type: ignore[no-untyped-def]
    for node, role, count in plan.slots:
        member = gang.member(role)
        caps[node] = take(caps[node], demand_of(member.shape), count)  # raises if it overflows


def test_placement_is_deterministic() -> None:
    nodes = [make_node(f"n{i}", gpus=8) for i in range(20)]
    gang = make_gang("g", roles=[("worker", 9, make_shape(gpus=3))])
    snap = make_snapshot(nodes, gangs=[gang])
    assert _plan(gang, snap) == _plan(gang, snap)


# ---- completeness: never weaker than exhaustive search on small instances ----------------

_node_caps = st.tuples(st.integers(0, 4), st.integers(1, 8), st.integers(0, 1))
_shapes = st.tuples(st.integers(0, 3), st.integers(0, 4), st.sampled_from([0, 0, 300, 600]))


@given(
    nodes=st.lists(_node_caps, min_size=1, max_size=4),
    roles=st.lists(st.tuples(_shapes, st.integers(1, 3)), min_size=1, max_size=3),
)
def test_whenever_exhaustive_search_finds_a_placement_the_planner_does(
    nodes: list[tuple[int, int, int]], roles: list[tuple[tuple[int, int, int], int]]
) -> None:
    infos = [make_node(f"n{i}", gpus=g, cpu=c, labels={"pool": "p" if p else "q"})
             for i, (g, c, p) in enumerate(nodes)]
    role_demands = []
    total = 0
    for i, ((gpus, cpu, share), wanted) in enumerate(roles):
        count = min(wanted, 6 - total)
        if count <= 0:
            break
        total += count
        shape = make_shape(gpus=0 if share else gpus, cpu=cpu, share=share,
                           selector={"pool": "p"} if i == 2 else None)
        role_demands.append(RoleDemand(f"r{i}", shape, need=count))
    caps = {n.name: empty_capacity(n) for n in infos}
    eligible = {
        rd.role: tuple(n.name for n in infos
                       if not rd.shape.node_selector or n.label("pool") == "p")
        for rd in role_demands
    }
    # Exhaustive search honours eligibility by treating ineligible nodes as full.
    possible = _exhaustive_eligible(role_demands, caps, eligible)
    result = place_gang("ns/g", role_demands, capacity=caps, eligible=eligible)  # type: ignore[arg-type]
    assert isinstance(result, Plan) == possible
    if isinstance(result, Plan):
        on: dict[str, list[Demand]] = {n: [] for n in caps}
        for node, role, count in result.slots:
            assert node in eligible[role]
            rd = next(r for r in role_demands if r.role == role)
            on[node] += [demand_of(rd.shape)] * count
        assert all(_node_holds(caps[n], ds) for n, ds in on.items())


def _shares_pack(bins: tuple[int, ...], shares: tuple[int, ...]) -> bool:
    if not shares:
        return True
    for i, room in enumerate(bins):
        if room >= shares[0] and room not in bins[:i]:
            rest = (*bins[:i], room - shares[0], *bins[i + 1:])
            if _shares_pack(rest, shares[1:]):
                return True
    return False


def _node_holds(cap: NodeCapacity, demands: list[Demand]) -> bool:
    """Exact: the pods fit the node, each share on one device, whatever the order."""
    used = sum((d.scalar for d in demands), start=Resources())
    if not used.fits_in(cap.free) or (cap.pods is not None and len(demands) > cap.pods):
        return False
    whole = sum(d.whole for d in demands)
    if whole > cap.whole_free:
        return False
    bins = tuple(d for d in cap.devices if d > 0)
    bins = tuple(sorted(bins))[: len(bins) - whole] if whole else bins  # whole ones go first
    return _shares_pack(bins, tuple(sorted((d.share for d in demands if d.share), reverse=True)))


def _exhaustive_eligible(role_demands, caps, eligible) -> bool:  # type: ignore[no-untyped-def]
    pods = [(rd.role, demand_of(rd.shape)) for rd in role_demands for _ in range(rd.need)]
    names = sorted(caps)
    for combo in itertools.product(names, repeat=len(pods)):
        if any(n not in eligible[r] for (r, _), n in zip(pods, combo, strict=True)):
            continue
        on: dict[str, list[Demand]] = {n: [] for n in names}
        for (_, d), n in zip(pods, combo, strict=True):
            on[n].append(d)
        if all(_node_holds(caps[n], ds) for n, ds in on.items()):
            return True
    return False


# ---- the rest of a partly placed gang keeps to the domain its members run in -------------

_RACKS = [make_node(f"{r}{i}", gpus=8, labels={"rack": r}) for r in "xy" for i in range(2)]


def _fuller_y() -> list[PodInfo]:
    """Rack y is fuller than x, so binpack would plan a fresh gang (or a 4-GPU pod) there."""
    return [make_pod("y0-busy", shape=make_shape(gpus=6), node="y0", ns="other"),
            make_pod("y1-busy", shape=make_shape(gpus=4), node="y1", ns="other")]


def test_after_a_restart_the_rest_of_a_rack_bound_gang_is_planned_in_its_rack() -> None:
    gang = make_gang("g", roles=[("worker", 2, make_shape(gpus=4))],
                     topology=TopologyConstraint("rack", required=True))
    snap = make_snapshot(_RACKS, gangs=[gang], pods=_fuller_y(), bound={"g-worker-0": "x0"})
    fresh = _plan(gang, snap, placed={"worker": 1})
    assert isinstance(fresh, Plan) and fresh.domain == "y"  # what it did before
    ledger = Ledger()
    ledger.rebuild(snap, now=0, ttl=30)
    plan = ledger.plan_for(gang.key)
    assert plan is not None and plan.domain == "x"
    assert {n for n, _, _ in plan.slots} <= {"x0", "x1"}
    x_full = [make_pod("x1-full", shape=make_shape(gpus=8), node="x1", ns="other"),
              make_pod("x0-more", shape=make_shape(gpus=4), node="x0", ns="other")]
    full = make_snapshot(_RACKS, gangs=[gang], pods=[*_fuller_y(), *x_full],
                         bound={"g-worker-0": "x0"})
    result = _plan(gang, full, placed={"worker": 1}, within="x")
    assert isinstance(result, Infeasible)
    assert result.reason.startswith("gang ml/g: its placed members run in rack x, which fits 0 "
                                    "of the 1 pods it still needs; a worker needs 4")


def test_an_elastic_extra_of_a_rack_bound_gang_is_filtered_to_its_rack() -> None:
    gang = make_gang("g", roles=[("worker", 4, make_shape(gpus=4))], minimum={"worker": 2},
                     topology=TopologyConstraint("rack", required=True))
    snap = make_snapshot(_RACKS, gangs=[gang], pods=_fuller_y(),
                         bound={"g-worker-0": "x0", "g-worker-1": "x0"})
    names = [n.name for n in _RACKS]
    # No plan left: the extras are planned, inside rack x.
    ledger = Ledger()
    ledger.admit(gang.key, now=0)
    extra = snap.pods[uid(gang, "worker", 2)]
    planned = decide_filter(extra, names, snapshot=snap, ledger=ledger, now=1,
                            settings=CoreSettings())
    assert planned.passed == ("x1",)
    # A plan used up (its slots filled): the extra goes where it fits, still inside rack x.
    used_up = Ledger()
    used_up.reserve(Plan(gang.key, ((NodeName("x0"), "worker", 2),),
                         shapes=(("worker", gang.members[0].shape),), domain="x"),
                    now=0, ttl=30)
    used_up.admit(gang.key, now=0)
    surplus = decide_filter(extra, names, snapshot=snap, ledger=used_up, now=1,
                            settings=CoreSettings())
    assert surplus.outcome is FilterOutcome.SURPLUS
    assert surplus.passed == ("x1",)
    assert surplus.unresolvable["y1"] == "gang ml/g keeps to rack x, where its members run"


def test_fit_plans_the_rest_of_a_gang_in_the_rack_its_bound_members_are_in() -> None:
    gang = make_gang("g", roles=[("worker", 2, make_shape(gpus=4))],
                     topology=TopologyConstraint("rack", required=True))
    busy = [make_pod("x0-busy", shape=make_shape(gpus=4), node="x0", ns="other")]
    snap = make_snapshot(_RACKS, gangs=[gang], pods=busy, bound={"g-worker-0": "y1"})
    assert _plan(gang, snap, placed={"worker": 1}).domain == "x"  # type: ignore[union-attr]
    (fit,) = fit_workload(tree_of(gang), snap).gangs
    assert fit.fits and dict(fit.plan) == {"y1": {"worker": 2}}
