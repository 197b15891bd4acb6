"""The server and the simulator drive one gang session alike: same decisions, same effects.

One scenario, replayed through the extender server and through the simulator's kube-scheduler
model (:mod:`tests.unit.conformance.sides`): competing gangs, a barrier that times out, a
restart of Muster, and a deadlock broken by a yield. Each side's session writes a journal of
every verb it answered; the two journals must be identical, entry by entry (requests woken
together at one instant are compared as a set: on the server their threads race for the
lock). Gates and preemption are compared in ``test_gates_and_preemption_decide_alike``.

The broken copies at the end show the test can fail: a simulator that polls held requests
late, ticks late or restarts without a new session writes a different journal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from extender.core.decide.effects import Withdrawn
from extender.core.decide.session import Entry
from simulator.scheduler import SchedulerModel
from simulator.scheduler_values import Tick
from tests.unit.server.builders import gpu_node, plain_pod

from .sides import (
    Script,
    ServerSide,
    Side,
    SimSide,
    comparable,
    jobset_objects,
    run_server,
    run_sim,
    uid,
)

NODES = ["n0", "n1", "n2", "n3"]


def objects() -> list[dict[str, Any]]:
    return [*(gpu_node(n, gpus=8) for n in NODES),
            *jobset_objects("alpha", workers=2, gpus=8, created="2026-12-01T10:00:00Z"),
            *jobset_objects("bravo", workers=3, gpus=8, created="2026-12-01T10:01:00Z"),
            *jobset_objects("charlie", workers=2, gpus=4, created="2026-12-01T10:02:00Z")]


def deadlock_objects() -> list[dict[str, Any]]:
    return [*(gpu_node(n, gpus=8) for n in NODES),
            *jobset_objects("alpha", workers=2, gpus=8, created="2026-12-01T10:00:00Z"),
            *jobset_objects("zulu", workers=2, gpus=8, created="2026-12-01T11:00:00Z")]


def scenario(side: Side, offer: Callable[[str], list[str]]) -> None:
    """The script. ``offer`` gives kube-scheduler's feasible nodes for each filter: the
    simulator's cache computes them, and the server is offered the very same lists."""

    def filter_(pod_uid: str) -> list[str]:
        return side.filter(pod_uid, offer(pod_uid))

    def bind_first(pod_uid: str, passed: list[str]) -> None:
        assert passed, f"{pod_uid} passed no node"
        side.bind(pod_uid, passed[0])

    # Competing gangs: alpha (2 x 8) is planned; bravo (3 x 8) cannot fit beside it.
    a0 = filter_(uid("alpha", 0))
    assert filter_(uid("bravo", 0)) == []
    bind_first(uid("alpha", 0), a0)
    side.advance(1.0)
    bind_first(uid("alpha", 1), filter_(uid("alpha", 1)))
    side.advance(2.0)
    # A barrier that times out: charlie's second member never comes.
    bind_first(uid("charlie", 0), filter_(uid("charlie", 0)))
    side.advance(6.0)
    # Muster restarts; the new session rebuilds from the cluster (alpha bound whole).
    side.restart()
    side.advance(7.0)
    assert filter_(uid("bravo", 0)) == []
    c0 = filter_(uid("charlie", 0))
    bind_first(uid("charlie", 0), c0)
    bind_first(uid("charlie", 1), filter_(uid("charlie", 1)))
    side.advance(30.0)


def deadlock(side: Side, offer: Callable[[str], list[str]]) -> None:
    """Two gangs, each with one member held at the barrier; then pods bound by hand take the
    nodes planned for their second members. Each now needs the node the other one's held
    member sits on: the younger gang yields, and the older one can complete."""

    def bind_first(pod_uid: str) -> None:
        passed = side.filter(pod_uid, offer(pod_uid))
        assert passed, f"{pod_uid} passed no node"
        side.bind(pod_uid, passed[0])

    bind_first(uid("alpha", 0))
    bind_first(uid("zulu", 0))
    for node in ("n1", "n3"):
        squatter = plain_pod(f"squatter-{node}", gpus=8)
        squatter["spec"]["nodeName"] = node
        squatter["status"] = {"phase": "Running"}
        side.bound_by_hand(squatter)
    side.advance(0.5)
    # alpha's second member was planned on n1, which a squatter took: the filter plans it
    # again at once, onto the node the yielding gang gave back.
    passed = side.filter(uid("alpha", 1), offer(uid("alpha", 1)))
    if passed:
        side.bind(uid("alpha", 1), passed[0])
    side.advance(20.0)


