"""Ungating: a gated gang leaves its gates together once its whole plan is made, exactly as
its first member's filter would have made it; a gang that does not fit stays gated, says why,
and is looked at again only when something could help; ungated pods are decided as strictly."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import pytest

from extender.core.decide import gating
from extender.core.decide.decisions import FilterOutcome
from extender.core.decide.effects import BindStep, Effect, Emit, Step, Ungate
from extender.core.decide.session import GangSession
from extender.core.decide.settings import CoreSettings
from extender.core.model.notices import PodEvent, PodRef, WorkloadEvent
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, Membership, NodeInfo, NodeName, PodInfo
from tests.unit.core.builders import gang_pods, make_gang, make_node, make_pod, make_shape, tree_of

GATE = "muster.dev/gang"
SETTINGS = CoreSettings(scheduler_names=("muster",), gate_bound=60.0, gate_retry=10.0)
NODES = [make_node("n1"), make_node("n2")]


def gated(pod: PodInfo, *, gate: bool = True, scheduler: str = "muster") -> PodInfo:
    return replace(pod, gates=(GATE, "other.io/keep") if gate else ("other.io/keep",),
                   scheduler_name=scheduler)


def world(gangs: Sequence[Gang], *, nodes: Iterable[NodeInfo] = NODES,
          present: set[str] | None = None, ungated: set[str] = frozenset(),  # type: ignore[assignment]
          bound: dict[str, str] | None = None, extra: Sequence[PodInfo] = (),
          revision: int = 1, unresolved: dict[str, str] | None = None) -> ClusterSnapshot:
    """Each gang's pods (those named in ``present``, or all), gated unless named in
    ``ungated`` or ``bound``."""
    pods: list[PodInfo] = list(extra)
    members: dict[str, Membership] = {}
    for gang in gangs:
        gp, gm = gang_pods(gang, bound=bound)
        for pod in gp:
            if present is not None and pod.name not in present:
                continue
            keep = pod.name in ungated or pod.node_name is not None
            pods.append(gated(pod, gate=not keep))
            members[pod.uid] = gm[pod.uid]
    return ClusterSnapshot.of(nodes, pods, [tree_of(g) for g in gangs], members,
                              revision=revision, unresolved=unresolved)


def ungates(effects: Iterable[Effect]) -> list[Ungate]:
    return [e for e in effects if isinstance(e, Ungate)]


def ungated_names(effects: Iterable[Effect]) -> list[str]:
    return sorted(p.name for u in ungates(effects) for p in u.pods)


def pod_events(effects: Iterable[Effect], reason: str) -> list[PodEvent]:
    return [e.event for e in effects if isinstance(e, Emit) and isinstance(e.event, PodEvent)
            and e.event.reason == reason]


def workload_events(effects: Iterable[Effect], reason: str) -> list[WorkloadEvent]:
    return [e.event for e in effects if isinstance(e, Emit)
            and isinstance(e.event, WorkloadEvent) and e.event.reason == reason]


def trio() -> Gang:
    return make_gang("trio", roles=[("worker", 3, make_shape(gpus=4))])


def test_a_gathering_gang_says_so_on_its_workload_once_not_once_per_member_created() -> None:
    gang = make_gang("big", roles=[("worker", 6, make_shape(gpus=1))])
    session = GangSession(SETTINGS)
    said = []
    for n in range(1, 6):  # the operator creates members 0..n-1, one event each
        present = {f"big-worker-{i}" for i in range(n)}
        effects = session.ungate(world([gang], present=present, revision=n), now=float(n))
        said += workload_events(effects, "GangGathering")
        assert f"{n} of its minimum 6" in session.last_reason[gang.key]  # the count is kept
    assert len(said) == 1
    effects = session.ungate(world([gang], revision=6), now=6.0)
    assert ungates(effects) and workload_events(effects, "GangUngated")


def test_a_gang_of_three_is_ungated_together_only_once_all_exist_and_its_plan_is_made() -> None:
    gang = trio()
    session = GangSession(SETTINGS)
    two = world([gang], present={"trio-worker-0", "trio-worker-1"})
    effects = session.ungate(two, now=0.0)
    assert ungates(effects) == []
    assert session.ledger.plan_for(gang.key) is None  # nothing reserved for a gathering gang
    assert workload_events(effects, "GangGathering")
    assert "2 of its minimum 3" in session.last_reason[gang.key]

    effects = session.ungate(world([gang], revision=2), now=1.0)
    [ungate] = ungates(effects)
    assert sorted(p.name for p in ungate.pods) == [f"trio-worker-{i}" for i in range(3)]
    assert ungate.gang == gang.key
    plan = session.ledger.plan_for(gang.key)
    assert plan is not None
    # The same plan and reservation the first member's filter would have made.
    twin = GangSession(SETTINGS)
    snap = world([gang], revision=2)
    first = next(p for p in snap.pods.values() if p.name == "trio-worker-0")
    step = twin.filter(first, list(snap.nodes), snapshot=snap, now=1.0)
    assert step.decision.outcome is FilterOutcome.PLANNED
    twin_plan = twin.ledger.plan_for(gang.key)
    assert twin_plan is not None and sorted(twin_plan.slots) == sorted(plan.slots)
    assert session.ledger.reservation(gang.key) == twin.ledger.reservation(gang.key)
    assert workload_events(effects, "GangUngated")


def test_members_ungated_are_pinned_by_filter_to_the_plan_ungating_made() -> None:
    gang = trio()
    session = GangSession(SETTINGS)
    session.ungate(world([gang]), now=0.0)
    plan = session.ledger.plan_for(gang.key)
    assert plan is not None
    after = world([gang], ungated={f"trio-worker-{i}" for i in range(3)}, revision=2)
    for pod in sorted(after.pods.values(), key=lambda p: p.key):
        step = session.filter(pod, list(after.nodes), snapshot=after, now=1.0)
        assert step.decision.outcome is FilterOutcome.PINNED
        assert set(step.decision.passed) <= set(plan.nodes_for("worker"))


def test_a_gang_that_does_not_fit_stays_gated_saying_what_filter_would_say() -> None:
    gang = make_gang("big", roles=[("worker", 2, make_shape(gpus=8))])
    blocker = make_pod("blocker", shape=make_shape(gpus=8), node="n2")
    snap = world([gang], extra=[blocker])
    session = GangSession(SETTINGS)
    effects = session.ungate(snap, now=0.0)
    assert ungates(effects) == []
    assert session.ledger.plan_for(gang.key) is None
    twin = GangSession(SETTINGS)
    first = next(p for p in snap.pods.values() if p.name == "big-worker-0")
    told = twin.filter(first, list(snap.nodes), snapshot=snap, now=0.0).decision
    assert told.outcome is FilterOutcome.WAITING
    assert session.last_reason[gang.key] == told.reason
    [said] = workload_events(effects, "GangWaiting")  # the workload hears it at once
    assert told.reason in said.message
    assert pod_events(effects, "GangWaiting") == []  # its pods once it waited a while
    assert pod_events(session.ungate(snap, now=SETTINGS.pod_events_after - 0.1),
                      "GangWaiting") == []
    waiting = pod_events(session.ungate(snap, now=SETTINGS.pod_events_after), "GangWaiting")
    assert sorted(e.pod.name for e in waiting) == ["big-worker-0", "big-worker-1"]
    assert all(told.reason in e.message for e in waiting)
    assert session.ungate(snap, now=SETTINGS.pod_events_after + 1) == ()  # told once


def test_a_gang_ungated_within_the_wait_never_tells_its_pods_and_a_later_wait_starts_over(
) -> None:
    gang = make_gang("big", roles=[("worker", 2, make_shape(gpus=8))])
    blocker = make_pod("blocker", shape=make_shape(gpus=8), node="n2")
    after = SETTINGS.pod_events_after
    session = GangSession(SETTINGS)
    seen = list(session.ungate(world([gang], extra=[blocker]), now=0.0))
    # The blocker goes before the gang waited long: it is ungated, its pods never told.
    seen += session.ungate(world([gang], revision=2), now=after / 2)
    assert ungated_names(seen) == ["big-worker-0", "big-worker-1"]
    seen += session.ungate(world([gang], revision=2), now=after * 2)
    assert pod_events(seen, "GangWaiting") == []
    # A gang that waits, is told, and then fits, is told afresh the next time it waits.
    other = make_gang("other", roles=[("worker", 2, make_shape(gpus=8))])
    session = GangSession(SETTINGS)
    blocked = world([other], extra=[blocker])
    session.ungate(blocked, now=0.0)
    assert len(pod_events(session.ungate(blocked, now=after), "GangWaiting")) == 2
    session.pod_news.settled(other.key)  # as when it is ungated
    assert pod_events(session.ungate(world([other], extra=[blocker], revision=3), now=after + 1),
                      "GangWaiting") == []


def test_only_pods_still_gated_are_told_and_once_told_a_new_reason_is_told_at_once(
) -> None:
    gang = make_gang("big", roles=[("worker", 2, make_shape(gpus=8))])
    after = SETTINGS.pod_events_after
    both = [make_pod(f"blocker-{n}", shape=make_shape(gpus=8), node=n) for n in ("n1", "n2")]
    session = GangSession(SETTINGS)
    session.ungate(world([gang], extra=both), now=0.0)
    # Someone removed one member's gate by hand while the gang waited: only the other is
    # told (the ungated one is kube-scheduler's now, and its filter says why).
    by_hand = {"big-worker-0"}
    told = pod_events(session.ungate(world([gang], extra=both, ungated=by_hand, revision=2),
                                     now=after), "GangWaiting")
    assert [e.pod.name for e in told] == ["big-worker-1"]
    # One blocker goes: the gang still does not fit, for a new reason, told without a wait.
    again = pod_events(session.ungate(world([gang], extra=both[1:], ungated=by_hand,
                                            revision=3), now=after + 1), "GangWaiting")
    assert [e.pod.name for e in again] == ["big-worker-1"]
    assert again[0].message != told[0].message


def test_pods_are_told_at_once_when_the_wait_is_zero() -> None:
    gang = make_gang("big", roles=[("worker", 2, make_shape(gpus=8))])
    blocker = make_pod("blocker", shape=make_shape(gpus=8), node="n2")
    session = GangSession(replace(SETTINGS, pod_events_after=0.0))
    effects = session.ungate(world([gang], extra=[blocker]), now=0.0)
    assert len(pod_events(effects, "GangWaiting")) == 2
    with pytest.raises(ValueError, match="pod_events_after"):
        replace(SETTINGS, pod_events_after=-1.0)


def test_an_unfit_gang_is_looked_at_again_only_when_capacity_grew() -> None:
    gang = make_gang("big", roles=[("worker", 2, make_shape(gpus=8))])
    blocker = make_pod("blocker", shape=make_shape(gpus=8), node="n2")
    session = GangSession(SETTINGS)
    session.ungate(world([gang], extra=[blocker]), now=0.0)
    looked = session.gates.evaluated
    assert looked == 1
    # Nothing changed, time passes: not planned again, nothing said again.
    for t in (1.0, 2.0, 3.0):
        assert session.ungate(world([gang], extra=[blocker]), now=t) == ()
    # The cluster changed, but nothing that frees room: a new pending pod elsewhere.
    other = replace(make_pod("lone", shape=make_shape(gpus=1)), scheduler_name="muster")
    effects = session.ungate(world([gang], extra=[blocker, other], revision=2), now=4.0)
    assert session.gates.evaluated == looked and ungates(effects) == []
    # A bound pod elsewhere takes more room: still no reason to look.
    taker = make_pod("taker", shape=make_shape(gpus=1), node="n1")
    session.ungate(world([gang], extra=[blocker, taker], revision=3), now=5.0)
    assert session.gates.evaluated == looked
    # The blocker goes: room grew; the gang is planned and ungated whole.
    effects = session.ungate(world([gang], revision=4), now=6.0)
    assert session.gates.evaluated == looked + 1
    assert ungated_names(effects) == ["big-worker-0", "big-worker-1"]


def test_room_that_grew_but_cannot_hold_the_gang_does_not_plan_it_again() -> None:
    """A pod ending frees room a waiting gang cannot use: the look does not plan it (the
    bound rules it out) and says why from the bound; room that can hold it plans it at once."""
    gang = make_gang("big", roles=[("worker", 2, make_shape(gpus=8))])
    blocker = make_pod("blocker", shape=make_shape(gpus=8), node="n2")
    small = make_pod("small", shape=make_shape(gpus=4), node="n1")
    session = GangSession(SETTINGS)
    session.ungate(world([gang], extra=[blocker, small]), now=0.0)
    assert session.gates.evaluated == 1 and session.gates.bounded == 0
    # small ends: n1 is free, n2 is not; one node of 8 GPUs cannot hold two such pods.
    effects = session.ungate(world([gang], extra=[blocker], revision=2), now=1.0)
    assert session.gates.evaluated == 1 and session.gates.bounded == 1
    assert ungates(effects) == []
    [said] = workload_events(effects, "GangWaiting")
    assert said.message.startswith("gang ml/big: does not fit: it needs 16 more whole GPUs and "
                                   "8 are free outside other gangs' plans")
    # It names who holds the room now: the blocker, not small, which has ended.
    assert "held by ml/blocker (8 GPUs on n2)" in said.message and "small" not in said.message, \
        said.message
    assert session.last_reason[gang.key] == said.message
    # Nothing changed since: neither planned nor bounded again.
    session.ungate(world([gang], extra=[blocker], revision=2), now=2.0)
    assert (session.gates.evaluated, session.gates.bounded) == (1, 1)
    # The blocker ends: the bound lets it through, and it is planned and ungated whole.
    effects = session.ungate(world([gang], revision=3), now=3.0)
    assert session.gates.evaluated == 2 and session.gates.bounded == 1
    assert ungated_names(effects) == ["big-worker-0", "big-worker-1"]


def test_room_on_nodes_the_gang_may_not_use_does_not_plan_it_again() -> None:
    """Two A100 and two H100 nodes; an A100 gang of two 8-GPU pods waits while an A100 node is
    busy. Room freed on the H100 nodes would hold it by count, but not where it may run: the
    bound answers from the nodes its pods may use. Room on an A100 node plans it at once."""
    nodes = [make_node(f"{kind}-{i}", labels={"gpu": kind})
             for kind in ("a100", "h100") for i in (1, 2)]
    gang = make_gang("a100-job", roles=[("worker", 2, make_shape(gpus=8,
                                                                 selector={"gpu": "a100"}))])
    busy = make_pod("busy", shape=make_shape(gpus=8), node="a100-1")
    h100 = [make_pod(f"h{i}", shape=make_shape(gpus=8), node=f"h100-{i}") for i in (1, 2)]
    session = GangSession(SETTINGS)
    session.ungate(world([gang], nodes=nodes, extra=[busy, *h100]), now=0.0)
    assert session.gates.evaluated == 1 and session.gates.bounded == 0
    # Both H100 nodes empty out: 24 whole GPUs free, 16 of them for nobody it can use.
    effects = session.ungate(world([gang], nodes=nodes, extra=[busy], revision=2), now=1.0)
    assert (session.gates.evaluated, session.gates.bounded) == (1, 1)
    assert ungates(effects) == []
    [said] = workload_events(effects, "GangWaiting")
    assert said.message == ("gang ml/a100-job: does not fit: it needs 16 more whole GPUs and 8 "
                            "are free on the 2 nodes its pods may use, outside other gangs' "
                            "plans; held by ml/busy (8 GPUs on a100-1)")
    # The busy A100 node frees: planned and ungated whole.
    effects = session.ungate(world([gang], nodes=nodes, revision=3), now=2.0)
    assert (session.gates.evaluated, session.gates.bounded) == (2, 1)
    assert ungated_names(effects) == ["a100-job-worker-0", "a100-job-worker-1"]


def test_a_gang_no_empty_cluster_holds_keeps_saying_so_when_the_bound_answers() -> None:
    gang = make_gang("huge", roles=[("worker", 3, make_shape(gpus=8))])  # 24 GPUs on 16
    blocker = make_pod("blocker", shape=make_shape(gpus=4), node="n1")
    session = GangSession(SETTINGS)
    session.ungate(world([gang], extra=[blocker]), now=0.0)
    never = session.last_reason[gang.key]
    assert "empty cluster" in never
    effects = session.ungate(world([gang], revision=2), now=1.0)  # the blocker ends
    assert (session.gates.evaluated, session.gates.bounded) == (1, 1)
    assert workload_events(effects, "GangWaiting") == [] and ungates(effects) == []
    assert session.last_reason[gang.key] == never


def test_a_gang_that_may_preempt_is_looked_at_whatever_the_bound_says() -> None:
    """Room too small for a gang may still be enough once lower-priority pods are evicted:
    the bound is not used for a gang with anyone to preempt."""
    shape = make_shape(gpus=8, priority=100)
    gang = make_gang("vip", roles=[("worker", 2, shape)], priority=100)
    high = replace(make_pod("high", shape=make_shape(gpus=8, priority=1000), node="n2"))
    low = make_pod("low", shape=make_shape(gpus=4), node="n1")
    lower = make_pod("lower", shape=make_shape(gpus=2), node="n1")
    session = GangSession(SETTINGS)
    session.ungate(world([gang], extra=[high, low, lower]), now=0.0)
    assert session.gates.evaluated == 1
    # lower ends: n1 has 6 GPUs free, n2 none; evicting low cannot free n2 either, but only
    # planning the preemption can tell: the gang is looked at again.
    session.ungate(world([gang], extra=[high, low], revision=2), now=1.0)
    assert session.gates.evaluated == 2 and session.gates.bounded == 0


def test_a_staged_gangs_later_stage_is_ungated_as_it_appears() -> None:
    gang = make_gang("lws", roles=[("leader", 1, make_shape(gpus=8)),
                                   ("worker", 1, make_shape(gpus=8))],
                     stages={"worker": 1})
    session = GangSession(SETTINGS)
    leader_only = world([gang], present={"lws-leader-0"})
    effects = session.ungate(leader_only, now=0.0)
    assert ungated_names(effects) == ["lws-leader-0"]  # stage 0 is all that exists yet
    plan = session.ledger.plan_for(gang.key)
    assert plan is not None and plan.nodes_for("worker")  # the whole gang is held
    leader_node = plan.nodes_for("leader")[0]
    running = world([gang], present={"lws-leader-0"}, ungated={"lws-leader-0"}, revision=2)
    leader = next(iter(running.pods.values()))
    session.filter(leader, list(running.nodes), snapshot=running, now=1.0)
    step: BindStep = session.bind(PodRef(leader.namespace, leader.name, leader.uid),
                                  leader_node, snapshot=running, now=1.0)
    assert step.step is Step.BIND
    session.bound(leader.uid, leader_node, current=lambda: running)
    later = world([gang], bound={"lws-leader-0": str(leader_node)}, revision=3)
    effects = session.ungate(later, now=5.0)
    assert ungated_names(effects) == ["lws-worker-0"]


def test_a_pod_in_no_gang_is_ungated_at_once_and_one_never_resolved_after_the_bound() -> None:
    lone = gated(make_pod("lone", shape=make_shape(gpus=1)))
    orphan = gated(make_pod("orphan", shape=make_shape(gpus=1)))
    why = {orphan.uid: "its owner Job ml/x is not observed yet"}
    session = GangSession(SETTINGS)
    snap = ClusterSnapshot.of(NODES, [lone, orphan], revision=1, unresolved=why)
    effects = session.ungate(snap, now=100.0)
    assert ungated_names(effects) == ["lone"]
    snap = ClusterSnapshot.of(NODES, [replace(lone, gates=()), orphan], revision=2,
                              unresolved=why)  # the lone pod's gate is gone
    assert session.ungate(snap, now=130.0) == ()  # the orphan waits for the bound
    effects = session.ungate(snap, now=160.0)
    assert ungated_names(effects) == ["orphan"]
    [ungate] = ungates(effects)
    assert "within 60s" in ungate.reason and why[orphan.uid] in ungate.reason
    # Ungated, it is still held back by filter: it may be a gang member.
    ungated_orphan = replace(orphan, gates=())
    after = ClusterSnapshot.of(NODES, [ungated_orphan], revision=3, unresolved=why)
    step = session.filter(ungated_orphan, list(after.nodes), snapshot=after, now=161.0)
    assert step.decision.outcome is FilterOutcome.WAITING and not step.decision.passed


def test_an_unresolved_pods_bound_counts_from_its_creation_on_the_sessions_own_clock() -> None:
    # The session runs on a monotonic clock (now=100) while the wall clock reads 1,000,100:
    # the pod, created on the wall clock 50 s ago, is ungated 60 s after that, at 110.
    orphan = replace(gated(make_pod("orphan", shape=make_shape(gpus=1))), created=1_000_050.0)
    snap = ClusterSnapshot.of(NODES, [orphan], revision=1,
                              unresolved={orphan.uid: "its owner Job ml/x is not observed yet"})
    session = GangSession(SETTINGS)
    session.gates.wall_offset = 1_000_000.0
    assert ungated_names(session.ungate(snap, now=100.0)) == []
    assert ungated_names(session.ungate(snap, now=110.0)) == ["orphan"]


def test_pods_of_other_schedulers_and_pods_without_musters_gate_are_left_alone() -> None:
    other = gated(make_pod("theirs"), scheduler="default-scheduler")
    foreign = replace(make_pod("foreign"), gates=("other.io/keep",), scheduler_name="muster")
    session = GangSession(SETTINGS)
    snap = ClusterSnapshot.of(NODES, [other, foreign], revision=1)
    assert ungates(session.ungate(snap, now=0.0)) == []


def test_an_ungating_not_yet_seen_is_asked_again_only_after_the_retry() -> None:
    gang = trio()
    session = GangSession(SETTINGS)
    assert len(ungated_names(session.ungate(world([gang]), now=0.0))) == 3
    # The gates are still there (the patch failed or the informer lags).
    assert ungates(session.ungate(world([gang], revision=2), now=5.0)) == []
    assert len(ungated_names(session.ungate(world([gang], revision=3), now=10.0))) == 3


def test_ungated_gang_members_are_still_held_whole_by_filter_and_bind() -> None:
    """Pods that were never gated (webhook down, created before install): a gang that does
    not fit is refused by filter on every node, and bind still waits for the whole gang."""
    gang = make_gang("big", roles=[("worker", 2, make_shape(gpus=8))])
    blocker = make_pod("blocker", shape=make_shape(gpus=8), node="n2")
    names = {"big-worker-0", "big-worker-1"}
    session = GangSession(SETTINGS)
    snap = world([gang], extra=[blocker], ungated=names)
    assert ungates(session.ungate(snap, now=0.0)) == []
    pod = next(p for p in snap.pods.values() if p.name == "big-worker-0")
    step = session.filter(pod, list(snap.nodes), snapshot=snap, now=0.0)
    assert step.decision.outcome is FilterOutcome.WAITING and step.decision.passed == ()
    free = world([gang], ungated=names, revision=2)
    pod = next(p for p in free.pods.values() if p.name == "big-worker-0")
    step = session.filter(pod, list(free.nodes), snapshot=free, now=1.0)
    assert step.decision.outcome is FilterOutcome.PLANNED
    held = session.bind(PodRef(pod.namespace, pod.name, pod.uid),
                        NodeName(step.decision.passed[0]), snapshot=free, now=1.0)
    assert held.step is Step.HOLD  # one member alone never binds


def test_a_gang_that_fits_only_by_preempting_is_ungated_for_kube_schedulers_preemption() -> None:
    """Preemption runs only for queued pods: a gated gang that could evict lower-priority
    pods to fit whole must reach kube-scheduler; one whose pods may not preempt stays."""
    low = [make_pod(f"low-{n}", shape=make_shape(gpus=8), node=n) for n in ("n1", "n2")]
    for preempts, expected in ((True, ["vip-worker-0", "vip-worker-1"]), (False, [])):
        shape = replace(make_shape(gpus=8, priority=100), preempts=preempts)
        gang = make_gang("vip", roles=[("worker", 2, shape)], priority=100)
        session = GangSession(SETTINGS)
        effects = session.ungate(world([gang], extra=low), now=0.0)
        assert ungated_names(effects) == expected
        assert session.ledger.plan_for(gang.key) is None  # nothing reserved: it must preempt
        if preempts:
            [ungate] = ungates(effects)
            assert "kube-scheduler's preemption" in ungate.reason
        else:
            assert workload_events(effects, "GangWaiting")


def test_of_two_gated_gangs_only_one_fits_the_older_goes_first_whatever_its_name() -> None:
    # Two 8-GPU nodes (16 GPUs); each gang needs 12. "aaa" sorts first but is younger: as in
    # kube-scheduler's queue, the older gang is planned first, and a higher priority first.
    old = make_gang("zzz", roles=[("worker", 3, make_shape(gpus=4))], created=1.0)
    young = make_gang("aaa", roles=[("worker", 3, make_shape(gpus=4))], created=2.0)
    session = GangSession(SETTINGS)
    session.ungate(world([old, young]), now=0.0)
    assert session.ledger.plan_for(old.key) is not None
    assert session.ledger.plan_for(young.key) is None
    urgent = replace(young, priority=100)
    first = GangSession(SETTINGS)
    first.ungate(world([old, urgent]), now=0.0)
    assert first.ledger.plan_for(urgent.key) is not None
    assert first.ledger.plan_for(old.key) is None


def test_looks_while_gangs_gather_compute_no_free_capacity_and_waiting_gangs_still_see_room(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # While a burst of gangs is created, nearly every look sees only gangs still gathering:
    # none can be planned, so the cluster's free capacity (a pass over every reservation and
    # pod in flight) is not worked out for them.
    computed: list[int] = []
    real = gating.free_capacity

    def counted(*args: Any, **kwargs: Any) -> Any:
        computed.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(gating, "free_capacity", counted)
    gathering = make_gang("gathering", roles=[("worker", 6, make_shape(gpus=1))])
    session = GangSession(SETTINGS)
    for n in range(1, 5):
        present = {f"gathering-worker-{i}" for i in range(n)}
        effects = session.ungate(world([gathering], present=present, revision=n), now=float(n))
        assert ungates(effects) == []
    assert computed == []
    # A complete gang that does not fit is judged against free capacity, and remembered
    # with it; looks that follow while the other gang gathers still notice when room grows.
    big = make_gang("big", roles=[("worker", 2, make_shape(gpus=8))])
    blocker = make_pod("blocker", shape=make_shape(gpus=8), node="n2")
    some = {f"gathering-worker-{i}" for i in range(4)} | {"big-worker-0", "big-worker-1"}
    session.ungate(world([gathering, big], present=some, extra=[blocker], revision=5), now=5.0)
    assert computed and "big" in session.last_reason[big.key]
    more = some | {"gathering-worker-4"}
    effects = session.ungate(world([gathering, big], present=more, extra=[blocker], revision=6),
                             now=6.0)
    assert ungates(effects) == []
    effects = session.ungate(world([gathering, big], present=more, revision=7), now=7.0)
    assert ungated_names(effects) == ["big-worker-0", "big-worker-1"]
