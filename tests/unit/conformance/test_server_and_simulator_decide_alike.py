"""The server and the simulator drive one gang session alike: same decisions, same effects.

One scenario, replayed through the extender server (``GangService``: real threads holding bind
requests, a fake clock, a memory binder) and through the simulator's kube-scheduler model
(``SchedulerModel``: its virtual clock, held requests polled by events): competing gangs, a
barrier that times out, a restart of Muster, and a deadlock broken by a yield. Each side's
session writes a journal of every verb it answered; the two journals must be identical,
entry by entry (requests woken together at one instant are compared as a set: on the server
their threads race for the lock).

The broken copies at the end show the test can fail: a simulator that polls held requests
late, ticks late or restarts without a new session writes a different journal.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from extender.core.decide.effects import Withdrawn
from extender.core.decide.session import Entry, GangSession
from extender.core.decide.settings import CoreSettings
from extender.core.model.objects import pod_from_api
from extender.core.model.values import NodeName
from extender.core.workloads.cluster import build_snapshot
from extender.files.catalog import packaged_catalog
from extender.server.service import GangService
from extender.server.settings import Settings
from extender.server.wire import parse_binding_args, parse_extender_args
from extender.state.memory import MemoryBinder
from extender.state.ports import MemoryEvents
from simulator.cluster import ClusterModel
from simulator.engine import EventQueue
from simulator.extender_model import MusterExtender
from simulator.scheduler import SchedulerModel, SchedulerSettings, Tick
from tests.unit.server.builders import (
    Clock,
    bind_body,
    filter_body,
    gpu_node,
    job_of,
    jobset,
    jobset_pod,
    plain_pod,
    store_of,
)

SETTINGS = CoreSettings(plan_ttl=20.0, bind_timeout=3.0)
NODES = ["n0", "n1", "n2", "n3"]


def _jobset(name: str, *, workers: int, gpus: int, created: str) -> list[dict[str, Any]]:
    js = jobset(name, workers=workers, gpus=gpus)
    js["metadata"]["creationTimestamp"] = created
    return [js, job_of(name), *(jobset_pod(name, i, gpus=gpus) for i in range(workers))]


def objects() -> list[dict[str, Any]]:
    return [*(gpu_node(n, gpus=8) for n in NODES),
            *_jobset("alpha", workers=2, gpus=8, created="2026-12-01T10:00:00Z"),
            *_jobset("bravo", workers=3, gpus=8, created="2026-12-01T10:01:00Z"),
            *_jobset("charlie", workers=2, gpus=4, created="2026-12-01T10:02:00Z")]


def deadlock_objects() -> list[dict[str, Any]]:
    return [*(gpu_node(n, gpus=8) for n in NODES),
            *_jobset("alpha", workers=2, gpus=8, created="2026-12-01T10:00:00Z"),
            *_jobset("zulu", workers=2, gpus=8, created="2026-12-01T11:00:00Z")]


def uid(name: str, index: int) -> str:
    return f"uid-{name}-{index}"


class SimSide:
    """The simulator's kube-scheduler model, its cycle steps called by the script."""

    def __init__(self, journal: list[Entry], model: type[SchedulerModel],
                 raw: list[dict[str, Any]]) -> None:
        snap = build_snapshot(nodes=[o for o in raw if o["kind"] == "Node"],
                              pods=[o for o in raw if o["kind"] == "Pod"],
                              objects=[o for o in raw if o["kind"] not in ("Node", "Pod")],
                              catalog=packaged_catalog())
        self.cluster = ClusterModel(snap.nodes.values(), gpu=SETTINGS.gpu_resource)
        for tree in snap.workloads.values():
            self.cluster.add_workload(tree)
        for pod in snap.pods.values():
            self.cluster.add_pod(pod, snap.memberships.get(pod.uid))
        self.events: EventQueue[object] = EventQueue()
        self.sched = model(self.cluster, SchedulerSettings(core=SETTINGS, exhaustive=True),
                           events=self.events, on_bound=lambda _pod, _now: None)
        self.sched.extender = MusterExtender(self.cluster, SETTINGS, exhaustive=True,
                                             journal=journal)
        self.now = 0.0

    def offered(self, pod_uid: str) -> list[str]:
        """kube-scheduler's feasible nodes for the pod (what it would send the extender)."""
        pod = self.cluster.pods[pod_uid]
        demand = self.cluster.demand(pod.shape)
        return sorted(n for _, names in self.cluster.feasible(pod.shape, demand) for n in names)

    def filter(self, pod_uid: str, candidates: list[str]) -> list[str]:
        pod = self.cluster.pods[pod_uid]
        passed, effects = self.sched.extender.filter(pod, _Listed(candidates), self.now)
        self.sched._effects(effects, self.now)
        return sorted(passed)

    def bind(self, pod_uid: str, node: str) -> None:
        self.cluster.assume(pod_uid, NodeName(node))
        self.sched._muster_bind(pod_uid, NodeName(node), self.now)

    def advance(self, to: float) -> None:
        while (due := self.events.peek_time()) is not None and due <= to:
            for item in list(self.events.pop_due()):
                self.sched.handle(item.event, item.time)  # type: ignore[arg-type]
        self.now = to

    def restart(self) -> None:
        self.sched.restart_muster(self.now)

    def bound_by_hand(self, raw: dict[str, Any]) -> None:
        """A pod another scheduler (or a person) bound: kube-scheduler's cache sees it."""
        self.cluster.add_pod(pod_from_api(raw), None)

    def node_of(self, pod_uid: str) -> str | None:
        return self.cluster.pods[pod_uid].node_name


