"""Two members of a gang sent to one planned node do not cost the gang its plan.

kube-scheduler filters several members before the first one's bind arrives. Each member's
filter claims one open slot of its plan, so members offered the same nodes go to different
ones; but a member whose own slot kube-scheduler does not offer (it failed one of its own
filters for a moment) is offered the open nodes others have claimed, and may then be sent to
the node where the plan holds one: the node has room for both in kube-scheduler's view, which
does not see the reservation of another gang planned since on the rest of that node. The
second one's bind is refused (that room is the other gang's), but its own gang's plan still
holds the slot it left open elsewhere: the plan must stay, so the member's next filter is
pinned there. Dropping it (as for a slot taken behind Muster's back) let a burst of gangs
planned 54 ms apart fail the first one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from extender.core.decide.decisions import FilterOutcome
from extender.core.decide.effects import Release, Step
from extender.core.decide.session import GangSession
from extender.core.decide.settings import CoreSettings
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, Membership, NodeName, PodInfo
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

GATE = "muster.dev/gang"
SETTINGS = CoreSettings(scheduler_names=("muster",), bind_timeout=5.0)
BIG, SMALL = NodeName("big"), NodeName("small")
NODES = [make_node(BIG, gpus=8), make_node(SMALL, gpus=4)]
FIRST = make_gang("first", roles=[("worker", 2, make_shape(gpus=4))], created=0.0)
SECOND = make_gang("second", roles=[("worker", 1, make_shape(gpus=4))], created=1.0)


def world(gangs: Sequence[Gang], *, gated: Iterable[str] = (), revision: int) -> ClusterSnapshot:
    """The gangs' pods, pending, gated if named in ``gated``."""
    names = set(gated)
    pods: list[PodInfo] = []
    members: dict[str, Membership] = {}
    for gang in gangs:
        gp, gm = gang_pods(gang)
        pods += [replace(p, gates=(GATE,) if p.name in names else (), scheduler_name="muster")
                 for p in gp]
        members.update(gm)
    return ClusterSnapshot.of(NODES, pods, [tree_of(g) for g in gangs], members,
                              revision=revision)


def planned_in_turn() -> tuple[GangSession, ClusterSnapshot]:
    """The first gang planned on both nodes (one worker each: binpack fills the smaller node
    first), both its workers filtered before either binds, each claiming one node, the
    second filtered again while kube-scheduler offers it the big node only, then the second
    gang planned on the rest of the big node by the next ungating round."""
    session = GangSession(SETTINGS)
    session.ungate(world([FIRST], gated={"first-worker-0", "first-worker-1"}, revision=1),
                   now=0.0)
    plan = session.ledger.plan_for(FIRST.key)
    assert plan is not None and sorted(plan.slots) == [(BIG, "worker", 1), (SMALL, "worker", 1)]
    snap = world([FIRST, SECOND], gated={"second-worker-0"}, revision=2)
    claimed = []
    for i in range(2):
        step = session.filter(snap.pods[uid(FIRST, "worker", i)], [BIG, SMALL], snapshot=snap,
                              now=0.010)
        assert step.decision.outcome is FilterOutcome.PINNED
        claimed.append(step.decision.passed)
    assert claimed == [(BIG,), (SMALL,)]
    step = session.filter(snap.pods[uid(FIRST, "worker", 1)], [BIG], snapshot=snap, now=0.020)
    assert (step.decision.outcome, step.decision.passed) == (FilterOutcome.PINNED, (BIG,))
    session.ungate(snap, now=0.054)
    second = session.ledger.plan_for(SECOND.key)
    assert second is not None and second.slots == ((BIG, "worker", 1),)
    return session, snap


def test_a_member_sent_where_its_gangs_slot_is_filled_is_refused_but_the_plan_stays() -> None:
    session, snap = planned_in_turn()
    held = session.bind(pod_ref(snap, uid(FIRST, "worker", 0)), BIG, snapshot=snap, now=0.06)
    assert held.step is Step.HOLD
    refused = session.bind(pod_ref(snap, uid(FIRST, "worker", 1)), BIG, snapshot=snap, now=0.07)
    # The rest of the big node is the second gang's: the refusal is right...
    assert refused.step is Step.REFUSE
    assert "capacity reserved for gang ml/second" in refused.reason
    assert "planned again" not in refused.reason
    # ...but the first gang's plan still holds the small node for this worker.
    plan = session.ledger.plan_for(FIRST.key)
    assert plan is not None and (SMALL, "worker", 1) in plan.slots
    assert session.ledger.held(FIRST.key)


def test_the_refused_member_is_pinned_to_its_open_slot_and_completes_its_gang() -> None:
    session, snap = planned_in_turn()
    session.bind(pod_ref(snap, uid(FIRST, "worker", 0)), BIG, snapshot=snap, now=0.06)
    session.bind(pod_ref(snap, uid(FIRST, "worker", 1)), BIG, snapshot=snap, now=0.07)
    retry = session.filter(snap.pods[uid(FIRST, "worker", 1)], [BIG, SMALL], snapshot=snap,
                           now=1.07)
    assert (retry.decision.outcome, retry.decision.passed) == (FilterOutcome.PINNED, (SMALL,))
    done = session.bind(pod_ref(snap, uid(FIRST, "worker", 1)), SMALL, snapshot=snap, now=1.08)
    assert done.step is Step.BIND, done.reason
    assert [(e.pod.name, e.node) for e in done.effects if isinstance(e, Release)] == [
        ("first-worker-0", BIG)]
    # The second gang's reservation was never touched: its member binds where it was planned.
    after = world([FIRST, SECOND], revision=3)
    second = session.bind(pod_ref(after, uid(SECOND, "worker", 0)), BIG, snapshot=after, now=1.1)
    assert second.step is Step.BIND, second.reason


def test_a_member_refused_on_its_own_open_slot_still_gets_its_gang_planned_again() -> None:
    """The other side of the line: a slot open for the member whose room is gone was taken
    behind Muster's back, and the plan holding it is dropped, as before."""
    session, snap = planned_in_turn()
    squatter = make_pod("squatter", shape=make_shape(gpus=4), node=SMALL, ns="other")
    taken = ClusterSnapshot.of(NODES, [*snap.pods.values(), squatter],
                               snap.workloads.values(), snap.memberships, revision=4)
    refused = session.bind(pod_ref(taken, uid(FIRST, "worker", 0)), SMALL, snapshot=taken,
                           now=0.06)
    assert refused.step is Step.REFUSE and "planned again" in refused.reason
    assert session.ledger.plan_for(FIRST.key) is None
