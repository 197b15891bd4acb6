"""The server and the simulator ungate, preempt and evict alike: same decisions, same effects.

Two scripts, each replayed through both drivers (:mod:`tests.unit.conformance.sides`), whose
journals must be identical entry by entry:

- **gates**: two gated gangs that cannot both fit. An ungating look lifts the older gang's
  gates (``Ungate``) and leaves the other gated; the first gang's members never come, its
  plan expires (``PlanExpired``), the next look lifts the second gang's gates, and it binds
  whole.
- **preemption**: a high-priority gang finds the cluster full. kube-scheduler's preempt call
  is answered from the gang's preemption plan: the whole lowest-priority gang is evicted
  (``Evict``), the victims are deleted, and the preemptor binds where they ran.

The broken copies show each comparison can fail: a simulator that does not lift the gates an
``Ungate`` names, or that lifts gates the session never named, writes another journal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from extender.core.decide.effects import Effect, Evict, PlanExpired, Ungate, dispatch
from extender.core.decide.session import Entry
from extender.core.model.notices import PodRef
from simulator.replay_effects import ReplayEffects
from simulator.scheduler import SchedulerModel
from simulator.scheduler_values import Mode
from tests.unit.server.builders import gpu_node

from . import sides
from .sides import Side, comparable, jobset_objects, uid

NODES = ["n0", "n1", "n2", "n3"]


def gated_objects() -> list[dict[str, Any]]:
    return [*(gpu_node(n, gpus=8) for n in NODES),
            *jobset_objects("alpha", workers=2, gpus=8, created="2026-12-01T10:00:00Z",
                            gated=True),
            *jobset_objects("bravo", workers=3, gpus=8, created="2026-12-01T10:01:00Z",
                            gated=True)]


def full_objects() -> list[dict[str, Any]]:
    return [*(gpu_node(n, gpus=8) for n in NODES),
            *jobset_objects("low", workers=2, gpus=8, created="2026-12-01T09:00:00Z",
                            nodes=["n0", "n1"]),
            *jobset_objects("mid", workers=2, gpus=8, created="2026-12-01T09:30:00Z",
                            priority=50, nodes=["n2", "n3"]),
            *jobset_objects("high", workers=2, gpus=8, created="2026-12-01T10:00:00Z",
                            priority=100)]


def _bind_whole(side: Side, offer: Callable[[str], list[str]], name: str, n: int) -> None:
    """Each member filtered, then bound to its first passed node (if any)."""
    for i in range(n):
        passed = side.filter(uid(name, i), offer(uid(name, i)))
        if passed:
            side.bind(uid(name, i), passed[0])


def gates(side: Side, offer: Callable[[str], list[str]]) -> None:
    """The scripts assert nothing themselves (a broken copy must run to the end); the tests
    check what the sides' journals and clusters show."""
    side.look()  # alpha is planned and ungated; bravo (3 x 8 GPUs) does not fit beside it
    side.advance(25.0)  # alpha's members never come: its plan expires, bravo's gates lift
    _bind_whole(side, offer, "bravo", 3)
    side.advance(40.0)


def preemption(side: Side, offer: Callable[[str], list[str]]) -> None:
    side.filter(uid("high", 0), offer(uid("high", 0)))  # the cluster is full
    # kube-scheduler offers, per node, the lower-priority pods it could evict there.
    side.chosen = side.preempt(uid("high", 0), {
        "n0": [uid("low", 0)], "n1": [uid("low", 1)],
        "n2": [uid("mid", 0)], "n3": [uid("mid", 1)]})
    side.delete(side.evicted)  # the Eviction API deletes them
    side.advance(1.0)
    _bind_whole(side, offer, "high", 2)
    side.advance(30.0)


def _both(raw: list[dict[str, Any]], script: sides.Script,
          ) -> tuple[list[Entry], sides.SimSide, list[Entry], sides.ServerSide]:
    sim_journal, sim, offers = sides.run_sim(raw, script, mode=Mode.GATED)
    server_journal, server = sides.run_server(raw, offers, script)
    return sim_journal, sim, server_journal, server


def _nodes(side: Side, pods: list[str]) -> list[str | None]:
    return [side.node_of(p) for p in pods]


def test_a_gated_gang_is_ungated_alike_once_the_plan_ahead_of_it_expires() -> None:
    sim_journal, sim, server_journal, server = _both(gated_objects(), gates)
    ungates = [(e.now, sorted(p.name for p in x.pods))
               for e in sim_journal for x in e.effects if isinstance(x, Ungate)]
    assert ungates == [(0.0, ["alpha-worker-0-0", "alpha-worker-0-1"]),
                       (20.0, ["bravo-worker-0-0", "bravo-worker-0-1", "bravo-worker-0-2"])]
    assert any(isinstance(x, PlanExpired) for e in sim_journal for x in e.effects)
    assert comparable(server_journal) == comparable(sim_journal)
    bravo = [uid("bravo", i) for i in range(3)]
    assert not any(side.gated(p) for side in (sim, server) for p in bravo)
    assert None not in _nodes(sim, bravo) and _nodes(server, bravo) == _nodes(sim, bravo)


def test_a_preempting_gang_evicts_the_same_whole_victims_and_binds_alike() -> None:
    sim_journal, sim, server_journal, server = _both(full_objects(), preemption)
    evicts = [x for e in sim_journal for x in e.effects if isinstance(x, Evict)]
    assert [(x.gang, sorted(p.uid for p in x.pods)) for x in evicts] == [
        ("ml/high", [uid("low", 0), uid("low", 1)])]  # the whole lowest-priority gang
    assert sim.chosen == server.chosen == {"n0": [uid("low", 0)], "n1": [uid("low", 1)]}
    assert server.evicted == sim.evicted
    assert comparable(server_journal) == comparable(sim_journal)
    high = [uid("high", i) for i in range(2)]
    assert sorted(str(n) for n in _nodes(sim, high)) == ["n0", "n1"]  # where the victims ran
    assert _nodes(server, high) == _nodes(sim, high)


class _IgnoresUngate(ReplayEffects):
    def ungate(self, effect: Ungate) -> None:
        return None


class _LiftsEveryGate(ReplayEffects):
    def ungate(self, effect: Ungate) -> None:
        super().ungate(effect)
        for pod in list(self.model.cluster.gated):
            found = self.model.cluster.pods[pod]
            super().ungate(Ungate((PodRef(found.namespace, found.name, found.uid),), "x"))


def _model(handler: type[ReplayEffects]) -> type[SchedulerModel]:
    class Broken(SchedulerModel):
        def _effects(self, effects: Sequence[Effect], now: float) -> None:
            dispatch(effects, handler(self, now))
    return Broken


@pytest.mark.parametrize("handler", [_IgnoresUngate, _LiftsEveryGate],
                         ids=["gates-never-lifted", "gates-lifted-unasked"])
def test_a_simulator_that_handles_ungating_differently_writes_another_journal(
        handler: type[ReplayEffects]) -> None:
    good, _, _ = sides.run_sim(gated_objects(), gates, mode=Mode.GATED)
    broken, _, _ = sides.run_sim(gated_objects(), gates, model=_model(handler), mode=Mode.GATED)
    assert comparable(broken) != comparable(good)