class _Listed:
    """The nodes a script step offers, as the simulator offers kube-scheduler's."""

    def __init__(self, names: list[str]) -> None:
        self.names = [NodeName(n) for n in names]

    def all(self) -> list[NodeName]:
        return list(self.names)

    def among(self, names: Any) -> list[NodeName]:
        return [NodeName(n) for n in names if n in self.names]


class ServerSide:
    """The extender server, its verbs called as kube-scheduler calls them: binds on threads."""

    def __init__(self, journal: list[Entry], raw: list[dict[str, Any]]) -> None:
        self.journal = journal
        self.store = store_of(raw)
        self.clock = Clock()
        self.clock.now = 0.0
        self.pool = ThreadPoolExecutor(max_workers=8)
        self.binds: dict[str, Future[Any]] = {}
        self.svc = self._service()

    def _service(self) -> GangService:
        return GangService(self.store, settings=Settings(threads=32), clock=self.clock,
                           binder=MemoryBinder(self.store), events=MemoryEvents(),
                           session=GangSession(SETTINGS, journal=self.journal))

    def _raw(self, pod_uid: str) -> dict[str, Any]:
        name = pod_uid.removeprefix("uid-")
        js, index = name.rsplit("-", 1)
        raw = self.store.pod("ml", f"{js}-worker-0-{index}")
        assert raw is not None
        return dict(raw)

    def filter(self, pod_uid: str, candidates: list[str]) -> list[str]:
        answer = self.svc.filter(parse_extender_args(filter_body(self._raw(pod_uid),
                                                                 candidates)))
        return sorted(answer["NodeNames"] or [])

    def bind(self, pod_uid: str, node: str) -> None:
        body = parse_binding_args(bind_body(self._raw(pod_uid), node))
        self.binds[pod_uid] = self.pool.submit(self.svc.bind, body)
        self._quiet()

    def _quiet(self) -> None:
        """Wait until every open bind request is either answered or waiting on the
        condition variable (the server has nothing left to do until woken)."""
        deadline = time.monotonic() + 10
        while True:
            with self.svc._cond:
                open_binds = sum(1 for f in self.binds.values() if not f.done())
                waiting = len(self.svc._cond._waiters)  # type: ignore[attr-defined]
            if open_binds == waiting:
                return
            assert time.monotonic() < deadline, "the server's bind threads never settled"
            time.sleep(0.002)

    def advance(self, to: float) -> None:
        """Let time pass as the server lives it: at each instant something is due, in order,
        the held requests wake (their waits end) and then the housekeeper ticks."""
        last: float | None = None
        while True:
            with self.svc._cond:
                session = self.svc.session
                times = [t for t in (session.next_due(),
                                     *(h.deadline for h in session.held.by_pod.values()))
                         if t is not None and self.clock.now <= t <= to
                         and (last is None or t > last)]
            if not times:
                break
            last = self.clock.now = min(times)
            with self.svc._cond:
                self.svc._cond.notify_all()
            self._quiet()
            with self.svc._cond:
                due = self.svc.session.next_due()
            if due is not None and due <= self.clock.now:  # the housekeeper finds work
                self.svc.housekeep()
                self._quiet()
        self.clock.now = to

    def bound_by_hand(self, raw: dict[str, Any]) -> None:
        self.store.upsert_pod(raw)

    def restart(self) -> None:
        self._quiet()
        assert all(f.done() for f in self.binds.values()), "restart with binds held"
        self.svc = self._service()

    def node_of(self, pod_uid: str) -> str | None:
        node: str | None = (self._raw(pod_uid).get("spec") or {}).get("nodeName")
        return node


Side = SimSide | ServerSide


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


def _comparable(journal: list[Entry]) -> list[Any]:
    """The journal with consecutive polls at one instant as a set (their threads race)."""
    out: list[Any] = []
    for entry in journal:
        item = (entry.verb, entry.now, entry.pod, entry.outcome, entry.reason, entry.effects)
        if (entry.verb == "poll" and out and isinstance(out[-1], frozenset)
                and next(iter(out[-1]))[1] == entry.now):
            out[-1] = out[-1] | {item}
        elif entry.verb == "poll":
            out.append(frozenset({item}))
        else:
            out.append(item)
    return out


Script = Callable[[Side, Callable[[str], list[str]]], None]


def _objects(script: Script) -> list[dict[str, Any]]:
    return deadlock_objects() if script is deadlock else objects()


def _run_sim(model: type[SchedulerModel] = SchedulerModel, script: Script = scenario,
             ) -> tuple[list[Entry], SimSide, list[list[str]]]:
    journal: list[Entry] = []
    sim = SimSide(journal, model, _objects(script))
    offers: list[list[str]] = []

    def offer(pod_uid: str) -> list[str]:
        offers.append(sim.offered(pod_uid))
        return offers[-1]

    script(sim, offer)
    return journal, sim, offers


def _run_server(offers: list[list[str]], script: Script = scenario,
                ) -> tuple[list[Entry], ServerSide]:
    journal: list[Entry] = []
    server = ServerSide(journal, _objects(script))
    replay = iter(offers)
    script(server, lambda _pod: next(replay))
    server.pool.shutdown(wait=True)
    return journal, server


def test_the_server_and_the_simulator_write_the_same_journal() -> None:
    sim_journal, sim, offers = _run_sim()
    server_journal, server = _run_server(offers)
    verbs = {e.verb for e in sim_journal}
    outcomes = {e.outcome for e in sim_journal}
    # The scenario exercises what it claims to.
    assert {"filter", "bind", "poll", "tick"} <= verbs
    assert {"planned", "waiting", "pinned", "released", "timed_out"} <= outcomes
    assert _comparable(server_journal) == _comparable(sim_journal)
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
    assert _comparable(server_journal) == _comparable(sim_journal)
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
    assert _comparable(broken_journal) != _comparable(sim_journal)
