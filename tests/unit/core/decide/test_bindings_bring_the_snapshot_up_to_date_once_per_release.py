"""The adapter tells the session of each Binding it posted; the snapshot with the Binding is
needed only when it ends its gang's release, to settle the plan. A burst of Bindings then costs
one snapshot, made by the next request, instead of one per Binding (each a pass over the
changed pods and a new picture every memo is keyed on)."""

from __future__ import annotations

from dataclasses import replace

from extender.core.decide.effects import Step
from extender.core.decide.session import GangSession
from extender.core.decide.settings import CoreSettings
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import NodeName
from tests.unit.core.builders import make_gang, make_node, make_shape, make_snapshot, pod_ref, uid

SETTINGS = CoreSettings(bind_timeout=5.0, plan_ttl=30.0)
NODES = [NodeName(f"n{i}") for i in range(4)]
TRAIN = make_gang("train", roles=[("worker", 4, make_shape(gpus=8))])


def test_only_the_binding_that_ends_the_release_asks_for_the_snapshot_and_settles() -> None:
    session = GangSession(SETTINGS)
    snap = make_snapshot([make_node(n, gpus=8) for n in NODES], gangs=[TRAIN])
    members = [uid(TRAIN, "worker", i) for i in range(4)]
    nodes = {}
    for i, member in enumerate(members):
        decided = session.filter(snap.pods[member], NODES, snapshot=snap, now=0.01 * i)
        nodes[member] = decided.decision.passed[0]
    steps = {m: session.bind(pod_ref(snap, m), nodes[m], snapshot=snap, now=0.1)
             for m in members}
    assert [s.step for s in steps.values()] == [Step.HOLD] * 3 + [Step.BIND]
    for m in members[:3]:  # the held ones are released by the last one's arrival
        ticket = steps[m].ticket
        assert ticket is not None
        assert session.poll(ticket, snapshot=snap, now=0.2).step is Step.BIND
    bound = ClusterSnapshot.of(
        snap.nodes.values(),
        [replace(p, node_name=nodes[u]) if u in nodes else p for u, p in snap.pods.items()],
        snap.workloads.values(), snap.memberships, revision=2)
    asked: list[str] = []

    def current() -> ClusterSnapshot:
        asked.append(member)
        return bound

    for member in members:
        session.bound(member, nodes[member], current=current)
        if member != members[-1]:
            assert session.ledger.plan_for(TRAIN.key) is not None  # still releasing
    assert asked == [members[-1]]  # one snapshot, for the Binding that ended the release
    assert session.ledger.plan_for(TRAIN.key) is None  # and the plan was settled with it
