"""The gang service: the adapter between HTTP requests, cluster state, threads and the session.

Every gang decision is made by :class:`~extender.core.decide.session.GangSession` on an immutable
snapshot; this class serialises access to it (one condition variable), translates requests
and answers, holds a bind request open while the session says HOLD (the blocking wait, in
real time), posts Bindings outside the lock, and carries out the session's effects: events,
wake-ups of held requests, binds of parked members on a pool, requeues, logs and counters.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, cast

from extender.core.decide.effects import BindParked, BindStep, Effect, Requeue, Step
from extender.core.decide.session import GangSession
from extender.core.decide.settings import CoreSettings
from extender.core.model.objects import pod_from_api
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import NodeName, PodInfo
from extender.server.decider import Busy
from extender.server.gangobjects import gang_objects
from extender.server.inspect import describe_gangs
from extender.server.service_effects import ServiceEffects
from extender.server.settings import Settings
from extender.server.wire import (
    BindingArgs,
    ExtenderArgs,
    ExtenderBindingResultJSON,
    ExtenderFilterResultJSON,
    ExtenderPreemptionResultJSON,
    HostPriorityJSON,
    PreemptionArgs,
    binding_result,
    filter_result,
    preemption_result,
    priority_list,
)
from extender.state.ports import (
    Binder,
    BindError,
    Clock,
    EventSink,
    Evictor,
    GangObjectSink,
    MemoryEvictor,
    MemoryRequeuer,
    MemoryUngater,
    PodRef,
    Requeuer,
    Ungater,
)
from extender.state.store import StateStore

log = logging.getLogger("muster.service")

_INSPECT_WAIT = 1.0
"""Seconds ``/inspect/gangs`` waits for the lock before it gives up and says it is busy."""
GANG_OBJECTS_EVERY = 2.0
"""Seconds between two looks at what the Gang objects show (written only when changed)."""
_GAUGE_WAIT = 0.1
"""The same for each gauge of a scrape (six of them: a scrape must stay well inside its
timeout)."""

Count = Callable[[str, str], None]
"""Called with (verb, outcome) once per answered request: the decision counter."""


def _no_count(_verb: str, _outcome: str) -> None:
    return None


def _always() -> bool:
    return True


def core_settings(settings: Settings) -> CoreSettings:
    """The session's settings from the server's: every held bind takes a gunicorn thread,
    so at most the threads less those kept free for filters may hold one."""
    return CoreSettings(plan_ttl=settings.plan_ttl, bind_timeout=settings.bind_timeout,
                        stage_ttl=settings.stage_ttl, gate_bound=settings.gate_bound,
                        scheduler_names=settings.scheduler_names,
                        scoring=settings.scoring, workload_limits=settings.workload_limits,
                        max_held=max(1, settings.threads - max(2, settings.threads // 8)))


class GangService:
    def __init__(self, state: StateStore, *, settings: Settings, clock: Clock, binder: Binder,
                 events: EventSink, count: Count = _no_count,
                 requeuer: Requeuer | None = None, evictor: Evictor | None = None,
                 session: GangSession | None = None,
                 may_act: Callable[[], bool] | None = None,
                 ungater: Ungater | None = None,
                 gang_objects: GangObjectSink | None = None) -> None:
        self._state = state
        self._count = count
        self._requeuer: Requeuer = requeuer or MemoryRequeuer()
        self._evictor: Evictor = evictor or MemoryEvictor()
        self._gang_objects = gang_objects
        """Where the Gang objects go (``kubectl get gangs``); none in snapshot-file mode."""
        self._published: tuple[object, ...] | None = None
        self._published_at = float("-inf")
        self._ungater: Ungater = ungater or MemoryUngater()
        self._binds = ThreadPoolExecutor(max_workers=4, thread_name_prefix="parked-bind")
        """Binds Muster makes itself, for parked members, off the request threads."""
        self._settings = settings
        self._clock = clock
        self._binder = binder
        self._cond = threading.Condition()
        self.session = session or GangSession(core_settings(settings))
        """The gang decisions; touched only under ``_cond``."""
        self._may_act = may_act or _always
        """Checked just before each Binding is posted: False once this replica is no longer
        the leader (leader election), so a bind decided in its term is not posted after it."""
        self._effects = ServiceEffects(events=events, requeuer=self._requeuer,
                                       evictor=self._evictor, ungater=self._ungater,
                                       may_act=self._may_act)
        self._term = 0
        """Bumped when leadership is gained or lost: a bind held in an older term fails."""
        self._looks_before = (0, 0)
        """Gangs planned and answered by the fit bound in ungating looks of the sessions
        this service had before the current one (:meth:`gang_looks`)."""

    # --- leadership (see extender.server.leading) ----------------------------------------------

    def take_over(self, refused: Sequence[PodRef] = ()) -> int:
        """Start a new term as leader: forget every decision of any earlier term and rebuild
        the ledger from the cluster now (bound members of a gang admit it; a gang left below
        its minimum is planned for the rest). ``refused`` are the pods turned away while
        standby: they are requeued. Returns how many pods were requeued."""
        with self._cond:
            self._term += 1
            self._cond.notify_all()  # a bind still held from an older term fails
            gates = self.session.gates
            self._looks_before = (self._looks_before[0] + gates.evaluated,
                                  self._looks_before[1] + gates.bounded)
            self.session = GangSession(self.session.settings)
            for ref in refused:
                self.session.turn_away(ref, untrusted=True)
        return self.housekeep()  # the first look at the cluster rebuilds the ledger

    def step_down(self) -> int:
        """Stop deciding: fail every bind held at the barrier (kube-scheduler retries them
        with the new leader). Returns how many were held."""
        with self._cond:
            self._term += 1
            held = len(self.session.open_requests())
            self._cond.notify_all()
        return held

    # --- readiness -----------------------------------------------------------------------------

    def readiness(self) -> tuple[bool, str]:
        ready = self._state.readiness()
        return ready.ready, ready.reason

    def liveness(self, timeout: float) -> tuple[bool, str]:
        """Alive while the lock every decision takes is free within ``timeout``: a wedged
        service (work under the lock that never ends) fails its liveness probe and is
        restarted, instead of answering probes while every filter times out."""
        try:
            with self._lock_or_busy(timeout):
                return True, "ok"
        except Busy as err:
            return False, str(err)

    @contextmanager
    def _lock_or_busy(self, wait: float = _GAUGE_WAIT) -> Iterator[None]:
        """The lock, for introspection that must not hang with a wedged service."""
        if not self._cond.acquire(timeout=wait):
            raise Busy(f"the service lock was not free within {wait:g}s")
        try:
            yield
        finally:
            self._cond.release()

    # --- effects ------------------------------------------------------------------------------

    def _apply(self, effects: Sequence[Effect]) -> list[BindParked]:
        """Under the lock: carry out what the session decided (:class:`ServiceEffects`);
        returns the parked binds to post (off the lock, on the pool)."""
        wake, parked = self._effects.apply(effects)
        if wake:
            self._cond.notify_all()
        return parked

    # --- filter / prioritize ------------------------------------------------------------------

    def _request_pod(self, raw: Mapping[str, Any]) -> tuple[PodInfo | None, str]:
        """The pod of a request, made visible to the core; or why it cannot be read."""
        raw = _with_identity(raw)
        meta = raw.get("metadata") or {}
        stored = self._state.pod(str(meta.get("namespace")), str(meta.get("name")))
        if stored is not None and _same_version(stored, raw):
            # The informer already holds this very version: reuse the parsed pod (kube-
            # scheduler sends every pending pod again on each retry).
            known = self._state.snapshot().pods.get(str(meta.get("uid")))
            if known is not None:
                return known, ""
        try:
            pod = pod_from_api(self._state.lowered_pod(raw))
        except ValueError as err:
            return None, f"cannot read pod {_pod_key(raw)}: {err}"
        self._state.upsert_pod(raw)
        return pod, ""

    def filter(self, args: ExtenderArgs) -> ExtenderFilterResultJSON:
        ready = self._state.readiness()
        if not ready.ready:
            self._count("filter", "not_ready")
            self._turn_away(args.pod)
            return filter_result(args, error=f"muster: cluster state not trusted ({ready.reason});"
                                             " refusing to place pods until it is resynced")
        pod, problem = self._request_pod(args.pod)
        if pod is None:
            self._count("filter", "bad_pod")
            return filter_result(args, error=problem)
        if not self._takes_devices(pod):
            self._count("filter", "no_devices")
            return filter_result(args, args.node_names)
        with self._cond:
            snapshot = self._state.snapshot()
            # Names Muster has not seen yet pass through the core harmlessly (it never passes
            # a node it does not know); they are named only when an answer gives reasons.
            candidates = cast(tuple[NodeName, ...], args.node_names)
            step = self.session.filter(pod, candidates, snapshot=snapshot, now=self._clock())
            self._apply(step.effects)
        decision = step.decision
        self._count("filter", str(decision.outcome))
        log.debug("verb=filter pod=%s gang=%s outcome=%s passed=%d reason=%r", pod.key,
                  decision.gang, decision.outcome, len(decision.passed), decision.reason)
        passed = decision.passed
        known = _node_names(snapshot)
        if not known.issuperset(passed):  # cheap: few names, except for pods without a gang
            # A node Muster has not seen fails: it cannot vouch for its GPUs.
            passed = tuple(n for n in passed if n in known)
        if passed:
            # kube-scheduler will place the pod on one of the passed nodes; per-node reasons
            # for the others only feed a FitError message that cannot happen now. A pinned
            # member of a big gang would otherwise ship one reason per node (hundreds of KB
            # at 5,000 nodes) for kube-scheduler to decode on every cycle.
            return filter_result(args, passed)
        # NodeName is str at run time; the casts only tell mypy what Mapping's invariance hides.
        failed = cast(Mapping[str, str], decision.failed)
        unresolvable = cast(Mapping[str, str], decision.unresolvable)
        unknown = _unknown(args.node_names, snapshot)
        if unknown:
            failed = {**failed, **unknown}
            unresolvable = {n: r for n, r in unresolvable.items() if n not in unknown}
        return filter_result(args, passed, failed=failed, unresolvable=unresolvable)

    def prioritize(self, args: ExtenderArgs) -> list[HostPriorityJSON]:
        if not self._state.readiness().ready:
            self._count("prioritize", "not_ready")
            return []
        pod, _ = self._request_pod(args.pod)
        if pod is None:
            self._count("prioritize", "bad_pod")
            return []
        if not self._takes_devices(pod):
            self._count("prioritize", "no_devices")
            return priority_list([(n, 0) for n in args.node_names])
        with self._cond:
            snapshot = self._state.snapshot()
            known = _node_names(snapshot)
            candidates = cast(tuple[NodeName, ...], tuple(n for n in args.node_names
                                                         if n in known))
            scores = self.session.prioritize(pod, candidates, snapshot=snapshot,
                                             now=self._clock())
        self._count("prioritize", "scored")
        return priority_list([(str(n), max(0, min(10, int(s)))) for n, s in scores])

    def preempt(self, args: PreemptionArgs) -> ExtenderPreemptionResultJSON:
        if not self._state.readiness().ready:
            self._count("preempt", "not_ready")
            return preemption_result({})
        pod, _ = self._request_pod(args.pod)
        if pod is None:
            self._count("preempt", "bad_pod")
            return preemption_result({})
        if not self._takes_devices(pod):  # kube-scheduler's own choice, as if never asked
            self._count("preempt", "no_devices")
            return preemption_result(args.victims, args.pdb_violations)
        with self._cond:
            victims = {NodeName(n): v for n, v in args.victims.items()}
            step = self.session.preempt(
                pod, victims, snapshot=self._state.snapshot(), now=self._clock(),
                pdb_violations={NodeName(n): c for n, c in args.pdb_violations.items()})
            self._apply(step.effects)
        chosen = step.victims
        self._count("preempt", "victims" if chosen else "none")
        return preemption_result({str(n): list(v) for n, v in chosen.items()},
                                 args.pdb_violations)

    def _takes_devices(self, pod: PodInfo) -> bool:
        """Only pods that take GPUs or other devices are Muster's to decide; the others are
        answered as kube-scheduler alone would place them (the extender block names no
        ``managedResources``, so that claim-only pods reach Muster: docs/dra.md)."""
        return pod.shape.takes_devices(self.session.settings.gpu_resource)

    def _bind_at_once(self, ref: PodRef, node: str) -> ExtenderBindingResultJSON:
        """A pod that takes no devices, bound as kube-scheduler's DefaultBinder would."""
        if not self._may_act():
            self._count("bind", "not_leader")
            return binding_result(f"muster: no longer the leader; not binding {ref.key}")
        try:
            self._binder.bind(ref, node)
        except BindError as err:
            self._count("bind", "error")
            return binding_result(f"binding {ref.key} to {node} failed: {err}")
        self._state.assume_bound(ref.namespace, ref.name, node)
        self._count("bind", "no_devices")
        return binding_result()

    # --- bind: the gang barrier ---------------------------------------------------------------

    def bind(self, args: BindingArgs) -> ExtenderBindingResultJSON:
        ref = PodRef(args.pod_namespace, args.pod_name, args.pod_uid)
        if not self._state.readiness().ready:
            self._count("bind", "not_ready")
            return binding_result(f"muster: cluster state not trusted; not binding {ref.key}")
        raw = self._state.pod(ref.namespace, ref.name)
        if raw is None:
            self._count("bind", "unknown_pod")
            return binding_result(f"pod {ref.key} not found in Muster's cache")
        meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
        if meta.get("uid") and meta.get("uid") != ref.uid:
            self._count("bind", "stale_uid")
            return binding_result(f"pod {ref.key} has UID {meta.get('uid')}, bind asked for "
                                  f"{ref.uid}: the pod was recreated; not binding")
        if spec.get("nodeName"):
            if spec["nodeName"] == args.node:
                self._count("bind", "already_bound")
                return binding_result()  # a retry of a bind that already happened
            self._count("bind", "bound_elsewhere")
            return binding_result(f"pod {ref.key} is already bound to {spec['nodeName']}")
        known = self._state.snapshot().pods.get(ref.uid)
        if known is not None and not self._takes_devices(known):
            return self._bind_at_once(ref, args.node)
        step, parked = self._pass_barrier(ref, NodeName(args.node))
        for member in parked:  # parked members of the gang this bind completed
            self._binds.submit(self._bind_parked, member.pod, member.node)
        if step.step is Step.REFUSE:
            self._count("bind", step.outcome)
            log.info("verb=bind pod=%s node=%s outcome=%s reason=%r", ref.key, args.node,
                     step.outcome, step.reason)
            return binding_result(step.reason)
        if not self._may_act():
            with self._cond:
                self.session.bind_failed(ref.uid, current=self._state.snapshot)
            self._count("bind", "not_leader")
            return binding_result(f"muster: no longer the leader; not binding {ref.key}")
        try:
            self._binder.bind(ref, args.node)
        except BindError as err:
            with self._cond:
                self.session.bind_failed(ref.uid, current=self._state.snapshot)
            self._count("bind", "error")
            log.warning("verb=bind pod=%s node=%s outcome=error reason=%r", ref.key, args.node,
                        str(err))
            return binding_result(f"binding {ref.key} to {args.node} failed: {err}")
        self._state.assume_bound(ref.namespace, ref.name, args.node)
        with self._cond:
            self.session.bound(ref.uid, NodeName(args.node), current=self._state.snapshot)
        self._count("bind", step.outcome)
        log.info("verb=bind pod=%s node=%s outcome=%s", ref.key, args.node, step.outcome)
        return binding_result()

    def _pass_barrier(self, ref: PodRef, node: NodeName) -> tuple[BindStep, list[BindParked]]:
        """The session's answer for this request, after waiting (in real time, on the
        condition variable) for as long as it says HOLD; and the parked binds to post."""
        with self._cond:
            term = self._term
            step = self.session.bind(ref, node, snapshot=self._state.snapshot(),
                                     now=self._clock())
            parked = self._apply(step.effects)
            if step.step is not Step.HOLD:
                return step, parked
            ticket, deadline = step.ticket, step.deadline
            session = self.session
            try:
                while True:
                    self._cond.wait(timeout=max(deadline - self._clock(), 0.001))
                    if self._term != term:  # leadership changed while it was held
                        return BindStep(Step.REFUSE, "not_leader", reason=(
                            f"muster: leadership changed while {ref.key} was held at the "
                            "gang barrier; not binding it (the new leader decides)"),
                            gang=step.gang), []
                    step = self.session.poll(ticket, snapshot=self._state.snapshot(),
                                             now=self._clock())
                    parked += self._apply(step.effects)
                    if step.step is not Step.HOLD:
                        return step, parked
                    deadline = step.deadline
            finally:
                session.close(ticket)

    def _bind_parked(self, ref: PodRef, node: str) -> None:
        """Bind a parked member of a gang that just completed (on the bind pool)."""
        if not self._may_act():
            self._count("bind", "parked_not_leader")
            log.warning("verb=bind pod=%s node=%s outcome=parked-not-leader", ref.key, node)
            return
        try:
            self._binder.bind(ref, node)
        except BindError as err:
            with self._cond:
                self.session.bind_failed(ref.uid, current=self._state.snapshot)
            self._count("bind", "parked_error")
            log.warning("verb=bind pod=%s node=%s outcome=parked-error reason=%r", ref.key,
                        node, str(err))
            return
        except Exception:  # the pool thread must survive; the pod is retried by the scheduler
            log.exception("verb=bind pod=%s node=%s outcome=parked-error", ref.key, node)
            return
        self._state.assume_bound(ref.namespace, ref.name, node)
        with self._cond:
            self.session.bound(ref.uid, NodeName(node), current=self._state.snapshot)
        self._count("bind", "parked_bound")
        log.info("verb=bind pod=%s node=%s outcome=parked-bound", ref.key, node)

    # --- housekeeping: time passes and state changes without requests ------------------------

    def waits_on_cluster(self) -> bool:
        """Whether pods wait for the cluster to change: gated pods Muster watches, or pods it
        turned away. Read without the lock (a hint for the housekeeper's nudges: a stale
        answer costs one round, or leaves the change to the next tick)."""
        session = self.session
        return bool(session.gates.since) or bool(session.turned_away)

    def housekeep(self) -> int:
        """Expire what is due, requeue turned-away pods whose obstacle is gone, and ungate
        gated gangs whose plan is made; returns how many were requeued. Run every second or
        so by the server's housekeeper."""
        ready = self._state.readiness().ready
        with self._cond:
            snapshot, now = self._state.snapshot(), self._clock()
            effects = self.session.tick(snapshot, now=now, trusted=ready)
            if ready:  # gated gangs are planned only on a state that can be trusted
                effects += self.session.ungate(snapshot, now=now)
            parked = self._apply(effects)
            objects = self._gang_objects_due(snapshot, now)
        if objects is not None and self._gang_objects is not None:
            self._gang_objects.publish(objects)
        for member in parked:
            self._binds.submit(self._bind_parked, member.pod, member.node)
        return sum(len(e.pods) for e in effects if isinstance(e, Requeue))

    def _gang_objects_due(self, snapshot: ClusterSnapshot, now: float,
                          ) -> dict[tuple[str, str], dict[str, Any]] | None:
        """Under the lock: the Gang objects on ``snapshot`` (the one housekeeping ticked
        with), when something they show may have changed and at most every
        :data:`GANG_OBJECTS_EVERY` seconds; ``None`` otherwise."""
        if self._gang_objects is None or now - self._published_at < GANG_OBJECTS_EVERY:
            return None
        session = self.session
        seen = (id(snapshot), session.ledger.version, session.reasons_version)
        if seen == self._published:
            return None
        self._published, self._published_at = seen, now
        return gang_objects(self._gangs(snapshot), snapshot)

    def _turn_away(self, raw: Mapping[str, Any]) -> None:
        meta = _with_identity(raw).get("metadata") or {}
        ref = PodRef(str(meta.get("namespace")), str(meta.get("name")), str(meta.get("uid")))
        with self._cond:
            self.session.turn_away(ref, untrusted=True)

    # --- introspection -----------------------------------------------------------------------

    def inspect_gangs(self) -> list[dict[str, Any]]:
        snapshot = self._state.snapshot()
        with self._lock_or_busy(_INSPECT_WAIT):
            return self._gangs(snapshot)

    def _gangs(self, snapshot: ClusterSnapshot) -> list[dict[str, Any]]:
        """Under the lock: the gangs this Muster serves, as ``/inspect/gangs`` shows them."""
        session = self.session
        return describe_gangs(snapshot, session.ledger, last_reason=dict(session.last_reason),
                              waiting=session.open_requests(), holders=dict(session.holders),
                              scheduler_names=self._settings.scheduler_names)

    def gang_looks(self) -> Mapping[str, int]:
        """Gangs left gated that ungating looks planned (the planner ran, whether or not it
        found room) and those the fit bound answered without planning, since start, over
        every term (read under the lock: a new term moves the counts to ``_looks_before``)."""
        with self._lock_or_busy():
            planned, bounded = self._looks_before
            gates = self.session.gates
            return {"planner": planned + gates.evaluated, "bound": bounded + gates.bounded}

    def gang_counts(self) -> Mapping[str, int]:
        snapshot = self._state.snapshot()
        with self._lock_or_busy():
            gangs = self._gangs(snapshot)
            counts = {"waiting": 0, "planned": 0, "bound": 0, "finished": 0,
                      "expired": self.session.expired_total}
            for g in gangs:
                counts[g["state"]] = counts.get(g["state"], 0) + 1
            return counts

    def reserved_gpus(self) -> float:
        snapshot = self._state.snapshot()
        with self._lock_or_busy():
            gangs = describe_gangs(snapshot, self.session.ledger, last_reason={}, waiting={},
                                   scheduler_names=self._settings.scheduler_names)
        return float(sum(g["reservedGpus"] for g in gangs))

    def binds_waiting(self) -> int:
        with self._lock_or_busy():
            return len(self.session.open_requests())


