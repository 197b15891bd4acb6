"""The session tells a gang's state on its workload object (``kubectl describe jobset``), not
only on its pods: waiting with the reason, planned, admitted, timed out; once per change."""

from __future__ import annotations

from extender.core.decide.effects import Effect, Emit
from extender.core.decide.session import GangSession
from extender.core.decide.settings import CoreSettings
from extender.core.model.notices import EventType, PodRef, WorkloadEvent
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import NodeName
from tests.unit.core.builders import make_gang, make_node, make_shape, make_snapshot, uid

SETTINGS = CoreSettings(plan_ttl=30, bind_timeout=3)


def _told(effects: tuple[Effect, ...]) -> list[tuple[str, EventType, str, str]]:
    return [(e.event.name, e.event.type, e.event.reason, e.event.message) for e in effects
            if isinstance(e, Emit) and isinstance(e.event, WorkloadEvent)]


def _ref(snap: ClusterSnapshot, pod_uid: str) -> PodRef:
    pod = snap.pods[pod_uid]
    return PodRef(pod.namespace, pod.name, pod.uid)


def _two_competing() -> tuple[ClusterSnapshot, GangSession]:
    a = make_gang("a", roles=[("worker", 2, make_shape(gpus=8))], created=1.0)
    b = make_gang("b", roles=[("worker", 2, make_shape(gpus=8))], created=2.0)
    snap = make_snapshot([make_node("n1"), make_node("n2")], gangs=[a, b])
    return snap, GangSession(SETTINGS)


def test_a_waiting_gang_says_why_on_its_workload_once_however_often_it_is_retried() -> None:
    snap, session = _two_competing()
    a, b = snap.gangs["ml/a"], snap.gangs["ml/b"]
    planned = session.filter(snap.pods[uid(a, "worker", 0)], list(snap.nodes), snapshot=snap,
                             now=0.0)
    assert _told(planned.effects) == [("a", EventType.NORMAL, "GangPlanned",
                                       "gang ml/a: planned on n1, n2; waiting for its members "
                                       "to reach bind")]
    told = []
    for attempt in range(3):
        for i in range(2):
            step = session.filter(snap.pods[uid(b, "worker", i)], list(snap.nodes),
                                  snapshot=snap, now=1.0 + attempt)
            told += _told(step.effects)
    [(name, type_, reason, message)] = told
    assert (name, type_, reason) == ("b", EventType.WARNING, "GangWaiting")
    assert message.endswith("the largest free is 0; 16 GPUs on n1, n2 are held for gang "
                            "ml/a's plan")
    [event] = [e.event for e in planned.effects
               if isinstance(e, Emit) and isinstance(e.event, WorkloadEvent)]
    assert (event.api_version, event.kind, event.namespace) == (
        "jobset.x-k8s.io/v1alpha2", "JobSet", "ml")


def test_admission_is_told_on_the_workload_once_for_the_whole_gang() -> None:
    snap, session = _two_competing()
    a = snap.gangs["ml/a"]
    for i in range(2):
        session.filter(snap.pods[uid(a, "worker", i)], list(snap.nodes), snapshot=snap, now=0.0)
    held = session.bind(_ref(snap, uid(a, "worker", 0)), NodeName("n1"), snapshot=snap, now=1.0)
    assert _told(held.effects) == []  # held at the barrier: no change of state yet
    bound = session.bind(_ref(snap, uid(a, "worker", 1)), NodeName("n2"), snapshot=snap,
                         now=1.5)
    assert _told(bound.effects) == [("a", EventType.NORMAL, "GangAdmitted",
                                     "gang ml/a: minimum reached; binding all members")]
    # Said on the workload, for the gang it names, and not once more on every member.
    told = [e.event for e in bound.effects if isinstance(e, Emit)]
    assert [(type(e).__name__, getattr(e, "gang", None)) for e in told] == [
        ("WorkloadEvent", "ml/a")]


def test_a_barrier_timeout_is_told_on_the_workload_and_waiting_again_after_it() -> None:
    snap, session = _two_competing()
    a = snap.gangs["ml/a"]
    session.filter(snap.pods[uid(a, "worker", 0)], list(snap.nodes), snapshot=snap, now=0.0)
    session.bind(_ref(snap, uid(a, "worker", 0)), NodeName("n1"), snapshot=snap, now=1.0)
    effects = session.tick(snap, now=10.0)
    [(name, type_, reason, message)] = _told(effects)
    assert (name, type_, reason) == ("a", EventType.WARNING, "GangBindTimeout")
    assert "ml/a" in message
    # Planned again afterwards: a new state, told again.
    again = session.filter(snap.pods[uid(a, "worker", 1)], list(snap.nodes), snapshot=snap,
                           now=11.0)
    assert [r for _, _, r, _ in _told(again.effects)] == ["GangPlanned"]


def test_a_deleted_workload_is_forgotten_and_told_afresh_when_it_returns() -> None:
    snap, session = _two_competing()
    a = snap.gangs["ml/a"]
    session.filter(snap.pods[uid(a, "worker", 0)], list(snap.nodes), snapshot=snap, now=0.0)
    gone = ClusterSnapshot.of(snap.nodes.values(), [], revision=1)
    session.tick(gone, now=1.0)
    back = ClusterSnapshot.of(snap.nodes.values(), snap.pods.values(), snap.workloads.values(),
                              snap.memberships, revision=2)
    step = session.filter(back.pods[uid(a, "worker", 0)], list(back.nodes), snapshot=back,
                          now=2.0)
    assert [r for _, _, r, _ in _told(step.effects)] == ["GangPlanned"]
