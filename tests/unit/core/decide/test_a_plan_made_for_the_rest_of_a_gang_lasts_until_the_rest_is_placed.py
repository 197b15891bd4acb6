"""A plan made for the rest of a gang holds the rest's capacity until the rest is placed.

A plan is made again around the members already placed when the first one ended (a slot's
room was taken at bind, its TTL ran out) or after a restart: its slots are for the members
still to come. It ends (:meth:`Ledger.settle`) once each role has as many members placed as
it planned for, counting those it was made around, not when the members it was made around
alone match its slots: then it would end at the next look at the cluster, and the next gang
planned would take the capacity the rest of the gang was just pinned to.
"""

from __future__ import annotations

from collections.abc import Sequence

from extender.core.decide.decisions import FilterOutcome
from extender.core.decide.effects import Release
from extender.core.decide.session import GangSession, Step
from extender.core.decide.settings import CoreSettings
from extender.core.gang.ledger import Ledger
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, NodeName, PodInfo
from tests.unit.core.builders import (
    gang_pods,
    make_gang,
    make_node,
    make_pod,
    make_shape,
    pod_ref,
    tree_of,
    uid,
)

SETTINGS = CoreSettings(plan_ttl=60, bind_timeout=20)
NODES = [make_node(f"n{i}", gpus=8) for i in range(3)]
NAMES = [NodeName(n.name) for n in NODES]
PAIR = make_gang("pair", roles=[("worker", 2, make_shape(gpus=8))], created=0.0)
LATER = make_gang("later", roles=[("worker", 1, make_shape(gpus=8))], created=1.0)


def world(gangs: Sequence[Gang], *, extra: Sequence[PodInfo] = (), revision: int,
          bound: dict[str, str] | None = None) -> ClusterSnapshot:
    pods, members = list(extra), {}
    for gang in gangs:
        gp, gm = gang_pods(gang, bound=bound)
        pods += gp
        members.update(gm)
    return ClusterSnapshot.of(NODES, pods, [tree_of(g) for g in gangs], members,
                              revision=revision)


def planned_again_around_a_held_member() -> tuple[GangSession, NodeName, NodeName, PodInfo]:
    """The pair's first worker held on its planned node, the other planned node filled by
    hand, and the second worker's filter planning the rest again: (session, the node the
    first is held on, the node planned for the rest, the squatter)."""
    session = GangSession(SETTINGS)
    snap = world([PAIR], revision=1)
    first = session.filter(snap.pods[uid(PAIR, "worker", 0)], NAMES, snapshot=snap, now=0.0)
    assert first.decision.outcome is FilterOutcome.PLANNED and first.decision.plan is not None
    planned = sorted(n for n, _, _ in first.decision.plan.slots)
    held = session.bind(pod_ref(snap, uid(PAIR, "worker", 0)), planned[0], snapshot=snap, now=0.1)
    assert held.step is Step.HOLD
    squatter = make_pod("squatter", shape=make_shape(gpus=8), node=planned[1], ns="other")
    taken = world([PAIR], extra=[squatter], revision=2)
    again = session.filter(taken.pods[uid(PAIR, "worker", 1)], NAMES, snapshot=taken, now=0.2)
    spare = next(n for n in NAMES if n not in planned)
    assert (again.decision.outcome, again.decision.passed) == (FilterOutcome.PLANNED, (spare,))
    return session, planned[0], spare, squatter


def test_the_plan_for_the_rest_outlives_the_next_look_at_the_cluster() -> None:
    session, _, spare, squatter = planned_again_around_a_held_member()
    # Another gang arrives: a new snapshot, which the session sweeps (and settles) first.
    later = world([PAIR, LATER], extra=[squatter], revision=3)
    step = session.filter(later.pods[uid(LATER, "worker", 0)], NAMES, snapshot=later, now=0.3)
    plan = session.ledger.plan_for(PAIR.key)
    assert plan is not None and plan.slots == ((spare, "worker", 1),)
    # The spare node is the pair's: the later gang waits for it instead of taking it.
    assert step.decision.outcome is FilterOutcome.WAITING, step.decision.reason
    assert session.ledger.plan_for(LATER.key) is None


def test_the_rest_binds_where_it_was_planned_and_releases_the_held_member() -> None:
    session, held_on, spare, squatter = planned_again_around_a_held_member()
    later = world([PAIR, LATER], extra=[squatter], revision=3)
    session.filter(later.pods[uid(LATER, "worker", 0)], NAMES, snapshot=later, now=0.3)
    done = session.bind(pod_ref(later, uid(PAIR, "worker", 1)), spare, snapshot=later, now=0.4)
    assert done.step is Step.BIND, done.reason
    assert [(e.pod.name, e.node) for e in done.effects if isinstance(e, Release)] == [
        ("pair-worker-0", held_on)]


def test_the_plan_for_the_rest_ends_once_the_rest_is_placed() -> None:
    session, held_on, spare, squatter = planned_again_around_a_held_member()
    both = world([PAIR], extra=[squatter], revision=3,
                 bound={"pair-worker-0": held_on, "pair-worker-1": spare})
    assert session.ledger.settle(both) == [PAIR.key]


def test_a_plan_made_after_a_restart_for_the_rest_is_kept_by_the_first_settle() -> None:
    gang = make_gang("trio", roles=[("worker", 3, make_shape(gpus=8))])
    snap = world([gang], revision=1, bound={"trio-worker-0": "n0", "trio-worker-1": "n1"})
    ledger = Ledger()
    ledger.rebuild(snap, now=0.0, ttl=60)
    plan = ledger.plan_for(gang.key)
    assert plan is not None and plan.pods == 1 and dict(plan.placed) == {"worker": 2}
    assert ledger.settle(snap) == []
    assert ledger.plan_for(gang.key) == plan
