"""Members held at the barrier are failed at once when their gang's plan ended and the rest of
the gang cannot be planned again around them.

Seen in the burst bench against the real kube-scheduler: a gang's plan was dropped at bind (a
slot's room was taken), the next member's filter found the rest no longer fit, and one
member stayed held until the 20 s bind timeout. Held, it kept its node's capacity in
kube-scheduler's cache (assumed) and in flight in the ledger, and two lone pods that would
have fit waited behind it.
"""

from __future__ import annotations

from extender.core.decide.decisions import FilterOutcome
from extender.core.decide.effects import FailHeld, Withdrawn
from extender.core.decide.session import GangSession, Step
from extender.core.decide.settings import CoreSettings
from extender.core.model.notices import PodRef
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import NodeName
from tests.unit.core.builders import make_gang, make_node, make_pod, make_shape, make_snapshot, uid

SETTINGS = CoreSettings(plan_ttl=60, bind_timeout=20)
NODES = [make_node(f"n{i}", gpus=8) for i in range(3)]
NAMES = [NodeName(n.name) for n in NODES]


def _ref(snap: ClusterSnapshot, pod_uid: str) -> PodRef:
    pod = snap.pods[pod_uid]
    return PodRef(pod.namespace, pod.name, pod.uid)


def test_a_held_member_is_failed_when_its_gang_no_longer_fits_after_its_plan_ended() -> None:
    gang = make_gang("g", roles=[("worker", 3, make_shape(gpus=8))])
    session = GangSession(SETTINGS)
    snap = make_snapshot(NODES, gangs=[gang])
    first = session.filter(snap.pods[uid(gang, "worker", 0)], NAMES, snapshot=snap, now=0.0)
    assert first.decision.outcome is FilterOutcome.PLANNED
    node0 = first.decision.passed[0]
    held = session.bind(_ref(snap, uid(gang, "worker", 0)), node0, snapshot=snap, now=0.1)
    assert held.step is Step.HOLD
    # Two pods of another scheduler take the other two planned nodes.
    others = [n for n in NAMES if n != node0]
    squatters = [make_pod(f"s{i}", shape=make_shape(gpus=8), node=n, ns="other")
                 for i, n in enumerate(others)]
    taken = make_snapshot(NODES, gangs=[gang], pods=squatters)
    refused = session.bind(_ref(taken, uid(gang, "worker", 1)), others[0], snapshot=taken,
                           now=0.2)
    assert refused.step is Step.REFUSE and "planned again" in refused.reason
    assert session.ledger.plan_for(gang.key) is None
    assert session.ledger.held(gang.key)  # member 0 still held: the plan may be made again

    again = session.filter(taken.pods[uid(gang, "worker", 2)], NAMES, snapshot=taken, now=0.3)
    assert again.decision.outcome is FilterOutcome.WAITING
    failed = [e for e in again.effects if isinstance(e, FailHeld)]
    assert [e.pod.name for e in failed] == ["g-worker-0"]  # at once, not after 20 s
    assert failed[0].outcome == "unplanned"
    assert [(w.gang, w.members, w.outcome) for w in again.effects
            if isinstance(w, Withdrawn)] == [(gang.key, 1, "unplanned")]
    assert not session.ledger.held(gang.key)
    assert uid(gang, "worker", 0) not in session.ledger.in_flight()  # its node is free


def test_a_held_member_stays_held_while_the_gang_can_be_planned_again_around_it() -> None:
    gang = make_gang("g", roles=[("worker", 2, make_shape(gpus=8))])
    session = GangSession(SETTINGS)
    snap = make_snapshot(NODES, gangs=[gang])
    first = session.filter(snap.pods[uid(gang, "worker", 0)], NAMES, snapshot=snap, now=0.0)
    node0 = first.decision.passed[0]
    assert session.bind(_ref(snap, uid(gang, "worker", 0)), node0, snapshot=snap,
                        now=0.1).step is Step.HOLD
    plan = session.ledger.plan_for(gang.key)
    assert plan is not None
    other = next(n for n, _, _ in plan.slots if n != node0)
    squatter = make_pod("s", shape=make_shape(gpus=8), node=other, ns="other")
    taken = make_snapshot(NODES, gangs=[gang], pods=[squatter])
    session.bind(_ref(taken, uid(gang, "worker", 1)), other, snapshot=taken, now=0.2)
    assert session.ledger.plan_for(gang.key) is None
    again = session.filter(taken.pods[uid(gang, "worker", 1)], NAMES, snapshot=taken, now=0.3)
    assert again.decision.outcome is FilterOutcome.PLANNED  # the third node holds it
    assert not [e for e in again.effects if isinstance(e, FailHeld)]
    assert session.ledger.held(gang.key)
