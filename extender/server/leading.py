"""Only the leader decides: the gang service behind the leader election.

With ``--leader-elect`` every replica watches the cluster, but only the one holding the Lease
answers kube-scheduler with decisions. The others are standbys: ``/readyz`` says 503 (so a
Service routes to the leader only) and, should a call reach one anyway (endpoints lag a
transition by a few seconds), every verb gets a well-formed HTTP 200 answer that decides
nothing: filter fails every node as unresolvable (so kube-scheduler does not try preemption
on Muster's behalf either), bind fails, preempt names no victim, prioritize scores nothing.

A replica becoming leader first waits for its informers to be synced, then starts a new term
(:meth:`GangService.take_over`): the plans of any earlier term are dropped and the ledger is
rebuilt from the cluster, and the pods it refused as standby are requeued. Only then does
``/readyz`` turn 200. A leader that loses the Lease (its renewals failed past the renew
deadline, or another replica holds it) stops deciding at once: held binds fail, and a bind
that passed the barrier is not posted (:class:`GangService` asks :meth:`LeaderGate.deciding`
just before posting).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from extender.server.metrics import Metrics
from extender.server.service import GangService
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
)
from extender.state.election import Leadership
from extender.state.ports import PodRef

log = logging.getLogger("muster.leading")

STANDBY_REASON = "muster: standby, not leader"
_REFUSED_LIMIT = 10_000
"""Pods refused while standby, remembered to be requeued on takeover (oldest dropped)."""
_SYNC_POLL = 0.2
"""Seconds between looks at the informers' sync while a new leader waits to rebuild."""


class Role(StrEnum):
    STANDBY = "standby"
    REBUILDING = "rebuilding"
    """Holds the Lease, but its informers are not synced or its ledger not rebuilt yet."""
    LEADING = "leading"


class LeaderGate:
    """A :class:`~extender.server.decider.Decider` that lets the service decide only while
    this replica leads; see the module docstring."""

    def __init__(self, service: GangService, leadership: Leadership, *,
                 metrics: Metrics | None = None) -> None:
        self._service = service
        self._leadership = leadership
        self._metrics = metrics
        self._lock = threading.Lock()
        self._role = Role.STANDBY
        self._term = 0
        self._refused: dict[str, PodRef] = {}
        self._stop = threading.Event()
        if metrics is not None:
            metrics.leader.set_function(lambda: 1.0 if self.deciding() else 0.0)
        leadership.subscribe(self._changed)

    # --- leadership -----------------------------------------------------------------------

    @property
    def role(self) -> Role:
        return self._role

    def deciding(self) -> bool:
        """True only while leading, rebuilt, and inside the lease's renewal deadline."""
        return self._role is Role.LEADING and self._leadership.leading()

    def _changed(self, leading: bool) -> None:
        with self._lock:
            self._term += 1
            term = self._term
            self._role = Role.REBUILDING if leading else Role.STANDBY
        if self._metrics is not None:
            self._metrics.leader_transitions.labels(
                to="leader" if leading else "standby").inc()
        if leading:
            threading.Thread(target=self._take_over, args=(term,), name="takeover",
                             daemon=True).start()
            return
        held = self._service.step_down()
        log.warning("event=stepped-down identity=%s role=standby held_binds_failed=%d",
                    self._leadership.identity, held)

    def _take_over(self, term: int) -> None:
        """Wait for synced informers, then rebuild and start deciding (unless the term ended
        meanwhile)."""
        while not self._stop.is_set():
            if self._term != term or not self._leadership.leading():
                return
            if self._service.readiness()[0]:
                break
            self._stop.wait(_SYNC_POLL)
        with self._lock:
            refused = list(self._refused.values())
            self._refused.clear()
        requeued = self._service.take_over(refused)
        with self._lock:
            if self._term != term:
                return
            self._role = Role.LEADING
        log.info("event=took-over identity=%s role=leading requeued=%d", self._leadership.identity,
                 requeued)

    def close(self) -> None:
        self._stop.set()

    # --- the Decider protocol -------------------------------------------------------------

    def readiness(self) -> tuple[bool, str]:
        role = self._role
        if role is Role.STANDBY:
            holder = self._leadership.holder()
            return False, (f"standby, not leader (the lease is held by {holder})" if holder
                           else "standby, not leader (no leader seen yet)")
        if role is Role.REBUILDING:
            return False, "leader, rebuilding its state from the cluster"
        if not self._leadership.leading():
            return False, "leader whose lease was not renewed in time: not deciding"
        return self._service.readiness()

    def liveness(self, timeout: float) -> tuple[bool, str]:
        return self._service.liveness(timeout)

    def filter(self, args: ExtenderArgs) -> ExtenderFilterResultJSON:
        if self.deciding():
            return self._service.filter(args)
        self._remember(args.pod)
        self._count("filter")
        reason = self._why()
        return filter_result(args, (), unresolvable=dict.fromkeys(args.node_names, reason))

    def prioritize(self, args: ExtenderArgs) -> list[HostPriorityJSON]:
        if self.deciding():
            return self._service.prioritize(args)
        self._count("prioritize")
        return []

    def bind(self, args: BindingArgs) -> ExtenderBindingResultJSON:
        if self.deciding():
            return self._service.bind(args)
        self._count("bind")
        return binding_result(f"{self._why()}; not binding {args.pod_namespace}/"
                              f"{args.pod_name}")

    def preempt(self, args: PreemptionArgs) -> ExtenderPreemptionResultJSON:
        if self.deciding():
            return self._service.preempt(args)
        self._count("preempt")
        return preemption_result({})

    def housekeep(self) -> int:
        return self._service.housekeep() if self.deciding() else 0

    def inspect_gangs(self) -> list[dict[str, Any]]:
        return self._service.inspect_gangs() if self.deciding() else []

    def gang_counts(self) -> Mapping[str, int]:
        return self._service.gang_counts() if self.deciding() else {}

    def reserved_gpus(self) -> float:
        return self._service.reserved_gpus() if self.deciding() else 0.0

    def binds_waiting(self) -> int:
        return self._service.binds_waiting() if self.deciding() else 0

    # --- helpers --------------------------------------------------------------------------

    def _why(self) -> str:
        holder = self._leadership.holder()
        if self._role is Role.REBUILDING:
            return "muster: leader still rebuilding its state, not deciding yet"
        return f"{STANDBY_REASON} (leader: {holder})" if holder else STANDBY_REASON

    def _count(self, verb: str) -> None:
        if self._metrics is not None:
            self._metrics.count(verb, "standby")

    def _remember(self, raw: Mapping[str, Any]) -> None:
        meta = raw.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if not uid:
            return
        with self._lock:
            self._refused.pop(uid, None)
            self._refused[uid] = PodRef(str(meta.get("namespace") or "default"),
                                        str(meta.get("name")), uid)
            while len(self._refused) > _REFUSED_LIMIT:
                del self._refused[next(iter(self._refused))]
