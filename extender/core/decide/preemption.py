"""One preemption plan for a whole gang: which whole gangs and lone pods to evict so it fits.

kube-scheduler preempts for one pod at a time, so left alone it evicts victims for a gang's
first members and may still not fit the rest. Instead, the first preempt call of a gang that
does not fit plans for the whole gang here, and every call then evicts only this plan's
victims (:func:`extender.core.decide.decisions.decide_preempt`).

A *victim* is a unit that is evicted whole: every bound pod of a gang, or one pod outside any
gang. A unit may be a victim only if its priority (its highest pod's, or its gang's) is
below the preemptor's (its pods' own, as admission resolved their PriorityClass), it is
not the preemptor's own gang, and none of its gang's pods is in
flight (a gang being admitted is left alone: evicting its bound pods would leave it partial).
A preemptor whose pods say ``preemptionPolicy: Never`` gets no plan at all: in Kubernetes
that policy stops a pod from preempting others (it may still be preempted itself).

The search is bounded and greedy, not optimal: candidates are ordered by PodDisruptionBudget
risk (a unit with a pod on a node kube-scheduler reported PDB violations for comes later; the
snapshot carries no PDBs, so this is the only PDB knowledge there is), then priority, then
size (GPU milli, then pods), then key. If removing every candidate does not let the gang fit,
there is no plan. Otherwise the shortest prefix that fits is found by bisection, and then
each chosen unit, highest priority first, is dropped again if the gang still fits without it.
That is 2 + log2(candidates) + min(chosen, ``MAX_DROPS``) placement searches, each bounded by
the search budget. Every plan returned was checked with :func:`plan_gang` on exactly the
capacity its victims give back.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from extender.core.decide.settings import CoreSettings
from extender.core.gang.capacity import (
    CapacityView,
    NodeCapacity,
    demand_of,
    gang_priority,
    index_of,
    node_capacity,
)
from extender.core.gang.ledger import (
    Ledger,
    free_capacity,
    occupants,
    per_node,
    per_role,
    placed_counts,
    placed_in_of,
)
from extender.core.gang.placement import Infeasible, Plan, placed_domain, plan_gang
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, GangKey, NodeName

MAX_DROPS = 64
"""At most this many chosen victims are tried for dropping again (one search each)."""


@dataclass(frozen=True, slots=True)
class Victim:
    """A unit evicted whole: a gang's bound pods, or one pod outside any gang."""

    key: str
    """The gang key, or ``pod:<namespace>/<name>`` for a pod outside any gang."""
    gang: GangKey | None
    priority: int
    pods: tuple[tuple[str, NodeName], ...]
    """``(uid, node)`` of each of its pods holding resources, sorted."""
    pdb_risk: bool = False
    """One of its pods is on a node kube-scheduler reported PDB violations for."""


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    """The victims whose eviction lets ``gang`` fit whole, and where it then goes."""

    gang: GangKey
    preemptor_priority: int
    victims: tuple[Victim, ...]
    placement: Plan
    deadline: float
    """After this, the plan is computed again (the cluster has moved on)."""

    def pods_on(self, node: NodeName) -> tuple[str, ...]:
        """The UIDs of the plan's victims on ``node``, sorted."""
        return tuple(sorted(uid for v in self.victims for uid, n in v.pods if n == node))

    def pods(self) -> frozenset[str]:
        return frozenset(uid for v in self.victims for uid, _ in v.pods)


def preemptor(gang: Gang, snapshot: ClusterSnapshot, *, gpu: str) -> tuple[int, bool]:
    """The priority ``gang`` preempts with, and whether it may preempt at all.

    Its pods' own values when it has pods: admission resolves a ``priorityClassName`` into
    ``spec.priority`` and ``spec.preemptionPolicy``, which an operator's pod template (read for
    the gang before its pods exist) names only by class. Otherwise its templates'."""
    pods = [snapshot.pods[u] for u in index_of(snapshot, gpu=gpu).gang_pods.get(gang.key, ())
            if u in snapshot.pods]
    priority = gang_priority(gang, snapshot, gpu=gpu)
    preempts = all(m.shape.preempts for m in gang.members) and all(
        p.shape.preempts for p in pods)
    return priority, preempts


