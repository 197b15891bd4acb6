"""The gang service: the one place where requests, cluster state, the ledger and time meet.

Every decision is made by the pure core (``extender.core.decisions``) on an immutable snapshot;
this class only serialises access to the mutable ledger, holds binds at the gang barrier, and
turns decisions into wire results and pod events. Locking: one condition variable guards the
ledger and the barrier tables; the Binding call to the API server happens outside it.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

from extender.core.decisions import (
    BindOutcome,
    CoreSettings,
    FilterOutcome,
    barriers_on_lost_nodes,
    decide_bind,
    decide_filter,
    decide_preempt,
    decide_prioritize,
    expired_barriers,
    withdraw,
)
from extender.core.ledger import Ledger
from extender.core.model import GangKey, NodeName, PodInfo
from extender.core.objects import pod_from_api
from extender.core.snapshot import ClusterSnapshot
from extender.core.yields import decide_yields
from extender.server.decider import Busy
from extender.server.inspect import describe_gangs
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
    EventType,
    MemoryRequeuer,
    PodEvent,
    PodRef,
    Requeuer,
    WorkloadEvent,
)
from extender.state.store import StateStore

log = logging.getLogger("muster.service")

_HOLD_GRACE = 1.25
"""A held bind may wait up to this many times --bind-timeout when its gang's barrier ends by
then; kube-scheduler's httpTimeout must be at least 1.5 times --bind-timeout."""
_INSPECT_WAIT = 1.0
"""Seconds ``/inspect/gangs`` waits for the lock before it gives up and says it is busy."""
_GAUGE_WAIT = 0.1
"""The same for each gauge of a scrape (six of them: a scrape must stay well inside its
timeout)."""
_YIELD_EVERY = 2.0
"""Seconds between checks for gangs deadlocked at the bind barrier (see ``_break_deadlocks``)."""


@dataclass
class _Barrier:
    """Binds held for gangs that have not reached their minimum yet."""

    waiting: dict[str, tuple[GangKey | None, str, int]] = field(default_factory=dict)
    """Pod UID -> (gang, node, ticket) of the bind request currently held for it. One request
    per pod: a newer one (kube-scheduler gave up on the first and retried) supersedes it,
    unless it was already released. What happens to a request is keyed by its ticket, so
    nothing meant for one request is ever taken by another for the same pod."""
    superseded: set[int] = field(default_factory=set)
    """Tickets of held requests a newer request for the same pod replaced; each fails."""
    released: dict[int, str] = field(default_factory=dict)
    """Ticket -> node: the gang reached its minimum; this request binds now, to this node (the
    one the ledger charged), and to no other."""
    failed: dict[int, tuple[str, str]] = field(default_factory=dict)
    """Ticket -> (outcome, reason): the gang timed out, yielded or lost a node, or the pod was
    deleted; this request fails."""
    releasing: dict[GangKey, set[str]] = field(default_factory=dict)
    """Gang -> UIDs of members released to bind whose Binding is not done yet; when the last
    is done the gang's plan is settled (once per gang, not once per member)."""


Count = Callable[[str, str], None]
"""Called with (verb, outcome) once per answered request: the decision counter."""


def _no_count(_verb: str, _outcome: str) -> None:
    return None


@dataclass(frozen=True, slots=True)
class _TurnedAway:
    """A pod filter failed everywhere, and what could change that without kube-scheduler
    seeing a cluster event."""

    pod: PodRef
    untrusted: bool
    """Turned away because the cluster state was not trusted (not synced, watch broken)."""
    unresolved: bool
    """Its workload or an owner between was not observed yet."""
    plans: frozenset[GangKey]
    """The plans holding capacity at the time; one of them ending may make room."""


