"""Muster as kube-scheduler's extender in the replay: the core's decisions, asked economically.

kube-scheduler sends its extender every node its own filters passed, and a day on 10,000
nodes asks that about 100,000 times; handing the core 10,000 names per pod made the replay
grow with nodes x pods. The answers depend on far fewer nodes, so the model asks questions
whose answers are provably the ones the full questions get:

- **Narrowed candidates.** A gang member's filter passes exactly kube-scheduler's feasible
  nodes that are open in its gang's plan for its role. The model offers the core only the
  feasible nodes among the plan's nodes for that role: the same intersection. A member whose
  gang has no live plan is first offered no node (the core plans the gang and reserves it, or
  says it waits), then the feasible nodes among the new plan's. Only answers that may pass
  nodes outside a plan (a surplus member) are asked again with every feasible node; pods
  outside gangs are always asked with every feasible node.
- **A necessary condition.** Before the core plans a gang, the model checks, per pod shape
  the gang's minimum still needs, that the nodes could hold that many pods of it even one
  shape alone (the sum over nodes of how many fit on each, from capacity classes), and that
  enough whole GPUs are free. If not, no plan exists and the core would answer "waiting" after
  a bounded search and a check against an empty cluster; the model answers that itself. Both
  answers fail the pod, so nothing downstream can tell them apart.

``exhaustive=True`` turns both off and asks every question as the extender would be asked; the
tests replay days both ways and require identical results.

Members of one gang and role asking at the same instant, in the same state, get the same
"waiting" answer; it is kept for the rest of that instant.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from extender.core.capacity import CapacityView, Demand, classes_of, count_fitting, demand_of
from extender.core.decisions import (
    BindDecision,
    CoreSettings,
    FilterDecision,
    FilterOutcome,
    decide_bind,
    decide_filter,
    decide_prioritize,
    expired_barriers,
    withdraw,
)
from extender.core.ledger import Ledger, free_capacity, per_role, placed_counts
from extender.core.model import Gang, GangKey, NodeName, PodInfo
from extender.core.placement import gang_demands
from extender.core.snapshot import ClusterSnapshot
from simulator.cluster import ClusterModel

_FINAL = (FilterOutcome.WAITING, FilterOutcome.REJECTED)
_MEMO_LIMIT = 4096


class Feasible(Protocol):
    """The nodes kube-scheduler's own filters passed for one pod."""

    def all(self) -> list[NodeName]:
        """Every one of them (what kube-scheduler sends the extender)."""

    def among(self, names: Sequence[NodeName]) -> list[NodeName]:
        """Those of them among ``names``, in the order of ``names``."""


