"""The two drivers of one gang session, called step by step by the conformance scripts.

:class:`SimSide` is the simulator's kube-scheduler model (its virtual clock, held requests
polled by events, effects through ``ReplayEffects``); :class:`ServerSide` is the extender
server (``GangService``: real threads holding bind requests, a fake clock, a memory binder,
effects through ``ServiceEffects``). Both offer the same verbs, so one script drives either;
each side's session writes a journal of every verb it answered.

What the API server would do on its own is done by the sides alike: evicted or finished pods
are deleted, a lifted gate disappears from the pod.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import orjson

from extender.core.decide.effects import Evict
from extender.core.decide.session import Entry, GangSession
from extender.core.decide.settings import CoreSettings
from extender.core.model.objects import pod_from_api
from extender.core.model.values import NodeName
from extender.core.workloads.cluster import build_snapshot
from extender.files.catalog import packaged_catalog
from extender.server.service import GangService
from extender.server.settings import Settings
from extender.server.wire import parse_binding_args, parse_extender_args, parse_preemption_args
from extender.state.memory import MemoryBinder
from extender.state.ports import MemoryEvents, MemoryEvictor, PodRef
from extender.state.store import PODS, StateStore
from simulator.cluster import ClusterModel
from simulator.engine import EventQueue
from simulator.extender_model import MusterExtender
from simulator.scheduler import SchedulerModel
from simulator.scheduler_values import Mode, SchedulerSettings
from tests.unit.server.builders import (
    Clock,
    bind_body,
    filter_body,
    job_of,
    jobset,
    jobset_pod,
    store_of,
)

SETTINGS = CoreSettings(plan_ttl=20.0, bind_timeout=3.0)


def uid(name: str, index: int) -> str:
    """The UID of worker ``index`` of JobSet ``name`` (as :func:`jobset_objects` makes it)."""
    return f"uid-{name}-{index}"


def jobset_objects(name: str, *, workers: int, gpus: int, created: str, priority: int = 0,
                   gated: bool = False, nodes: Sequence[str] = ()) -> list[dict[str, Any]]:
    """A JobSet, its Job and its worker pods: of ``priority``, behind Muster's gate when
    ``gated``, bound (running) on ``nodes`` when given, one worker per node."""
    js = jobset(name, workers=workers, gpus=gpus)
    js["metadata"]["creationTimestamp"] = created
    pods = [jobset_pod(name, i, gpus=gpus, node=nodes[i] if nodes else None)
            for i in range(workers)]
    if priority:
        js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
            "priority"] = priority
        for pod in pods:
            pod["spec"]["priority"] = priority
    if gated:
        for pod in pods:
            pod["spec"]["schedulingGates"] = [{"name": SETTINGS.gate}]
    return [js, job_of(name), *pods]


class SimSide:
    """The simulator's kube-scheduler model, its cycle steps called by the script."""

    def __init__(self, journal: list[Entry], model: type[SchedulerModel],
                 raw: list[dict[str, Any]], *, mode: Mode = Mode.MUSTER) -> None:
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
        self.sched = model(self.cluster,
                           SchedulerSettings(mode=mode, core=SETTINGS, exhaustive=True),
                           events=self.events, on_bound=lambda _pod, _now: None)
        self.sched.extender = MusterExtender(self.cluster, SETTINGS, exhaustive=True,
                                             journal=journal)
        self.now = 0.0
        self.evicted: list[str] = []
        """Pods the session's :class:`Evict` effects named, oldest first."""
        self.chosen: dict[str, list[str]] = {}
        """What a script keeps of an answer (its last preempt call's victims)."""

    def offered(self, pod_uid: str) -> list[str]:
        """kube-scheduler's feasible nodes for the pod (what it would send the extender)."""
        pod = self.cluster.pods[pod_uid]
        demand = self.cluster.demand(pod.shape)
        return sorted(n for _, names in self.cluster.feasible(pod.shape, demand) for n in names)

    def filter(self, pod_uid: str, candidates: list[str]) -> list[str]:
        pod = self.cluster.pods[pod_uid]
        passed, effects = self.sched.extender.filter(pod, Listed(candidates), self.now)
        self.sched._effects(effects, self.now)
        return sorted(passed)

    def bind(self, pod_uid: str, node: str) -> None:
        self.cluster.assume(pod_uid, NodeName(node))
        self.sched._muster_bind(pod_uid, NodeName(node), self.now)

    def preempt(self, pod_uid: str, victims: dict[str, list[str]]) -> dict[str, list[str]]:
        """kube-scheduler's preempt call (the replay's model never makes one: the script
        does, to the session the model drives, and the effects go through the model)."""
        step = self.sched.extender.session.preempt(
            self.cluster.pods[pod_uid], {NodeName(n): tuple(v) for n, v in victims.items()},
            snapshot=self.cluster.snapshot(), now=self.now)
        self.evicted += [p.uid for e in step.effects if isinstance(e, Evict) for p in e.pods]
        self.sched._effects(step.effects, self.now)
        return {str(n): sorted(v) for n, v in step.victims.items() if v}

    def look(self) -> None:
        """An ungating look, as the replay takes one after an instant's events."""
        self.sched.look(self.now)

    def advance(self, to: float) -> None:
        """Handle every event due by ``to``; after each instant's events, an ungating look
        (``muster+gates`` only), as the replay takes one."""
        while (due := self.events.peek_time()) is not None and due <= to:
            for item in list(self.events.pop_due()):
                self.sched.handle(item.event, item.time)  # type: ignore[arg-type]
            self.sched.look(due)
        self.now = to

    def restart(self) -> None:
        self.sched.restart_muster(self.now)

    def bound_by_hand(self, raw: dict[str, Any]) -> None:
        """A pod another scheduler (or a person) bound: kube-scheduler's cache sees it."""
        self.cluster.add_pod(pod_from_api(raw), None)

    def delete(self, uids: list[str]) -> None:
        """The pods are deleted (evicted, or finished and removed)."""
        self.cluster.remove_pods(uids)
        for uid in uids:
            self.sched.forget_pod(uid)
        self.sched.cluster_changed(self.now)

    def node_of(self, pod_uid: str) -> str | None:
        return self.cluster.pods[pod_uid].node_name

    def gated(self, pod_uid: str) -> bool:
        return SETTINGS.gate in self.cluster.pods[pod_uid].gates


