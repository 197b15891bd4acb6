"""Filter and ungating plan a gang through one entry (``GangPlanner.plan_for_gang``): within one
look (the same snapshot and ledger, nothing falling due) a gang that does not fit is planned
once, and every other member filtered in it gets the answer a planning would give it."""

from __future__ import annotations

from dataclasses import replace

from extender.core.decide.decisions import FilterOutcome
from extender.core.decide.session import GangSession
from extender.core.decide.settings import CoreSettings
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Membership, PodInfo
from tests.unit.core.builders import gang_pods, make_gang, make_node, make_shape, tree_of

GATE = "muster.dev/gang"
SETTINGS = CoreSettings(scheduler_names=("muster",))
NODES = [make_node("n1"), make_node("n2")]
FIRST = make_gang("first", roles=[("worker", 2, make_shape(gpus=8))])
"""Planned first: its plan holds both nodes' GPUs."""
LATE = make_gang("late", roles=[("worker", 3, make_shape(gpus=4))])
"""Does not fit while FIRST's plan holds the GPUs (it would fit an empty cluster)."""


def world(*, gated: frozenset[str] = frozenset(), revision: int = 1) -> ClusterSnapshot:
    pods: list[PodInfo] = []
    members: dict[str, Membership] = {}
    for gang in (FIRST, LATE):
        found, belong = gang_pods(gang)
        for pod in found:
            gates = (GATE,) if pod.name in gated else ()
            pods.append(replace(pod, gates=gates, scheduler_name="muster"))
        members.update(belong)
    return ClusterSnapshot.of(NODES, pods, [tree_of(g) for g in (FIRST, LATE)], members,
                              revision=revision)


def pod(snapshot: ClusterSnapshot, name: str) -> PodInfo:
    return next(p for p in snapshot.pods.values() if p.name == name)


def test_members_filtered_in_one_look_plan_their_gang_once_and_hear_what_planning_says(
) -> None:
    snap = world()
    session = GangSession(SETTINGS)
    nodes = list(snap.nodes)
    assert session.filter(pod(snap, "first-worker-0"), nodes, snapshot=snap,
                          now=0.0).decision.outcome is FilterOutcome.PLANNED
    assert session.planning.planned == 1
    decisions = [session.filter(pod(snap, f"late-worker-{i}"), nodes[: i + 1], snapshot=snap,
                                now=1.0 + i).decision for i in range(3)]
    assert session.planning.planned == 2  # the first member planned LATE; the others did not
    assert [d.outcome for d in decisions] == [FilterOutcome.WAITING] * 3
    assert f"held for gang {FIRST.key}'s plan" in decisions[0].reason
    for i, decision in enumerate(decisions):
        # What a session that plans the gang for this very member decides.
        twin = GangSession(SETTINGS)
        twin.filter(pod(snap, "first-worker-0"), nodes, snapshot=snap, now=0.0)
        alone = twin.filter(pod(snap, f"late-worker-{i}"), nodes[: i + 1], snapshot=snap,
                            now=1.0 + i).decision
        assert decision == alone
        assert dict(decision.failed) == dict.fromkeys(nodes[: i + 1], decision.reason)


def test_an_ungating_look_and_the_filters_after_it_in_the_same_look_plan_the_gang_once(
) -> None:
    snap = world(gated=frozenset({"late-worker-0"}))
    session = GangSession(SETTINGS)
    session.filter(pod(snap, "first-worker-0"), list(snap.nodes), snapshot=snap, now=0.0)
    session.ungate(snap, now=1.0)
    assert session.gates.evaluated == 1 and session.planning.planned == 2
    looked = session.last_reason[LATE.key]
    for i in (1, 2):  # its members outside the gate, filtered by kube-scheduler meanwhile
        decision = session.filter(pod(snap, f"late-worker-{i}"), list(snap.nodes),
                                  snapshot=snap, now=2.0).decision
        assert decision.outcome is FilterOutcome.WAITING and decision.reason == looked
    assert session.planning.planned == 2


def test_a_new_look_plans_the_gang_again() -> None:
    snap = world()
    session = GangSession(SETTINGS)
    nodes = list(snap.nodes)
    session.filter(pod(snap, "first-worker-0"), nodes, snapshot=snap, now=0.0)
    session.filter(pod(snap, "late-worker-0"), nodes, snapshot=snap, now=1.0)
    assert session.planning.planned == 2
    newer = world(revision=2)  # another snapshot: planned again
    step = session.filter(pod(newer, "late-worker-1"), nodes, snapshot=newer, now=2.0)
    assert step.decision.outcome is FilterOutcome.WAITING and session.planning.planned == 3
    # FIRST's plan runs out: the ledger moved on, and LATE is planned, now whole.
    later = SETTINGS.plan_ttl + 10.0
    step = session.filter(pod(newer, "late-worker-2"), nodes, snapshot=newer, now=later)
    assert step.decision.outcome is FilterOutcome.PLANNED and session.planning.planned == 4


def test_a_member_pinned_to_its_gangs_plan_plans_nothing() -> None:
    snap = world()
    session = GangSession(SETTINGS)
    nodes = list(snap.nodes)
    session.filter(pod(snap, "first-worker-0"), nodes, snapshot=snap, now=0.0)
    step = session.filter(pod(snap, "first-worker-1"), nodes, snapshot=snap, now=0.0)
    assert step.decision.outcome is FilterOutcome.PINNED and session.planning.planned == 1


def test_a_member_already_in_flight_is_planned_for_not_answered_from_the_look() -> None:
    snap = world()
    nodes = list(snap.nodes)
    late_1 = pod(snap, "late-worker-1")

    def prepared() -> GangSession:
        session = GangSession(SETTINGS)
        session.filter(pod(snap, "first-worker-0"), nodes, snapshot=snap, now=0.0)
        session.ledger.mark_bind_requested(late_1.uid, nodes[0], now=0.5)
        return session

    session = prepared()
    session.filter(pod(snap, "late-worker-0"), nodes, snapshot=snap, now=1.0)
    assert session.planning.planned == 2
    # Planning the gang for a member it counts as placed is another question.
    decision = session.filter(late_1, nodes, snapshot=snap, now=1.0).decision
    assert session.planning.planned == 3
    alone = prepared().filter(late_1, nodes, snapshot=snap, now=1.0).decision
    assert decision == alone