_LOWEST = "lowest priority placed"


def may_preempt(gang: Gang, snapshot: ClusterSnapshot, *, gpu: str) -> bool:
    """Whether :func:`candidates` could find any unit for ``gang`` to evict: it may preempt,
    and some placed pod has a lower priority than it (a unit's priority is never below its
    pods'). ``False`` is certain; ``True`` only means "look"."""
    priority, preempts = preemptor(gang, snapshot, gpu=gpu)
    if not preempts:
        return False
    lowest = snapshot.derived.get(_LOWEST)
    if not isinstance(lowest, int | float):
        index = index_of(snapshot, gpu=gpu)
        lowest = min((snapshot.pods[u].shape.priority for uids in index.pods_on.values()
                      for u in uids), default=float("inf"))
        snapshot.derived[_LOWEST] = lowest
    return lowest < priority


def candidates(gang: Gang, snapshot: ClusterSnapshot, ledger: Ledger, *, gpu: str,
               pdb_nodes: Collection[NodeName] = ()) -> list[Victim]:
    """Every unit the gang may evict, in the order the greedy tries them."""
    index = index_of(snapshot, gpu=gpu)
    above, _ = preemptor(gang, snapshot, gpu=gpu)
    flying = ledger.in_flight()
    units: dict[str, list[tuple[str, NodeName]]] = {}
    prio: dict[str, int] = {}
    gangs: dict[str, GangKey | None] = {}
    barred: set[str] = set()
    # Units with a pod or a gang of the preemptor's priority or more are never victims:
    # found before any other work, so a cluster of one priority (no victim anywhere) costs a
    # pass over its pods and nothing more. Each gang's priority is worked out once.
    too_high: set[str] = set()
    ranks: dict[GangKey, int] = {}
    for node, uids in index.pods_on.items():
        for uid in uids:
            pod = snapshot.pods[uid]
            owner = snapshot.gang_of(uid)
            key = owner.key if owner is not None else f"pod:{pod.key}"
            if key in too_high:
                continue
            base = pod.shape.priority
            if owner is not None and base < above:
                rank = ranks.get(owner.key)
                if rank is None:
                    rank = ranks[owner.key] = gang_priority(owner, snapshot, gpu=gpu)
                base = max(base, rank)
            if base >= above:
                too_high.add(key)
                continue
            units.setdefault(key, []).append((uid, node))
            gangs[key] = owner.key if owner is not None else None
            prio[key] = max(prio.get(key, base), base)
            if owner is not None and owner.key == gang.key:
                barred.add(key)
    for key, member_of in gangs.items():
        if member_of is not None and any(u in flying
                                         for u in index.gang_pods.get(member_of, ())):
            barred.add(key)  # being admitted: evicting its bound pods leaves it partial
    pdb = set(pdb_nodes)
    out = [Victim(key, gangs[key], prio[key], tuple(sorted(pods)),
                  any(n in pdb for _, n in pods))
           for key, pods in units.items() if key not in barred and key not in too_high]

    def size(v: Victim) -> tuple[int, int]:
        milli = sum(demand_of(snapshot.pods[u].shape, gpu=gpu).gpu_milli for u, _ in v.pods)
        return (milli, len(v.pods))

    out.sort(key=lambda v: (v.pdb_risk, v.priority, size(v), v.key))
    return out


def give_back(snapshot: ClusterSnapshot, free: Mapping[NodeName, NodeCapacity],
              victims: Sequence[Victim], *, gpu: str) -> CapacityView:
    """``free`` with the victims' pods gone: each changed node gains what its capacity
    without them has over its capacity with them (scalars, pod slots and each device)."""
    index = index_of(snapshot, gpu=gpu)
    gone: dict[NodeName, set[str]] = {}
    for v in victims:
        for uid, node in v.pods:
            gone.setdefault(node, set()).add(uid)
    changes: dict[NodeName, NodeCapacity] = {}
    for node, uids in gone.items():
        before = index.base[node]
        after = node_capacity(snapshot.nodes[node],
                              (snapshot.pods[u] for u in index.pods_on.get(node, ())
                               if u not in uids), gpu=gpu)
        now = free[node]
        pods = None if now.pods is None or after.pods is None or before.pods is None \
            else now.pods + after.pods - before.pods
        changes[node] = NodeCapacity(
            free=now.free + (after.free - before.free),
            devices=tuple(f + a - b for f, a, b in zip(now.devices, after.devices,
                                                       before.devices, strict=True)),
            pods=pods, unpacked=now.unpacked)
    return CapacityView(free, changes)