_NAMES: dict[int, tuple[object, frozenset[str]]] = {}


def _node_names(snapshot: ClusterSnapshot) -> frozenset[str]:
    """The snapshot's node names as a frozenset, built once per version of its nodes: a
    snapshot advanced by pod events keeps the previous one's node map, and a copy of 10,000
    names per pod event was most of the first filter's cost after it."""
    nodes = snapshot.nodes
    hit = _NAMES.get(id(nodes))
    if hit is not None and hit[0] is nodes:
        return hit[1]
    names = frozenset(nodes)
    _NAMES.clear()  # one live node map at a time is all the cache is for
    _NAMES[id(nodes)] = (nodes, names)
    return names


def _unknown(names: tuple[str, ...], snapshot: ClusterSnapshot) -> dict[str, str]:
    """Offered names Muster has not seen, with the reason they fail."""
    nodes = _node_names(snapshot)
    if nodes.issuperset(names):  # the usual case: one C-level pass, no copy
        return {}
    return {n: "node unknown to Muster (not yet seen by its node informer)"
            for n in names if n not in nodes}


def _same_version(stored: Mapping[str, Any], sent: Mapping[str, Any]) -> bool:
    a, b = stored.get("metadata") or {}, sent.get("metadata") or {}
    if a.get("uid") != b.get("uid"):
        return False
    version = b.get("resourceVersion")
    # Without versions (snapshot files, tests) only an identical spec counts as the same pod.
    return (version == a.get("resourceVersion") if version
            else stored.get("spec") == sent.get("spec"))


def _pod_key(raw: Mapping[str, Any]) -> str:
    meta = raw.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def _with_identity(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """A request pod with namespace and uid filled in, so it can be indexed like any other."""
    meta = dict(raw.get("metadata") or {})
    if meta.get("namespace") and meta.get("uid"):
        return raw
    meta.setdefault("namespace", "default")
    meta["namespace"] = meta["namespace"] or "default"
    meta["uid"] = meta.get("uid") or f"request:{meta['namespace']}/{meta.get('name')}"
    return {**raw, "metadata": meta}