class Listed:
    """The nodes a script step offers, as the simulator offers kube-scheduler's."""

    def __init__(self, names: list[str]) -> None:
        self.names = [NodeName(n) for n in names]

    def all(self) -> list[NodeName]:
        return list(self.names)

    def among(self, names: Any) -> list[NodeName]:
        return [NodeName(n) for n in names if n in self.names]


class StoreUngater:
    """Lifts Muster's gate in the store, as the API server applies the ungating patch and
    the informer then sees the pod without it."""

    def __init__(self, store: StateStore) -> None:
        self.store = store

    def ungate(self, pods: Sequence[PodRef], reason: str) -> None:
        for ref in pods:
            raw = self.store.pod(ref.namespace, ref.name)
            assert raw is not None, ref.key
            spec = dict(raw["spec"])
            spec["schedulingGates"] = [g for g in spec.get("schedulingGates", ())
                                       if g["name"] != SETTINGS.gate]
            self.store.apply(PODS, "MODIFIED", {**raw, "spec": spec})


class ServerSide:
    """The extender server, its verbs called as kube-scheduler calls them: binds on threads."""

    def __init__(self, journal: list[Entry], raw: list[dict[str, Any]]) -> None:
        self.journal = journal
        self.store = store_of(raw)
        self.clock = Clock()
        self.clock.now = 0.0
        self.pool = ThreadPoolExecutor(max_workers=8)
        self.binds: dict[str, Future[Any]] = {}
        self.evictor = MemoryEvictor()
        self.svc = self._service()
        self.chosen: dict[str, list[str]] = {}
        """What a script keeps of an answer (its last preempt call's victims)."""

    def _service(self) -> GangService:
        return GangService(self.store, settings=Settings(threads=32), clock=self.clock,
                           binder=MemoryBinder(self.store), events=MemoryEvents(),
                           evictor=self.evictor, ungater=StoreUngater(self.store),
                           session=GangSession(SETTINGS, journal=self.journal))

    def _raw(self, pod_uid: str) -> dict[str, Any]:
        name = pod_uid.removeprefix("uid-")
        js, index = name.rsplit("-", 1)
        raw = self.store.pod("ml", f"{js}-worker-0-{index}")
        assert raw is not None
        return dict(raw)

    @property
    def evicted(self) -> list[str]:
        return [p.uid for p, _ in self.evictor.evicted()]

    def filter(self, pod_uid: str, candidates: list[str]) -> list[str]:
        answer = self.svc.filter(parse_extender_args(filter_body(self._raw(pod_uid),
                                                                 candidates)))
        return sorted(answer["NodeNames"] or [])

    def bind(self, pod_uid: str, node: str) -> None:
        body = parse_binding_args(bind_body(self._raw(pod_uid), node))
        self.binds[pod_uid] = self.pool.submit(self.svc.bind, body)
        self._quiet()

    def preempt(self, pod_uid: str, victims: dict[str, list[str]]) -> dict[str, list[str]]:
        body = orjson.dumps({"Pod": self._raw(pod_uid), "NodeNameToMetaVictims": {
            n: {"Pods": [{"UID": u} for u in v], "NumPDBViolations": 0}
            for n, v in victims.items()}})
        answer = self.svc.preempt(parse_preemption_args(body))
        return {n: sorted(p["UID"] for p in e["Pods"])
                for n, e in answer["NodeNameToMetaVictims"].items()}

    def look(self) -> None:
        """The housekeeper's round after a change: a tick, then an ungating look."""
        self.svc.housekeep()
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
        the held requests wake (their waits end) and then the housekeeper ticks. While pods
        wait at Muster's gate, the housekeeper also runs at each such instant (nudged by the
        change) and when an ungating look falls due."""
        last: float | None = None
        while True:
            with self.svc._cond:
                session = self.svc.session
                gated = bool(session.gates.since)
                times = [t for t in (session.next_due(),
                                     session.gates.due if gated else None,
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
            if gated or (due is not None and due <= self.clock.now):  # the housekeeper's round
                self.svc.housekeep()
                self._quiet()
        self.clock.now = to

    def bound_by_hand(self, raw: dict[str, Any]) -> None:
        self.store.upsert_pod(raw)

    def delete(self, uids: list[str]) -> None:
        for uid in uids:
            raw = self._raw(uid)
            self.store.apply(PODS, "DELETED", raw)

    def restart(self) -> None:
        self._quiet()
        assert all(f.done() for f in self.binds.values()), "restart with binds held"
        self.svc = self._service()

    def node_of(self, pod_uid: str) -> str | None:
        node: str | None = (self._raw(pod_uid).get("spec") or {}).get("nodeName")
        return node

    def gated(self, pod_uid: str) -> bool:
        gates = (self._raw(pod_uid).get("spec") or {}).get("schedulingGates") or ()
        return any(g.get("name") == SETTINGS.gate for g in gates)


Side = SimSide | ServerSide
Script = Callable[[Side, Callable[[str], list[str]]], None]
"""A script drives one side; its second argument gives kube-scheduler's feasible nodes for
each filter (the simulator's cache computes them, the server is offered the same lists)."""


def run_sim(raw: list[dict[str, Any]], script: Script, *,
            model: type[SchedulerModel] = SchedulerModel, mode: Mode = Mode.MUSTER,
            ) -> tuple[list[Entry], SimSide, list[list[str]]]:
    """The script on the simulator; its journal, the side, and the nodes each filter was
    offered (for :func:`run_server`)."""
    journal: list[Entry] = []
    sim = SimSide(journal, model, raw, mode=mode)
    offers: list[list[str]] = []

    def offer(pod_uid: str) -> list[str]:
        offers.append(sim.offered(pod_uid))
        return offers[-1]

    script(sim, offer)
    return journal, sim, offers


def run_server(raw: list[dict[str, Any]], offers: list[list[str]], script: Script,
               ) -> tuple[list[Entry], ServerSide]:
    """The script on the server, each filter offered what the simulator's was."""
    journal: list[Entry] = []
    server = ServerSide(journal, raw)
    replay = iter(offers)
    script(server, lambda _pod: next(replay))
    server.pool.shutdown(wait=True)
    return journal, server


def comparable(journal: list[Entry]) -> list[Any]:
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