class GangService:
    def __init__(self, state: StateStore, *, settings: Settings, clock: Clock, binder: Binder,
                 events: EventSink, count: Count = _no_count,
                 requeuer: Requeuer | None = None) -> None:
        self._state = state
        self._count = count
        self._requeuer: Requeuer = requeuer or MemoryRequeuer()
        self._hold_limit = max(1, settings.threads - max(2, settings.threads // 8))
        """Binds held at the barrier at most: the rest of the threads stay free for filters;
        members beyond it are parked (see :meth:`_pass_barrier`)."""
        self._binds = ThreadPoolExecutor(max_workers=4, thread_name_prefix="parked-bind")
        """Binds Muster makes itself, for parked members, off the request threads."""
        self._turned_away: dict[str, _TurnedAway] = {}
        """Pod UID -> why every node failed, until the pod passes, is bound, goes, or is
        requeued."""
        self._settings = settings
        self._clock = clock
        self._binder = binder
        self._events = events
        self._core = CoreSettings(plan_ttl=settings.plan_ttl, bind_timeout=settings.bind_timeout,
                                  scoring=settings.scoring,
                                  workload_limits=settings.workload_limits)
        self._cond = threading.Condition()
        self._ledger = Ledger()
        self._barrier = _Barrier()
        self._tickets = itertools.count(1)
        self._last_reason: dict[GangKey, str] = {}
        self._last_event: dict[str, tuple[str, str]] = {}
        self._refusals_told: dict[str, str] = {}
        """Workload key -> the refusal last written as an event on it (once per change)."""
        self._expired_total = 0
        self._rebuilt = False
        self._swept_revision = -1
        self._next_yield_check = 0.0

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
            pod = pod_from_api(raw)
        except ValueError as err:
            return None, f"cannot read pod {_pod_key(raw)}: {err}"
        self._state.upsert_pod(raw)
        return pod, ""

    def _prepare(self, now: float) -> ClusterSnapshot:
        """Under the lock: the current snapshot, with the ledger rebuilt once and expired."""
        snapshot = self._state.snapshot()
        if not self._rebuilt:
            # After a restart the ledger is empty but pods Muster planned may be half bound;
            # rebuild reservations from what the cluster shows.
            self._ledger.rebuild(snapshot, now=now, ttl=self._settings.plan_ttl)
            self._rebuilt = True
        if snapshot.revision != self._swept_revision:
            self._sweep(snapshot)
        for gang in expired_barriers(ledger=self._ledger, now=now, settings=self._core):
            # A barrier nobody is waiting on any more (its requests gave up): drop it.
            gone = withdraw(gang, ledger=self._ledger)
            self._fail_held(gone.rejected, gone.reason, snapshot, gang)
        for gang in self._ledger.expire(now):
            self._expired_total += 1
            self._note(gang, "plan expired: members did not all arrive before the plan's TTL")
            for pod in snapshot.pods_of_gang(gang):
                if pod.node_name is None:
                    self._event(pod, EventType.WARNING, "GangPlanExpired",
                                f"gang {gang}: plan expired before all members arrived; "
                                "the gang backs off and is planned again")
        return snapshot

    def _sweep(self, snapshot: ClusterSnapshot) -> None:
        """Forget what the cluster no longer has: a deleted workload's plan would otherwise
        hold its GPUs until the plan's TTL, and a deleted pod in flight until its own."""
        self._swept_revision = snapshot.revision
        for gang, _ in self._ledger.reservations():
            if gang not in snapshot.gangs:
                self._ledger.forget_gang(gang)
                self._last_reason.pop(gang, None)
        for uid in [u for u in self._ledger.in_flight() if u not in snapshot.pods]:
            self._ledger.forget_pod(uid)
        for uid, (_, _, ticket) in list(self._barrier.waiting.items()):
            if uid in snapshot.pods:
                continue
            # Fail a deleted pod's held request now: held until its timeout, its failure would
            # reach kube-scheduler later, perhaps once a newer pod of the same name exists,
            # and kube-scheduler writes the failure's PodScheduled=False onto a pod by name.
            self._ledger.forget_pod(uid)
            self._barrier.failed[ticket] = ("pod_gone", f"pod uid {uid} was deleted while its "
                                                        "bind was held; not binding it")
            self._cond.notify_all()
        for gang, reason in barriers_on_lost_nodes(snapshot=snapshot, ledger=self._ledger):
            gone = withdraw(gang, ledger=self._ledger, reason=reason)
            self._fail_held(gone.rejected, gone.reason, snapshot, gang, outcome="node_gone",
                            event="GangNodeLost")
        # Plans filled by bound pods end here; otherwise they would reserve those pods'
        # capacity again once the pods finish or are deleted.
        self._ledger.settle(snapshot)
        for uid in [u for u in self._last_event if u not in snapshot.pods]:
            del self._last_event[uid]
        self._tell_refusals(snapshot)

    def _tell_refusals(self, snapshot: ClusterSnapshot) -> None:
        """A workload Muster cannot schedule (beyond the limits, fields of the wrong type) gets
        one Warning event saying why, on the workload itself: its pods only say they wait."""
        told = self._refusals_told
        for key in [k for k in told if k not in snapshot.refused]:
            del told[key]
        for key, (ref, why) in snapshot.refused.items():
            if told.get(key) == why:
                continue
            told[key] = why
            log.warning("workload=%s outcome=refused reason=%r", key, why[:500])
            self._events.emit(WorkloadEvent(ref.api_version, ref.kind, ref.namespace, ref.name,
                                            ref.uid, EventType.WARNING, "WorkloadRefused",
                                            f"Muster cannot schedule this workload: {why}"))

    def filter(self, args: ExtenderArgs) -> ExtenderFilterResultJSON:
        ready = self._state.readiness()
        if not ready.ready:
            self._count("filter", "not_ready")
            self._turn_away(args.pod, untrusted=True)
            return filter_result(args, error=f"muster: cluster state not trusted ({ready.reason});"
                                             " refusing to place pods until it is resynced")
        pod, problem = self._request_pod(args.pod)
        if pod is None:
            self._count("filter", "bad_pod")
            return filter_result(args, error=problem)
        with self._cond:
            now = self._clock()
            snapshot = self._prepare(now)
            # Names Muster has not seen yet pass through the core harmlessly (it never passes
            # a node it does not know); they are named only when an answer gives reasons.
            candidates = cast(tuple[NodeName, ...], args.node_names)
            decision = decide_filter(pod, candidates, snapshot=snapshot, ledger=self._ledger,
                                     now=now, settings=self._core)
            if decision.gang is not None:
                self._note(decision.gang, decision.reason)
            self._filter_event(pod, decision.gang, bool(decision.passed), decision.reason)
            if decision.passed:
                self._turned_away.pop(pod.uid, None)
            elif decision.outcome is not FilterOutcome.REJECTED:
                # REJECTED: not even an empty cluster holds the gang; only new nodes (a
                # cluster event kube-scheduler sees) can change that.
                self._turned_away[pod.uid] = _TurnedAway(
                    PodRef(pod.namespace, pod.name, pod.uid), untrusted=False,
                    unresolved=pod.uid in snapshot.unresolved,
                    plans=frozenset(g for g, _ in self._ledger.reservations()))
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
        with self._cond:
            now = self._clock()
            snapshot = self._prepare(now)
            known = _node_names(snapshot)
            candidates = cast(tuple[NodeName, ...], tuple(n for n in args.node_names
                                                         if n in known))
            scores = decide_prioritize(pod, candidates, snapshot=snapshot, ledger=self._ledger,
                                       now=now, settings=self._core)
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
        with self._cond:
            snapshot = self._prepare(self._clock())
            victims = {NodeName(n): v for n, v in args.victims.items()}
            chosen = decide_preempt(pod, victims, snapshot=snapshot, ledger=self._ledger,
                                    settings=self._core)
        self._count("preempt", "victims" if chosen else "none")
        return preemption_result({str(n): list(v) for n, v in chosen.items()},
                                 args.pdb_violations)

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
        outcome, error, direct = self._pass_barrier(ref, NodeName(args.node))
        for member, member_node in direct:  # parked members of the gang this bind completed
            self._binds.submit(self._bind_parked, member, member_node)
        if error:
            self._count("bind", outcome)
            return binding_result(error)
        try:
            self._binder.bind(ref, args.node)
        except BindError as err:
            with self._cond:
                self._ledger.forget_pod(ref.uid)
                self._done_releasing(ref.uid)
            self._count("bind", "error")
            log.warning("verb=bind pod=%s node=%s outcome=error reason=%r", ref.key, args.node,
                        str(err))
            return binding_result(f"binding {ref.key} to {args.node} failed: {err}")
        self._state.assume_bound(ref.namespace, ref.name, args.node)
        with self._cond:
            self._ledger.confirm_bound(ref.uid, NodeName(args.node))
            self._done_releasing(ref.uid)
        self._count("bind", outcome)
        log.info("verb=bind pod=%s node=%s outcome=%s", ref.key, args.node, outcome)
        return binding_result()

    def _pass_barrier(self, ref: PodRef, node: NodeName,
                      ) -> tuple[str, str, list[tuple[PodRef, str]]]:
        """Wait until this pod's gang may bind: (outcome, ``""``, parked members to bind) when
        it may, else (outcome, the reason it may not, ``[]``). Outcomes: bound, released
        (held, then the gang's minimum came), parked, rejected, timed_out."""
        barrier = self._barrier
        with self._cond:
            now = self._clock()
            snapshot = self._prepare(now)
            earlier = barrier.waiting.get(ref.uid)
            if earlier is not None:
                if earlier[2] in barrier.released:
                    # The earlier request binds the pod where the ledger charged it; this one
                    # must bind it neither elsewhere nor twice.
                    return "rejected", (f"pod {ref.key} is being bound to "
                                        f"{barrier.released[earlier[2]]} by an earlier "
                                        "request; not binding it again"), []
                # kube-scheduler gave up on the earlier request and retried: this one decides.
                barrier.superseded.add(earlier[2])
                barrier.failed.pop(earlier[2], None)
                self._cond.notify_all()
            decision = decide_bind(ref.uid, node, snapshot=snapshot, ledger=self._ledger, now=now,
                                   settings=self._core)
            gang = decision.gang
            if gang is not None:
                self._note(gang, decision.reason)
            if decision.outcome is BindOutcome.REJECT:
                self._fail_held(decision.rejected, decision.reason, snapshot, gang)
                return "rejected", decision.reason, []
            if decision.outcome is BindOutcome.BIND:
                direct: list[tuple[PodRef, str]] = []
                woken: set[str] = set()
                for uid, member_node in decision.release:
                    if uid == ref.uid:
                        continue
                    held = barrier.waiting.get(uid)
                    if held is not None:
                        barrier.released[held[2]] = str(member_node)
                        woken.add(uid)
                        continue
                    parked = snapshot.pods.get(uid)
                    if parked is not None and parked.node_name is None:
                        direct.append((PodRef(parked.namespace, parked.name, uid),
                                       str(member_node)))
                if gang is not None:
                    barrier.releasing.setdefault(gang, set()).update(
                        {ref.uid, *woken, *(p.uid for p, _ in direct)})
                self._cond.notify_all()
                if len(decision.release) > 1 or gang is not None:
                    self._admitted(snapshot, gang)
                return "bound", "", direct
            # Wait at the barrier in real time, bounded by --bind-timeout. Each held bind takes
            # a server thread; with every thread that may hold one in use (many gangs arriving
            # at once, or one gang larger than the pool), the member is *parked* instead: its
            # bind fails now (kube-scheduler retries it after a backoff), but it stays counted
            # at the barrier with its node in flight, and when its gang completes Muster binds
            # it itself. No thread waits, so gangs of any size and number can gather.
            if gang is not None and len(barrier.waiting) >= self._hold_limit:
                return "parked", (f"{decision.reason}; not held (every server thread that may "
                                  "hold a bind is in use): Muster binds this pod when its gang "
                                  "completes"), []
            ticket = next(self._tickets)
            barrier.waiting[ref.uid] = (gang, str(node), ticket)
            # The barrier's clock restarts with every new member (see Ledger.arrive), but one
            # request may be held only about --bind-timeout (kube-scheduler's httpTimeout is
            # at least 1.5 times it): a little longer if the barrier ends soon after (members
            # that came together time out together), else the member is parked below.
            timeout = self._settings.bind_timeout
            deadline, hold_limit = now + timeout, now + timeout * _HOLD_GRACE
            try:
                while True:
                    released_to = barrier.released.pop(ticket, None)
                    if released_to is not None:
                        return self._released(ref, node, released_to)
                    if ticket in barrier.superseded:
                        return "superseded", (f"a newer bind request for pod {ref.key} "
                                              "replaced this one"), []
                    failed = barrier.failed.pop(ticket, None)
                    if failed is not None:
                        return failed[0], failed[1], []
                    clock = self._clock()
                    if gang is not None and clock >= deadline:
                        started = self._ledger.barrier_started(gang)
                        if started is not None and started + timeout > clock:
                            deadline = started + timeout
                            if deadline > hold_limit:
                                # The gang is still gathering: stop holding, keep counting.
                                return "parked", (
                                    f"gang {gang}: held {timeout:g}s while the gang gathers; "
                                    "not held longer: Muster binds this pod when its gang "
                                    "completes"), []
                    remaining = deadline - clock
                    if remaining <= 0 and gang is not None:
                        timed_out = withdraw(gang, ledger=self._ledger, also=(ref.uid, node))
                        self._fail_held(timed_out.rejected, timed_out.reason, snapshot, gang)
                        return "timed_out", timed_out.reason, []
                    self._cond.wait(timeout=max(remaining, 0.001))
            finally:
                if barrier.waiting.get(ref.uid, (None, "", 0))[2] == ticket:
                    del barrier.waiting[ref.uid]
                barrier.released.pop(ticket, None)
                barrier.failed.pop(ticket, None)
                barrier.superseded.discard(ticket)

    def _released(self, ref: PodRef, node: NodeName, released_to: str,
                  ) -> tuple[str, str, list[tuple[PodRef, str]]]:
        """Under the lock: a member its gang released binds to the node Muster released it to
        (the one the ledger charged), only while that node still exists, and never elsewhere."""
        if released_to != node:
            # Cannot happen while one request per pod is held (the ledger charged the node this
            # request named); if it did, binding here would use room nobody checked.
            self._ledger.forget_pod(ref.uid)
            self._done_releasing(ref.uid)
            return "rejected", (f"pod {ref.key} was released to bind to {released_to}, not "
                                f"{node}; not binding it elsewhere"), []
        if node not in self._state.snapshot().nodes:
            self._ledger.forget_pod(ref.uid)
            self._done_releasing(ref.uid)
            return "node_gone", (f"node {node} was deleted before pod {ref.key} could bind "
                                 "there"), []
        return "released", "", []

    def _bind_parked(self, ref: PodRef, node: str) -> None:
        """Bind a parked member of a gang that just completed (on the bind pool)."""
        try:
            self._binder.bind(ref, node)
        except BindError as err:
            with self._cond:
                self._ledger.forget_pod(ref.uid)
                self._done_releasing(ref.uid)
            self._count("bind", "parked_error")
            log.warning("verb=bind pod=%s node=%s outcome=parked-error reason=%r", ref.key,
                        node, str(err))
            return
        except Exception:  # the pool thread must survive; the pod is retried by the scheduler
            log.exception("verb=bind pod=%s node=%s outcome=parked-error", ref.key, node)
            return
        self._state.assume_bound(ref.namespace, ref.name, node)
        with self._cond:
            self._ledger.confirm_bound(ref.uid, NodeName(node))
            self._done_releasing(ref.uid)
        self._count("bind", "parked_bound")
        log.info("verb=bind pod=%s node=%s outcome=parked-bound", ref.key, node)

    def _done_releasing(self, uid: str) -> None:
        """Under the lock: ``uid``'s Binding is done (or failed); the gang's last one ends its
        plan now, not at the next request, which may come only after these pods are gone."""
        for gang, uids in list(self._barrier.releasing.items()):
            if uid in uids:
                uids.discard(uid)
                if not uids:
                    del self._barrier.releasing[gang]
                    self._ledger.settle(self._state.snapshot())
                return

    def _fail_held(self, rejected: Sequence[tuple[str, NodeName]], reason: str,
                   snapshot: ClusterSnapshot, gang: GangKey | None, *,
                   outcome: str = "timed_out", event: str = "GangBindTimeout") -> None:
        """Wake every held member the core failed, so kube-scheduler requeues them all."""
        if not rejected:
            return
        for uid, _node in rejected:
            held = self._barrier.waiting.get(uid)
            if held is not None:
                self._barrier.failed[held[2]] = (outcome, reason)
        self._cond.notify_all()
        if gang is not None:
            self._note(gang, reason)
            for pod in snapshot.pods_of_gang(gang):
                if pod.node_name is None:
                    self._event(pod, EventType.WARNING, event, reason)
        log.warning("verb=bind gang=%s outcome=withdrawn members=%d reason=%r", gang,
                    len(rejected), reason)

    def _break_deadlocks(self, snapshot: ClusterSnapshot, now: float) -> None:
        """Under the lock: gangs held at the barrier that wait for each other (each holds what
        the next needs) would all time out together and may deadlock again; the core picks
        one per cycle to yield now, so the others complete. Checked at most every
        ``_YIELD_EVERY`` seconds: gangs are rarely stuck, and the check plans every held gang."""
        if now < self._next_yield_check:
            return
        self._next_yield_check = now + _YIELD_EVERY
        for y in decide_yields(snapshot=snapshot, ledger=self._ledger, now=now,
                               settings=self._core):
            gone = withdraw(y.gang, ledger=self._ledger, reason=y.reason)
            self._fail_held(gone.rejected, gone.reason, snapshot, y.gang, outcome="yielded",
                            event="GangYielded")

    def _admitted(self, snapshot: ClusterSnapshot, gang: GangKey | None) -> None:
        if gang is None:
            return
        for pod in snapshot.pods_of_gang(gang):
            if pod.node_name is None:
                self._event(pod, EventType.NORMAL, "GangAdmitted",
                            f"gang {gang}: minimum reached; binding all members")

    # --- events and bookkeeping -----------------------------------------------------------------

    def _note(self, gang: GangKey, reason: str) -> None:
        self._last_reason[gang] = reason

    def _filter_event(self, pod: PodInfo, gang: GangKey | None, passed: bool,
                      reason: str) -> None:
        if gang is None:
            return
        # Most core reasons already name the gang; say it once.
        message = reason if reason.startswith(f"gang {gang}") else f"gang {gang}: {reason}"
        if passed:
            self._event(pod, EventType.NORMAL, "GangPlanned", message)
        else:
            self._event(pod, EventType.WARNING, "GangWaiting", message)

    def _event(self, pod: PodInfo, type_: EventType, reason: str, message: str) -> None:
        # Filter runs on every retry of a pending pod; record a change, not a repetition.
        if self._last_event.get(pod.uid) == (reason, message):
            return
        self._last_event[pod.uid] = (reason, message)
        self._events.emit(PodEvent(PodRef(pod.namespace, pod.name, pod.uid), type_, reason,
                                   message))

    # --- housekeeping: time passes and state changes without requests ------------------------

    def housekeep(self) -> int:
        """Expire what is due, and requeue turned-away pods whose obstacle is gone; returns
        how many were requeued. Run every second or so by the server's housekeeper."""
        ready = self._state.readiness().ready
        with self._cond:
            now = self._clock()
            snapshot = self._prepare(now) if ready else self._state.snapshot()
            if ready:
                self._break_deadlocks(snapshot, now)
            plans = {g for g, _ in self._ledger.reservations()}
            due: dict[str, list[PodRef]] = {}
            for uid, away in list(self._turned_away.items()):
                pod = snapshot.pods.get(uid)
                if away.untrusted:
                    if not ready:
                        continue
                    reason = "the cluster state is trusted again"
                elif pod is None or pod.node_name is not None:
                    del self._turned_away[uid]  # gone or bound: nothing to retry
                    continue
                elif away.unresolved and uid not in snapshot.unresolved:
                    reason = "its workload is observed now"
                elif away.plans - plans:
                    reason = "a gang plan ended and released its capacity"
                else:
                    continue
                del self._turned_away[uid]
                due.setdefault(reason, []).append(away.pod)
        for reason, pods in sorted(due.items()):
            log.info("event=requeue pods=%d reason=%r", len(pods), reason)
            self._requeuer.requeue(pods, reason)
        return sum(len(p) for p in due.values())

    def _turn_away(self, raw: Mapping[str, Any], *, untrusted: bool) -> None:
        meta = _with_identity(raw).get("metadata") or {}
        ref = PodRef(str(meta.get("namespace")), str(meta.get("name")), str(meta.get("uid")))
        with self._cond:
            self._turned_away[ref.uid] = _TurnedAway(ref, untrusted=untrusted, unresolved=False,
                                                     plans=frozenset())

    # --- introspection -----------------------------------------------------------------------

    def inspect_gangs(self) -> list[dict[str, Any]]:
        snapshot = self._state.snapshot()
        with self._lock_or_busy(_INSPECT_WAIT):
            return describe_gangs(snapshot, self._ledger, last_reason=dict(self._last_reason),
                                  waiting={u: w[0] for u, w in self._barrier.waiting.items()})

    def gang_counts(self) -> Mapping[str, int]:
        snapshot = self._state.snapshot()
        with self._lock_or_busy():
            gangs = describe_gangs(snapshot, self._ledger, last_reason=dict(self._last_reason),
                                   waiting={u: w[0] for u, w in self._barrier.waiting.items()})
            counts = {"waiting": 0, "planned": 0, "bound": 0, "expired": self._expired_total}
            for g in gangs:
                counts[g["state"]] = counts.get(g["state"], 0) + 1
            return counts

    def reserved_gpus(self) -> float:
        snapshot = self._state.snapshot()
        with self._lock_or_busy():
            gangs = describe_gangs(snapshot, self._ledger, last_reason={}, waiting={})
        return float(sum(g["reservedGpus"] for g in gangs))

    def binds_waiting(self) -> int:
        with self._lock_or_busy():
            return len(self._barrier.waiting)


_NAMES: dict[int, tuple[ClusterSnapshot, frozenset[str]]] = {}


def _node_names(snapshot: ClusterSnapshot) -> frozenset[str]:
    """The snapshot's node names as a frozenset, built once per snapshot."""
    hit = _NAMES.get(id(snapshot))
    if hit is not None and hit[0] is snapshot:
        return hit[1]
    names = frozenset(snapshot.nodes)
    _NAMES.clear()  # one live snapshot at a time is all the cache is for
    _NAMES[id(snapshot)] = (snapshot, names)
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
