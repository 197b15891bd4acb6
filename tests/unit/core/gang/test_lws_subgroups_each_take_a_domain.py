"""LeaderWorkerSet ``subgroup-exclusive-topology``: a group's subgroups share its roles, so
each pod says its subgroup (``subgroup-index``) and Muster ties every placed pod to its own
subgroup: a subgroup keeps the rack its pods run in, a pod is offered only its subgroup's
rack, and the group waits whole when the racks cannot each take a subgroup."""

from __future__ import annotations

from dataclasses import replace

from extender.core.decide.barrier import decide_bind
from extender.core.decide.decisions import BindOutcome, FilterOutcome, decide_filter
from extender.core.decide.graph import blocked_gangs
from extender.core.decide.settings import CoreSettings
from extender.core.gang.ledger import Ledger
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, SubgroupKind, SubgroupTopology
from tests.unit.core.builders import gang_pods, make_gang, make_node, make_shape, tree_of, uid

# Three racks of two 8-GPU nodes.
RACKS = [make_node(f"{r}{i}", gpus=8, labels={"rack": r}) for r in "xyz" for i in range(2)]
NAMES = [n.name for n in RACKS]
RACK_OF = {n.name: n.label("rack") for n in RACKS}
LABEL = "leaderworkerset.sigs.k8s.io/subgroup-index"


def group(name: str = "lws") -> Gang:
    """One LWS group of size 4 with subGroupSize 2: the leader and worker-index 1 are
    subgroup 0, worker-indexes 2 and 3 subgroup 1 (the builders' workers 0, 1, 2)."""
    shape = make_shape(gpus=8)
    gang = make_gang(name, roles=[("leader", 1, shape), ("worker", 3, shape)])
    kinds = (SubgroupKind("leader", (("leader", 1), ("worker", 1)), 1, ("0",)),
             SubgroupKind("worker", (("worker", 2),), 1, ("1",)))
    return replace(gang, subgroups=SubgroupTopology("rack", kinds, label=LABEL))


def snapshot(gang: Gang, *, bound: dict[str, str] | None = None) -> ClusterSnapshot:
    pods, members = gang_pods(gang, bound=bound)
    for key, member in members.items():
        index = 0 if member.role == "leader" else (member.replica or 0) + 1  # worker-index
        members[key] = replace(member, subgroup=str(index // 2))
    return ClusterSnapshot.of(RACKS, pods, [tree_of(gang)], members)


def _filter(snap: ClusterSnapshot, gang: Gang, ledger: Ledger, role: str, i: int):  # type: ignore[no-untyped-def]
    return decide_filter(snap.pods[uid(gang, role, i)], NAMES, snapshot=snap, ledger=ledger,
                         now=0, settings=CoreSettings())


def test_each_subgroup_is_planned_in_a_rack_of_its_own() -> None:
    gang = group()
    snap = snapshot(gang)
    ledger = Ledger()
    assert _filter(snap, gang, ledger, "leader", 0).outcome is FilterOutcome.PLANNED
    plan = ledger.plan_for(gang.key)
    assert plan is not None and plan.required == 4
    domains = dict(plan.subgroup_domains)
    assert set(domains) == {"subgroup-0", "subgroup-1"}
    assert domains["subgroup-0"] != domains["subgroup-1"]
    per_rack: dict[str, dict[str, int]] = {}
    for node, role, n in plan.slots:
        by_role = per_rack.setdefault(RACK_OF[node] or "", {})
        by_role[role] = by_role.get(role, 0) + n
    # the leader's subgroup holds the leader and one worker, the other subgroup two workers
    assert per_rack == {domains["subgroup-0"]: {"leader": 1, "worker": 1},
                        domains["subgroup-1"]: {"worker": 2}}


def test_a_pod_is_offered_only_its_own_subgroups_rack() -> None:
    gang = group()
    snap = snapshot(gang)
    ledger = Ledger()
    _filter(snap, gang, ledger, "leader", 0)
    plan = ledger.plan_for(gang.key)
    assert plan is not None
    domains = dict(plan.subgroup_domains)
    first = _filter(snap, gang, ledger, "worker", 0)   # worker-index 1: subgroup 0
    second = _filter(snap, gang, ledger, "worker", 1)  # worker-index 2: subgroup 1
    assert first.passed and {RACK_OF[n] for n in first.passed} == {domains["subgroup-0"]}
    assert second.passed and {RACK_OF[n] for n in second.passed} == {domains["subgroup-1"]}


def test_a_worker_bound_first_keeps_its_subgroup_and_the_leader_in_its_rack() -> None:
    # worker-index 1 (subgroup 0) runs in rack z before its leader is scheduled, as LWS's
    # default startup creates both at once: the leader must join it there, subgroup 1 goes
    # elsewhere. Told by roles alone, a worker in z would claim both subgroups' rack.
    gang = group()
    snap = snapshot(gang, bound={"lws-worker-0": "z1"})
    ledger = Ledger()
    decision = _filter(snap, gang, ledger, "leader", 0)
    assert decision.outcome is FilterOutcome.PLANNED, decision.reason
    assert {RACK_OF[n] for n in decision.passed} == {"z"}
    plan = ledger.plan_for(gang.key)
    assert plan is not None
    domains = dict(plan.subgroup_domains)
    assert domains["subgroup-0"] == "z" and domains["subgroup-1"] in {"x", "y"}


def test_workers_of_two_subgroups_in_one_rack_are_named_not_planned_over() -> None:
    gang = group()
    snap = snapshot(gang, bound={"lws-worker-0": "x0", "lws-worker-1": "x1"})
    decision = _filter(snap, gang, Ledger(), "leader", 0)
    assert decision.passed == ()
    assert "subgroups subgroup-0 and subgroup-1 both run in rack x" in decision.reason


def test_a_group_whose_subgroups_cannot_each_get_a_rack_waits_whole() -> None:
    other = make_gang("other", roles=[("w", 2, make_shape(gpus=1))])
    gang = group()
    pods, members = gang_pods(other, bound={"other-w-0": "x0", "other-w-1": "y0"})
    base = snapshot(gang)
    snap = ClusterSnapshot.of(RACKS, [*base.pods.values(), *pods],
                              [tree_of(gang), tree_of(other)],
                              {**base.memberships, **members})
    decision = _filter(snap, gang, Ledger(), "leader", 0)
    assert decision.outcome is FilterOutcome.WAITING and decision.passed == ()
    assert "its 2 subgroup(s) each need a rack domain of their own and only 1 can get one" \
        in decision.reason


def test_members_held_at_the_barrier_count_where_they_are_not_planned_again() -> None:
    # The leader and worker 1 (subgroup 0) are held at bind, not yet bound: the deadlock
    # check must see them there, or it plans subgroup 0 a second time and calls the healthy
    # gang blocked (then yields it).
    gang = group()
    snap = snapshot(gang)
    ledger = Ledger()
    for role, i in (("leader", 0), ("worker", 0)):
        decision = _filter(snap, gang, ledger, role, i)
        held = decide_bind(uid(gang, role, i), decision.passed[0], snapshot=snap,
                           ledger=ledger, now=0, settings=CoreSettings())
        assert held.outcome is BindOutcome.WAIT
    assert blocked_gangs(snap, ledger) == []