def plan_preemption(gang: Gang, *, snapshot: ClusterSnapshot, ledger: Ledger,
                    settings: CoreSettings, now: float,
                    pdb_nodes: Collection[NodeName] = ()) -> PreemptionPlan | None:
    """The victims that let ``gang`` fit whole, or ``None`` when evicting every unit it may
    evict would not (or its pods may not preempt). See the module docstring."""
    gpu = settings.gpu_resource
    priority, preempts = preemptor(gang, snapshot, gpu=gpu)
    if not preempts:
        return None
    free = free_capacity(snapshot, ledger, gpu=gpu, exclude=gang.key)
    placed = per_role(placed_counts(gang.key, snapshot, ledger, gpu=gpu))
    at = ledger.placed(gang.key, snapshot, gpu=gpu)
    inside = placed_in_of(gang, snapshot, ledger, gpu=gpu)
    within = placed_domain(gang, snapshot, per_node(at))
    units = candidates(gang, snapshot, ledger, gpu=gpu, pdb_nodes=pdb_nodes)
    occupied = occupants(snapshot, ledger, gpu=gpu)

    def attempt(victims: Sequence[Victim]) -> Plan | None:
        keys = {v.gang for v in victims if v.gang is not None}
        occ = {n: [g for g in gs if g.key not in keys] for n, gs in occupied.items()}
        result = plan_gang(gang, snapshot=snapshot, capacity=give_back(snapshot, free, victims,
                                                                      gpu=gpu),
                           placed=placed, policy=settings.policy, gpu=gpu,
                           budget=settings.search_budget, within=within, occupied=occ,
                           placed_at=at, placed_in=inside)
        return None if isinstance(result, Infeasible) else result

    if not units or attempt(units) is None:
        return None
    lo, hi = 0, len(units)  # a prefix of hi units fits; of lo, none is known to
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if attempt(units[:mid]) is not None:
            hi = mid
        else:
            lo = mid
    chosen = list(units[:hi])
    for victim in sorted(chosen, key=lambda v: (-v.priority, v.key))[:MAX_DROPS]:
        rest = [v for v in chosen if v is not victim]
        if rest and attempt(rest) is not None:
            chosen = rest
    placement = attempt(chosen)
    assert placement is not None  # the last set kept was one that fits
    return PreemptionPlan(gang.key, priority, tuple(chosen), placement,
                          now + settings.plan_ttl)


def plan_victims(plan: PreemptionPlan, offered: Mapping[NodeName, Sequence[str]],
                 snapshot: ClusterSnapshot) -> dict[NodeName, tuple[str, ...]]:
    """Per offered node, every pod of the plan's victims there that still runs.

    kube-scheduler evicts the victims of the one node it picks, and an extender may only name
    pods on that node; a victim gang spanning nodes is evicted over the preemptor's next
    members' calls, which get the same plan. To leave no victim gang partial for longer
    than needed, nodes holding the rest of a victim already partly evicted are answered
    alone when offered."""
    out: dict[NodeName, tuple[str, ...]] = {}
    for node in sorted(offered):
        running = tuple(u for u in plan.pods_on(node) if u in snapshot.pods
                        and not snapshot.pods[u].deleting and snapshot.pods[u].holds_resources)
        if running:
            out[node] = running
    started = {v.key for v in plan.victims
               if any(u not in snapshot.pods or snapshot.pods[u].deleting or
                      not snapshot.pods[u].holds_resources for u, _ in v.pods)}
    if started:
        unfinished = {n for v in plan.victims if v.key in started for _, n in v.pods}
        first = {n: uids for n, uids in out.items() if n in unfinished}
        if first:
            return first
    return out
