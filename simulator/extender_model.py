"""Muster as kube-scheduler's extender in the gang replay: the same session, asked economically.

The replay drives the very :class:`~extender.core.decide.session.GangSession` the server drives
(filter, prioritize, bind and poll at the barrier, tick), on its virtual clock; this module is
only its adapter, as ``extender/server/service.py`` is the server's. What the adapter adds is
economy, never a decision of its own:

- **Offered, not listed, nodes.** kube-scheduler sends its extender every node its filters
  passed, and a day on 10,000 nodes asks that about 100,000 times. The model offers the
  session kube-scheduler's feasible nodes lazily (:class:`~extender.core.decide.session.Offer`): a
  member of a planned gang is asked only about the feasible nodes among its plan's open
  slots, the only nodes its answer can pass.
- **A necessary condition.** Before the session plans a gang, the model checks, per pod shape
  the gang's minimum still needs, that the nodes could hold that many pods of it even one
  shape alone (the sum over nodes of how many fit on each, from capacity classes), and that
  enough whole GPUs are free. If not, no plan exists and the session would answer "waiting"
  after a bounded search; the model answers that itself (the pod fails either way; the replay
  writes no event for it).
- Members of one gang and role asking at the same instant, in the same state, get the same
  "waiting" answer; it is kept for the rest of that instant.

``exhaustive=True`` turns the last two off and offers every node, as a real cluster would; the
tests replay days both ways and require identical results.
"""

from __future__ import annotations

from collections.abc import Sequence

from extender.core.decide.decisions import CoreSettings, FilterDecision, FilterOutcome
from extender.core.decide.effects import BindStep, Effect
from extender.core.decide.session import Entry, GangSession, Offer
from extender.core.gang.bounds import cannot_fit
from extender.core.gang.ledger import Ledger, free_capacity
from extender.core.model.notices import PodRef
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, NodeName, PodInfo
from simulator.cluster import ClusterModel

_FINAL = (FilterOutcome.WAITING, FilterOutcome.REJECTED)
_MEMO_LIMIT = 4096


class MusterExtender:
    """The replay's adapter to a :class:`GangSession`: filter, prioritize, bind, poll, tick."""

    def __init__(self, cluster: ClusterModel, settings: CoreSettings, *,
                 exhaustive: bool = False, journal: list[Entry] | None = None) -> None:
        self.cluster = cluster
        self.settings = settings
        self.exhaustive = exhaustive
        self.journal = journal
        self.session = GangSession(settings, journal=journal)
        self.core_calls = 0
        self.answered_by_bound = 0
        """Filters answered "waiting" by the necessary condition, without the session."""
        self._memo: dict[tuple[object, ...], FilterDecision] = {}

    @property
    def ledger(self) -> Ledger:
        return self.session.ledger

    def restart(self) -> None:
        """Muster restarts: a new session, which rebuilds its ledger from the cluster."""
        self.session = GangSession(self.settings, journal=self.journal)
        self._memo.clear()

    # filter ----------------------------------------------------------------------------------
    def filter(self, pod: PodInfo, feasible: Offer,
               now: float) -> tuple[tuple[NodeName, ...], tuple[Effect, ...]]:
        """The nodes Muster's filter passes for ``pod`` among ``feasible``, and the effects."""
        snapshot = self.cluster.snapshot()
        if self.exhaustive:
            return self._ask(pod, feasible.all(), snapshot, now)
        member = snapshot.memberships.get(pod.uid)
        gang = snapshot.gang_of(pod.uid)
        if member is None or gang is None or gang.member(member.role) is None:
            return self._ask(pod, feasible, snapshot, now)
        # The session expires plans first; the plan and version read below must be current.
        effects = self.session.refresh(snapshot, now)
        key = (gang.key, member.role, snapshot.revision, self.ledger.version, now)
        memo = self._memo.get(key)
        if memo is not None:
            return memo.passed, effects
        if self.ledger.plan_for(gang.key) is None and self._cannot_fit(gang, pod, snapshot):
            self.answered_by_bound += 1
            return (), effects
        self.core_calls += 1
        step = self.session.filter(pod, feasible, snapshot=snapshot, now=now)
        if step.decision.outcome in _FINAL:
            if len(self._memo) > _MEMO_LIMIT:
                self._memo.clear()
            self._memo[key] = step.decision
        return step.decision.passed, effects + step.effects

    def _ask(self, pod: PodInfo, candidates: Sequence[NodeName] | Offer,
             snapshot: ClusterSnapshot, now: float,
             ) -> tuple[tuple[NodeName, ...], tuple[Effect, ...]]:
        self.core_calls += 1
        step = self.session.filter(pod, candidates, snapshot=snapshot, now=now)
        return step.decision.passed, step.effects

    def _cannot_fit(self, gang: Gang, pod: PodInfo, snapshot: ClusterSnapshot) -> bool:
        """True only if no plan for the rest of the gang's minimum can exist now."""
        gpu = self.settings.gpu_resource
        capacity = free_capacity(snapshot, self.ledger, gpu=gpu, exclude=gang.key)
        return cannot_fit(gang, snapshot, self.ledger, capacity, gpu=gpu, exclude=pod.uid)

    # prioritize, bind, the barrier, time ---------------------------------------------------
    def prioritize(self, pod: PodInfo, passed: Sequence[NodeName],
                   now: float) -> dict[NodeName, int]:
        self.core_calls += 1
        return dict(self.session.prioritize(pod, passed, snapshot=self.cluster.snapshot(),
                                            now=now))

    def bind(self, pod: PodInfo, node: NodeName, now: float) -> BindStep:
        self.core_calls += 1
        return self.session.bind(PodRef(pod.namespace, pod.name, pod.uid), node,
                                 snapshot=self.cluster.snapshot(), now=now)

    def poll(self, ticket: int, now: float) -> BindStep:
        return self.session.poll(ticket, snapshot=self.cluster.snapshot(), now=now)

    def bound(self, uid: str, node: NodeName) -> None:
        self.session.bound(uid, node, current=self.cluster.snapshot)

    def bind_failed(self, uid: str) -> None:
        self.session.bind_failed(uid, current=self.cluster.snapshot)

    def tick(self, now: float) -> tuple[Effect, ...]:
        return self.session.tick(self.cluster.snapshot(), now=now)

    def next_due(self) -> float | None:
        return self.session.next_due()

    def ungate(self, now: float) -> tuple[Effect, ...]:
        """One ungating look (:meth:`GangSession.ungate`), as the server's housekeeper takes
        one after changes; it decides only when something could have changed."""
        return self.session.ungate(self.cluster.snapshot(), now=now)

    def gates_due(self) -> float:
        """When an ungating look may decide something although nothing changed (an ungating
        asked for again, the bound on a pod whose gang is unresolved); ``inf``: never."""
        return self.session.gates.due
