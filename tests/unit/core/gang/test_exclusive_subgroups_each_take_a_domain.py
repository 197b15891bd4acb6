"""Per-subgroup exclusive domains (JobSet ``exclusive-topology``): each child Job is planned
whole inside one rack, a different rack per Job, in no rack another gang is in; a gang whose
Jobs cannot each get a rack waits whole, naming the racks tried; the leaders are released
only once the whole gang's capacity is held, the followers stage after them."""

from __future__ import annotations

from dataclasses import replace

from extender.core.decide.decisions import BindOutcome, FilterOutcome, decide_bind, decide_filter
from extender.core.decide.settings import CoreSettings
from extender.core.gang.capacity import empty_of
from extender.core.gang.ledger import Ledger
from extender.core.gang.placement import plan_gang
from extender.core.gang.plans import Infeasible, Plan
from extender.core.gang.subgroups import Fit, assign_domains, units_of
from extender.core.model.values import Gang, NodeName, SubgroupKind, SubgroupTopology
from tests.unit.core.builders import make_gang, make_node, make_shape, make_snapshot, uid

# Three racks of two 8-GPU nodes.
RACKS = [make_node(f"{r}{i}", gpus=8, labels={"rack": r}) for r in "xyz" for i in range(2)]
NAMES = [n.name for n in RACKS]
RACK_OF = {n.name: n.label("rack") for n in RACKS}


def jobset(name: str, jobs: int, *, per_job: int = 4, gpus: int = 4) -> Gang:
    """``jobs`` Jobs of ``per_job`` pods: leaders ``lead`` (stage 0), followers ``follow``."""
    shape = make_shape(gpus=gpus)
    gang = make_gang(name, roles=[("lead", jobs, shape), ("follow", jobs * (per_job - 1), shape)],
                     stages={"follow": 1})
    kind = SubgroupKind("lead", (("follow", per_job - 1), ("lead", 1)), jobs)
    return replace(gang, subgroups=SubgroupTopology("rack", (kind,)))


def racks_of(plan: Plan) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for node, role, n in plan.slots:
        by_role = out.setdefault(RACK_OF[node] or "", {})
        by_role[role] = by_role.get(role, 0) + n
    return out


def _filter(snap, gang, ledger, role="lead", i=0):  # type: ignore[no-untyped-def]
    return decide_filter(snap.pods[uid(gang, role, i)], NAMES, snapshot=snap, ledger=ledger,
                         now=0, settings=CoreSettings())


def test_each_job_is_planned_whole_in_a_rack_of_its_own() -> None:
    gang = jobset("js", 2)
    snap = make_snapshot(RACKS, gangs=[gang])
    ledger = Ledger()
    assert _filter(snap, gang, ledger).outcome is FilterOutcome.PLANNED
    plan = ledger.plan_for(gang.key)
    assert plan is not None and plan.required == 8
    per_rack = racks_of(plan)
    assert len(per_rack) == 2
    assert all(roles == {"lead": 1, "follow": 3} for roles in per_rack.values())
    assert sorted(d for _, d in plan.subgroup_domains) == sorted(per_rack)


def test_jobs_skip_a_rack_another_gang_is_in_even_where_binpack_would_choose_it() -> None:
    other = make_gang("other", roles=[("w", 1, make_shape(gpus=1))])
    gang = jobset("js", 2, per_job=2)  # each Job fits one node: binpack likes the busy rack
    snap = make_snapshot(RACKS, gangs=[other, gang], bound={"other-w-0": "x0"})
    ledger = Ledger()
    assert _filter(snap, gang, ledger).outcome is FilterOutcome.PLANNED
    plan = ledger.plan_for(gang.key)
    assert plan is not None and set(racks_of(plan)) == {"y", "z"}


def test_a_jobset_needing_more_racks_than_are_free_waits_whole_naming_the_racks() -> None:
    other = make_gang("other", roles=[("w", 1, make_shape(gpus=1))])
    gang = jobset("js", 3, per_job=2)  # 3 small Jobs: the whole cluster has room, not 3 racks
    snap = make_snapshot(RACKS, gangs=[other, gang], bound={"other-w-0": "x0"})
    decision = _filter(snap, gang, Ledger())
    assert decision.outcome is FilterOutcome.WAITING and decision.passed == ()
    assert decision.reason.startswith(
        "gang ml/js: its 3 subgroup(s) each need a rack domain of their own and only 2 can "
        "get one (1 left, e.g. lead-2). Domains tried: y: fits a lead subgroup; z: fits a "
        "lead subgroup; taken: x (gang ml/other is there)")