class MusterExtender:
    """Filter, prioritize, bind and the barrier timeout, through :mod:`extender.core`."""

    def __init__(self, cluster: ClusterModel, settings: CoreSettings, *,
                 exhaustive: bool = False) -> None:
        self.cluster = cluster
        self.settings = settings
        self.exhaustive = exhaustive
        self.ledger = Ledger()
        self.core_calls = 0
        self.answered_by_bound = 0
        """Filters answered "waiting" by the necessary condition, without the core."""
        self._memo: dict[tuple[object, ...], FilterDecision] = {}

    # filter ----------------------------------------------------------------------------------
    def filter(self, pod: PodInfo, feasible: Feasible, now: float) -> tuple[NodeName, ...]:
        """The nodes Muster's filter passes for ``pod`` among ``feasible``."""
        snapshot = self.cluster.snapshot()
        member = snapshot.memberships.get(pod.uid)
        gang = snapshot.gang_of(pod.uid)
        if member is None or gang is None or gang.member(member.role) is None:
            return self._ask(pod, feasible.all(), snapshot, now).passed
        if not self.exhaustive:
            # The core's filter expires plans first; the plan read below must be current.
            self.ledger.expire(now)
        key = (gang.key, member.role, snapshot.revision, self.ledger.version, now)
        memo = self._memo.get(key)
        if memo is not None:
            return memo.passed
        decision: FilterDecision | None
        if self.exhaustive:
            decision = self._ask(pod, feasible.all(), snapshot, now)
        else:
            decision = self._narrowed(pod, gang, member.role, feasible, snapshot=snapshot,
                                      now=now)
        if decision is None:
            self.answered_by_bound += 1
            return ()
        if decision.outcome in _FINAL:
            if len(self._memo) > _MEMO_LIMIT:
                self._memo.clear()
            self._memo[key] = decision
        return decision.passed

    def _narrowed(self, pod: PodInfo, gang: Gang, role: str, feasible: Feasible, *,
                  snapshot: ClusterSnapshot, now: float) -> FilterDecision | None:
        plan = self.ledger.plan_for(gang.key)
        if plan is None and self._cannot_fit(gang, pod, snapshot):
            return None
        offered = plan.nodes_for(role) if plan is not None else ()
        decision = self._ask(pod, feasible.among(offered), snapshot, now)
        if decision.outcome is FilterOutcome.PLANNED and decision.plan is not None:
            wanted = decision.plan.nodes_for(role)
            if not set(wanted) <= set(offered):
                # The plan is reserved now: the same member is pinned to it.
                decision = self._ask(pod, feasible.among(wanted), snapshot, now)
        elif decision.outcome is FilterOutcome.SURPLUS:
            decision = self._ask(pod, feasible.all(), snapshot, now)
        return decision

    def _ask(self, pod: PodInfo, candidates: list[NodeName], snapshot: ClusterSnapshot,
             now: float) -> FilterDecision:
        self.core_calls += 1
        return decide_filter(pod, candidates, snapshot=snapshot, ledger=self.ledger, now=now,
                             settings=self.settings)

    def _cannot_fit(self, gang: Gang, pod: PodInfo, snapshot: ClusterSnapshot) -> bool:
        """True only if no plan for the rest of the gang's minimum can exist now."""
        gpu = self.settings.gpu_resource
        by_role = per_role(placed_counts(gang.key, snapshot, self.ledger, gpu=gpu,
                                         exclude=pod.uid))
        need: dict[Demand, int] = {}
        for rd in gang_demands(gang, by_role):
            if rd.need:
                demand = demand_of(rd.shape, gpu=gpu)
                need[demand] = need.get(demand, 0) + rd.need
        if not need:
            return False
        capacity = free_capacity(snapshot, self.ledger, gpu=gpu, exclude=gang.key)
        whole = sum(d.whole * n for d, n in need.items())
        if whole and _whole_free(capacity) < whole:
            return True
        return any(_room(capacity, demand) < n for demand, n in need.items())

    # prioritize, bind, barrier ---------------------------------------------------------------
    def prioritize(self, pod: PodInfo, passed: Sequence[NodeName],
                   now: float) -> dict[NodeName, int]:
        self.core_calls += 1
        return dict(decide_prioritize(pod, passed, snapshot=self.cluster.snapshot(),
                                      ledger=self.ledger, now=now, settings=self.settings))

    def bind(self, uid: str, node: NodeName, now: float) -> BindDecision:
        self.core_calls += 1
        return decide_bind(uid, node, snapshot=self.cluster.snapshot(), ledger=self.ledger,
                           now=now, settings=self.settings)

    def settle(self, gang: GangKey) -> None:
        """End the gang's plan once its bound pods fill it, as the extender does right after
        a bind (:meth:`Ledger.settle`, for this gang alone: a bind fills no other gang's
        plan, and asking every admitted gang would cost a pass over the running ones)."""
        reservation = self.ledger.reservation(gang)
        if reservation is None:
            return
        placed = placed_counts(gang, self.cluster.snapshot(), self.ledger,
                               gpu=self.settings.gpu_resource)
        if all(placed.get((node, role), 0) >= n for node, role, n in reservation.plan.slots):
            self.ledger.release(gang)

    def expired(self, now: float) -> list[BindDecision]:
        """Withdraw every gang whose barrier has timed out."""
        out = []
        for gang in expired_barriers(ledger=self.ledger, now=now, settings=self.settings):
            self.core_calls += 1
            out.append(withdraw(gang, ledger=self.ledger))
        return out

    def barrier_started(self, gang: GangKey) -> float | None:
        return self.ledger.barrier_started(gang)


def _room(capacity: CapacityView, demand: Demand) -> int:
    """Pods of ``demand`` the nodes could hold, each node counted alone (an upper bound)."""
    room = sum(count_fitting(cap, demand) * len(names)
               for cap, names in classes_of(capacity.base).items())
    for name, cap in capacity.changes.items():
        room += count_fitting(cap, demand) - count_fitting(capacity.base[name], demand)
    return room


def _whole_free(capacity: CapacityView) -> int:
    total = sum(cap.whole_free * len(names) for cap, names in classes_of(capacity.base).items())
    for name, cap in capacity.changes.items():
        total += cap.whole_free - capacity.base[name].whole_free
    return total
