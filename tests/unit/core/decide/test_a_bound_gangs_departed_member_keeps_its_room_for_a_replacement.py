"""A bound gang that falls below its minimum because a member went (deleted, failed) keeps
what that member used for its replacement, for ``replacement_ttl``: a gang waiting for room
does not take it first, the replacement is planned onto it, and with no replacement by then
it is free again. A gang that is ending, or whose workload is gone, keeps nothing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from extender.core.decide.decisions import FilterOutcome
from extender.core.decide.effects import Emit
from extender.core.decide.session import GangSession
from extender.core.decide.settings import CoreSettings
from extender.core.model.notices import WorkloadEvent
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import NodeName, Phase, PodInfo, PodPhase
from tests.unit.core.builders import gang_pods, make_gang, make_node, make_shape, tree_of, uid

SETTINGS = CoreSettings(plan_ttl=30, bind_timeout=5, replacement_ttl=20)
NODES = [make_node(f"n{i}", gpus=8) for i in range(3)]
EIGHT = make_shape(gpus=8)
FIRST = make_gang("first", roles=[("w", 2, EIGHT)])
SECOND = make_gang("second", roles=[("w", 2, EIGHT)])
BOUND = {"first-w-0": "n0", "first-w-1": "n1"}


def _snapshot(revision: int, *, gone: Sequence[str] = (), replaced: bool = False,
              phases: dict[str, PodPhase] | None = None,
              first: Phase | None = Phase.RUNNING) -> ClusterSnapshot:
    """FIRST bound on n0 and n1 (less ``gone``, plus a pending replacement of first-w-0 when
    ``replaced``), its workload in phase ``first`` (``None``: deleted), SECOND pending, n2
    free."""
    gangs = [FIRST, SECOND] if first is not None else [SECOND]
    pods: list[PodInfo] = []
    members = {}
    for gang in gangs:
        made, of = gang_pods(gang, bound=BOUND)
        pods += made
        members.update(of)
    if replaced:
        pod = next(p for p in pods if p.name == "first-w-0")
        members[pod.uid + "-new"] = members[pod.uid]
        pods.append(replace(pod, uid=pod.uid + "-new", name="first-w-0-new", node_name=None,
                            phase=PodPhase.PENDING))
    pods = [replace(p, phase=(phases or {}).get(p.name, p.phase)) for p in pods
            if p.name not in gone]
    trees = [replace(tree_of(g), phase=first if g is FIRST and first else Phase.INITIALIZING)
             for g in gangs]
    return ClusterSnapshot.of(NODES, pods, trees, {u: m for u, m in members.items()
                                                   if any(p.uid == u for p in pods)},
                              revision=revision)


def _session_with_first_bound() -> GangSession:
    session = GangSession(SETTINGS)
    session.refresh(_snapshot(1), now=0)  # a restart's rebuild: FIRST is admitted
    return session


def _second_filter(session: GangSession, snapshot: ClusterSnapshot, now: float) -> FilterOutcome:
    pod = snapshot.pods[uid(SECOND, "w", 0)]
    return session.filter(pod, list(snapshot.nodes), snapshot=snapshot, now=now).decision.outcome


def test_a_waiting_gang_does_not_take_the_node_a_bound_gangs_deleted_member_freed() -> None:
    session = _session_with_first_bound()
    assert _second_filter(session, _snapshot(2, gone=["first-w-0"]), 1) is FilterOutcome.WAITING
    plan = session.ledger.plan_for(FIRST.key)
    assert plan is not None and plan.slots == ((NodeName("n0"), "w", 1),)
    assert "held for their replacements" in session.last_reason[FIRST.key]


def test_the_replacement_is_planned_onto_the_departed_members_node() -> None:
    session = _session_with_first_bound()
    _second_filter(session, _snapshot(2, gone=["first-w-0"]), 1)
    snapshot = _snapshot(3, gone=["first-w-0"], replaced=True)
    pod = snapshot.pods[uid(FIRST, "w", 0) + "-new"]
    step = session.filter(pod, list(snapshot.nodes), snapshot=snapshot, now=11)
    assert step.decision.passed == (NodeName("n0"),)


def test_the_hold_is_told_on_the_workload_and_ends_at_replacement_ttl() -> None:
    session = _session_with_first_bound()
    told = session.refresh(_snapshot(2, gone=["first-w-0"]), now=1)
    assert any(isinstance(e, Emit) and isinstance(e.event, WorkloadEvent)
               and e.event.reason == "GangHoldingForReplacement" for e in told)
    assert _second_filter(session, _snapshot(2, gone=["first-w-0"]), 20.9) \
        is FilterOutcome.WAITING
    assert _second_filter(session, _snapshot(2, gone=["first-w-0"]), 21) \
        is FilterOutcome.PLANNED
    assert "no member came" in session.last_reason[FIRST.key]


def test_a_failed_member_is_held_for_as_a_deleted_one_is() -> None:
    session = _session_with_first_bound()
    failed = _snapshot(2, phases={"first-w-0": PodPhase.FAILED})
    assert _second_filter(session, failed, 1) is FilterOutcome.WAITING


def test_a_gang_whose_other_member_succeeded_holds_nothing() -> None:
    session = _session_with_first_bound()
    ending = _snapshot(2, gone=["first-w-0"], phases={"first-w-1": PodPhase.SUCCEEDED})
    assert _second_filter(session, ending, 1) is FilterOutcome.PLANNED
    assert session.ledger.plan_for(FIRST.key) is None


def test_a_completed_workload_holds_nothing() -> None:
    session = _session_with_first_bound()
    done = _snapshot(2, gone=["first-w-0"], first=Phase.COMPLETED)
    assert _second_filter(session, done, 1) is FilterOutcome.PLANNED


def test_a_deleted_workload_holds_nothing() -> None:
    session = _session_with_first_bound()
    assert _second_filter(session, _snapshot(2, first=None), 1) is FilterOutcome.PLANNED


def test_the_hold_ends_when_the_last_member_goes_too() -> None:
    session = _session_with_first_bound()
    session.refresh(_snapshot(2, gone=["first-w-0"]), now=1)
    assert session.ledger.plan_for(FIRST.key) is not None
    session.refresh(_snapshot(3, gone=["first-w-0", "first-w-1"]), now=2)
    assert session.ledger.plan_for(FIRST.key) is None


def test_a_member_gone_from_a_gang_still_at_its_minimum_holds_nothing() -> None:
    elastic = make_gang("first", roles=[("w", 2, EIGHT)], minimum={"w": 1})
    session = GangSession(SETTINGS)
    snapshot = _snapshot(1)
    trees = [replace(tree_of(elastic), phase=Phase.RUNNING), tree_of(SECOND)]
    session.refresh(ClusterSnapshot.of(NODES, snapshot.pods.values(), trees,
                                       snapshot.memberships, revision=1), now=0)
    gone = _snapshot(2, gone=["first-w-0"])
    gone = ClusterSnapshot.of(NODES, gone.pods.values(), trees, gone.memberships, revision=2)
    session.refresh(gone, now=1)
    assert session.ledger.plan_for(elastic.key) is None


def test_a_member_gone_from_a_cordoned_node_holds_nothing() -> None:
    session = _session_with_first_bound()
    gone = _snapshot(2, gone=["first-w-0"])
    cordoned = [replace(n, unschedulable=n.name == "n0") for n in NODES]
    gone = ClusterSnapshot.of(cordoned, gone.pods.values(), gone.workloads.values(),
                              gone.memberships, revision=2)
    session.refresh(gone, now=1)
    assert session.ledger.plan_for(FIRST.key) is None