def test_a_job_too_big_for_any_rack_waits_naming_each_racks_shortfall() -> None:
    gang = jobset("js", 1, per_job=5)  # 20 GPUs: a rack has 16
    result = plan_gang(gang, snapshot=make_snapshot(RACKS, gangs=[gang]),
                       capacity=empty_of(make_snapshot(RACKS, gangs=[gang]), gpu="nvidia.com/gpu"))
    assert isinstance(result, Infeasible)
    assert "only 0 can get one" in result.reason
    assert "x: does not fit a lead subgroup (4 of 5 pods fit" in result.reason


def test_other_gangs_keep_out_of_the_racks_the_jobs_hold() -> None:
    gang = jobset("js", 2)
    other = make_gang("other", roles=[("w", 1, make_shape(gpus=1))])
    snap = make_snapshot(RACKS, gangs=[gang, other])
    ledger = Ledger()
    _filter(snap, gang, ledger)
    plan = ledger.plan_for(gang.key)
    assert plan is not None
    decision = decide_filter(snap.pods[uid(other, "w", 0)], NAMES, snapshot=snap,
                             ledger=ledger, now=0, settings=CoreSettings())
    held = set(racks_of(plan))
    assert decision.passed and all(RACK_OF[n] not in held for n in decision.passed)


def test_a_job_whose_leader_is_bound_keeps_its_followers_in_the_leaders_rack() -> None:
    gang = jobset("js", 2)
    snap = make_snapshot(RACKS, gangs=[gang], bound={"js-lead-0": "z1"})
    ledger = Ledger()
    _filter(snap, gang, ledger, role="lead", i=1)
    plan = ledger.plan_for(gang.key)
    assert plan is not None
    per_rack = racks_of(plan)
    assert per_rack["z"] == {"follow": 3}  # lead-0 runs there; its followers join it
    assert sorted(per_rack) != ["z"] and len(per_rack) == 2


def test_leaders_are_released_together_then_followers_as_a_later_stage() -> None:
    gang = jobset("js", 2)
    snap = make_snapshot(RACKS, gangs=[gang])
    ledger = Ledger()
    settings = CoreSettings()
    first = _filter(snap, gang, ledger, i=0)
    node0 = first.passed[0]
    assert decide_bind(uid(gang, "lead", 0), node0, snapshot=snap, ledger=ledger, now=0,
                       settings=settings).outcome is BindOutcome.WAIT
    second = _filter(snap, gang, ledger, i=1)
    node1 = next(n for n in second.passed if RACK_OF[n] != RACK_OF[node0])
    both = decide_bind(uid(gang, "lead", 1), node1, snapshot=snap, ledger=ledger, now=0.1,
                       settings=settings)
    assert both.outcome is BindOutcome.BIND and len(both.release) == 2
    plan = ledger.plan_for(gang.key)
    assert plan is not None  # the followers' capacity is still held for them
    assert sum(n for _, r, n in plan.slots if r == "follow") == 6
    assert NodeName(node0) in {n for n, r, _ in plan.slots if r == "lead"}


def _fits(table: dict[tuple[str, str], tuple[int, ...] | None]):  # type: ignore[no-untyped-def]
    """A ``try_in`` from a table: (kind's first role, domain) -> cost, or None: no fit."""
    def try_in(pods: tuple[tuple[str, int], ...], domain: str) -> Fit:
        cost = table.get((pods[0][0], domain))
        if cost is None:
            return Fit(None, placed=0, why="too small")
        return Fit(((NodeName(f"{domain}0"), pods[0][0], 1),), cost=cost)
    return try_in


