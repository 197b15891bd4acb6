"""Members of a planned gang filtered before any of them binds each get one node of their own.

kube-scheduler binds asynchronously: it filters the next member while the last one's bind is
still on its way, so Muster cannot tell from the ledger which open slots are spoken for. Each
planned member's filter therefore passes one open node and claims it. With one feasible node
kube-scheduler binds there without scoring (no prioritize call), and no two members are sent
to one slot, where the second bind would be refused and the member scheduled again.
"""

from __future__ import annotations

from extender.core.decide.decisions import FilterOutcome
from extender.core.decide.effects import Step
from extender.core.decide.session import GangSession
from extender.core.decide.settings import CoreSettings
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import NodeName
from tests.unit.core.builders import make_gang, make_node, make_shape, make_snapshot, pod_ref, uid

SETTINGS = CoreSettings(bind_timeout=5.0, plan_ttl=30.0)
NODES = [NodeName(f"n{i}") for i in range(4)]
TRAIN = make_gang("train", roles=[("worker", 4, make_shape(gpus=8))])


def _cluster() -> ClusterSnapshot:
    return make_snapshot([make_node(n, gpus=8) for n in NODES], gangs=[TRAIN])


def _filter(session: GangSession, snap: ClusterSnapshot, i: int, offered: list[NodeName],
            now: float) -> tuple[NodeName, ...]:
    step = session.filter(snap.pods[uid(TRAIN, "worker", i)], offered, snapshot=snap, now=now)
    assert step.decision.outcome in (FilterOutcome.PLANNED, FilterOutcome.PINNED)
    return step.decision.passed


def test_members_offered_the_same_nodes_are_each_passed_a_different_one_and_all_bind() -> None:
    session, snap = GangSession(SETTINGS), _cluster()
    passed = [_filter(session, snap, i, NODES, now=0.01 * i) for i in range(4)]
    assert all(len(p) == 1 for p in passed), passed
    assert sorted(p[0] for p in passed) == NODES
    # Filtered again (its scheduling cycle failed later on), a member is sent where it was.
    assert _filter(session, snap, 2, NODES, now=0.05) == passed[2]
    steps = [session.bind(pod_ref(snap, uid(TRAIN, "worker", i)), passed[i][0], snapshot=snap,
                          now=0.1 + 0.01 * i).step for i in range(4)]
    assert steps == [Step.HOLD, Step.HOLD, Step.HOLD, Step.BIND]


def test_claims_only_steer_the_filter_and_a_gone_pods_claim_frees_its_slot() -> None:
    session, snap = GangSession(SETTINGS), _cluster()
    passed = {i: _filter(session, snap, i, NODES, now=0.0)[0] for i in range(3)}
    # Offered only nodes others claimed (its own failed one of kube-scheduler's filters), a
    # member is passed them all, as before claims: a claim may belong to a pod that never
    # comes to bind, and binds still check the plan's slots.
    others = [passed[0], passed[1]]
    assert set(_filter(session, snap, 3, others, now=0.1)) == set(others)
    # The first member is deleted: its claim no longer holds its slot.
    gone = ClusterSnapshot.of(snap.nodes.values(),
                              [p for u, p in snap.pods.items() if u != uid(TRAIN, "worker", 0)],
                              snap.workloads.values(), snap.memberships, revision=2)
    assert _filter(session, gone, 3, others, now=0.2) == (passed[0],)
    assert session.ledger.claims(TRAIN.key)[uid(TRAIN, "worker", 3)][0] == passed[0]


def test_claims_go_with_the_plan() -> None:
    session, snap = GangSession(SETTINGS), _cluster()
    _filter(session, snap, 0, NODES, now=0.0)
    assert set(session.ledger.claims(TRAIN.key)) == {uid(TRAIN, "worker", 0)}
    session.tick(snap, now=31.0)  # no other member came within the plan's TTL
    assert session.ledger.plan_for(TRAIN.key) is None
    assert not session.ledger.claims(TRAIN.key)