def _objects(script: Script) -> list[dict[str, Any]]:
    return deadlock_objects() if script is deadlock else objects()


def _run_sim(model: type[SchedulerModel] = SchedulerModel, script: Script = scenario,
             ) -> tuple[list[Entry], SimSide, list[list[str]]]:
    return run_sim(_objects(script), script, model=model)


def _run_server(offers: list[list[str]], script: Script = scenario,
                ) -> tuple[list[Entry], ServerSide]:
    return run_server(_objects(script), offers, script)


def test_the_server_and_the_simulator_write_the_same_journal() -> None:
    sim_journal, sim, offers = _run_sim()
    server_journal, server = _run_server(offers)
    verbs = {e.verb for e in sim_journal}
    outcomes = {e.outcome for e in sim_journal}
    # The scenario exercises what it claims to.
    assert {"filter", "bind", "poll", "tick"} <= verbs
    assert {"planned", "waiting", "pinned", "released", "timed_out"} <= outcomes
    assert comparable(server_journal) == comparable(sim_journal)
    for pod in (uid("alpha", 0), uid("alpha", 1), uid("charlie", 0), uid("charlie", 1)):
        assert sim.node_of(pod) is not None and server.node_of(pod) == sim.node_of(pod)
    assert server.node_of(uid("bravo", 0)) is None


def test_a_deadlock_is_broken_by_the_same_yield_on_both_sides() -> None:
    sim_journal, sim, offers = _run_sim(script=deadlock)
    server_journal, server = _run_server(offers, script=deadlock)
    yielded = [e for e in sim_journal if e.outcome == "yielded"]
    assert [e.pod for e in yielded] == ["ml/zulu-worker-0-0"]  # the younger gang
    assert any(isinstance(x, Withdrawn) and x.outcome == "yielded"
               for e in sim_journal for x in e.effects)
    assert comparable(server_journal) == comparable(sim_journal)
    assert sim.node_of(uid("alpha", 0)) is not None
    assert server.node_of(uid("alpha", 1)) == sim.node_of(uid("alpha", 1)) is not None


class _LatePolls(SchedulerModel):
    """Broken copy: held requests are polled a second late (a drifted timeout)."""

    def _poll(self, ticket: int, now: float) -> None:
        hold = self._holds.get(ticket)
        if hold is not None and not getattr(self, "_late", False):
            self._late = True
            self.events.schedule(now + 1.0, _Again(ticket))
            return
        self._late = False
        super()._poll(ticket, now)

    def handle(self, event: Any, now: float) -> None:
        if isinstance(event, _Again):
            super()._poll(event.ticket, now)
        else:
            super().handle(event, now)


class _Again:
    def __init__(self, ticket: int) -> None:
        self.ticket = ticket


class _NoTicks(SchedulerModel):
    """Broken copy: the session is never ticked (plans and barriers expire only on requests)."""

    def handle(self, event: Any, now: float) -> None:
        if not isinstance(event, Tick):
            super().handle(event, now)


class _KeepsLedgerOnRestart(SchedulerModel):
    """Broken copy: a restart keeps the old session (nothing is rebuilt)."""

    def restart_muster(self, now: float) -> None:
        self._reject(sorted(self._holds.values()), now)
        self._holds.clear()


@pytest.mark.parametrize(("broken", "script"), [
    (_LatePolls, scenario), (_NoTicks, scenario), (_KeepsLedgerOnRestart, scenario),
    (_NoTicks, deadlock),
], ids=["late-polls", "no-ticks", "restart-keeps-ledger", "no-ticks-no-yield"])
def test_a_simulator_that_handles_time_or_restarts_differently_writes_another_journal(
        broken: type[SchedulerModel], script: Script) -> None:
    sim_journal, _, _ = _run_sim(script=script)
    broken_journal, _, _ = _run_sim(broken, script=script)
    assert comparable(broken_journal) != comparable(sim_journal)