def test_a_subgroup_only_one_domain_fits_gets_it_even_if_another_subgroup_preferred_it() -> None:
    big = SubgroupKind("big", (("big", 1),), 1)
    small = SubgroupKind("small", (("small", 1),), 1)
    units, broken = units_of(SubgroupTopology("rack", (small, big)), {})
    assert broken is None
    # small prefers x (cheaper) but also fits y; big fits only x.
    found = assign_domains(units, ["x", "y"], key="rack", taken={}, try_in=_fits(
        {("small", "x"): (0,), ("small", "y"): (5,), ("big", "x"): (0,)}))
    assert found.ok and {u.name: d for u, d, _ in found.chosen} == {"small-0": "y",
                                                                   "big-0": "x"}


def test_placed_pods_pin_their_subgroup_and_two_subgroups_in_one_domain_are_refused() -> None:
    kind = SubgroupKind("lead", (("follow", 1), ("lead", 1)), 2)
    sub = SubgroupTopology("rack", (kind,))
    units, broken = units_of(sub, {"y": {"lead": 1}})
    assert broken is None
    assert [(u.name, u.domain, u.need) for u in units] == [
        ("lead-0", "y", (("follow", 1), ("lead", 0))), ("lead-1", None, kind.pods)]
    _, broken = units_of(sub, {"x": {"lead": 1}, "y": {"lead": 1}, "z": {"follow": 1}})
    assert broken == "pods of its 2 lead subgroup(s) run in 3 rack domains (x, y, z)"


def with_ps(ps: int, *, gpus: int = 4) -> Gang:
    """Two exclusive Jobs of a leader and a follower (``gpus`` each) and ``ps`` pods of 4 GPUs
    of a replicatedJob that asks for no domain."""
    shape = make_shape(gpus=gpus)
    gang = make_gang("js", roles=[("lead", 2, shape), ("follow", 2, shape),
                                  ("ps", ps, make_shape(gpus=4))], stages={"follow": 1})
    kind = SubgroupKind("lead", (("follow", 1), ("lead", 1)), 2)
    return replace(gang, subgroups=SubgroupTopology("rack", (kind,)))


def test_a_role_in_no_subgroup_shares_the_jobs_racks_on_what_they_leave_free() -> None:
    # Two racks only: each Job takes one, and ps (which JobSet's exclusive leaders do not
    # repel: their anti-affinity selects exclusive Jobs' pods only) runs beside them.
    two = [n for n in RACKS if RACK_OF[n.name] in ("x", "y")]
    gang = with_ps(2)
    snap = make_snapshot(two, gangs=[gang])
    ledger = Ledger()
    decision = decide_filter(snap.pods[uid(gang, "lead", 0)], [n.name for n in two],
                             snapshot=snap, ledger=ledger, now=0, settings=CoreSettings())
    assert decision.outcome is FilterOutcome.PLANNED, decision.reason
    plan = ledger.plan_for(gang.key)
    assert plan is not None and plan.required == 6
    per_rack = racks_of(plan)
    assert all(per_rack[d]["lead"] == 1 and per_rack[d]["follow"] == 1
               for _, d in plan.subgroup_domains)
    assert sum(r.get("ps", 0) for r in per_rack.values()) == 2
    used: dict[str, int] = {}
    for node, _, n in plan.slots:  # 4 GPUs a pod, 8 a node: never more than two a node
        used[node] = used.get(node, 0) + n
    assert max(used.values()) <= 2


def test_a_role_in_no_subgroup_closes_no_rack_to_other_gangs() -> None:
    # Each Job needs a whole rack (2 x 8 GPUs); ps runs on x0, so the Jobs take y and z.
    # Rack x holds only ps, a pod of no exclusive Job: another gang may still go there.
    gang = with_ps(1, gpus=8)
    other = make_gang("other", roles=[("w", 1, make_shape(gpus=4))])
    snap = make_snapshot(RACKS, gangs=[gang, other], bound={"js-ps-0": "x0"})
    ledger = Ledger()
    assert _filter(snap, gang, ledger).outcome is FilterOutcome.PLANNED
    plan = ledger.plan_for(gang.key)
    assert plan is not None and {d for _, d in plan.subgroup_domains} == {"y", "z"}
    decision = decide_filter(snap.pods[uid(other, "w", 0)], NAMES, snapshot=snap,
                             ledger=ledger, now=0, settings=CoreSettings())
    assert decision.passed and {RACK_OF[n] for n in decision.passed} == {"x"}
