"""The ledger's free-capacity view: what the cluster's nodes have free once the ledger's
promises are charged (pods in flight, other gangs' unfilled plans and preemption holds), and
where each gang's pods are bound or in flight.

Pure, like the ledger it reads (:class:`~extender.core.gang.ledger.Ledger`): it writes nothing
there but the ledger's memos, reads no clock and does no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from extender.core.gang.capacity import (
    CapacityView,
    Demand,
    NodeCapacity,
    demand_of,
    index_of,
    take,
)
from extender.core.model.resources import GPU
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, GangKey, NodeName

if TYPE_CHECKING:
    from extender.core.gang.ledger import Ledger
    from extender.core.gang.plans import Plan


def _placed(
    gang: GangKey, snapshot: ClusterSnapshot, ledger: Ledger, *, gpu: str,
    exclude: str | None,
) -> Iterator[tuple[str, NodeName]]:
    """``(uid, node)`` of the gang's pods bound or in flight (``exclude`` left out)."""
    inflight = ledger.in_flight()
    for uid in index_of(snapshot, gpu=gpu).gang_pods.get(gang, ()):
        if uid == exclude:
            continue
        pod = snapshot.pods[uid]
        node: NodeName | None
        if pod.node_name is not None:
            node = pod.node_name if pod.holds_resources else None
        else:
            flight = inflight.get(uid)
            node = None if flight is None else flight.node
        if node is not None:
            yield uid, node


def placed_counts(
    gang: GangKey, snapshot: ClusterSnapshot, ledger: Ledger, *, gpu: str = GPU,
    exclude: str | None = None,
) -> dict[tuple[NodeName, str], int]:
    """The gang's pods bound or in flight, per ``(node, role)`` (``exclude`` left out)."""
    counts: dict[tuple[NodeName, str], int] = {}
    for uid, node in _placed(gang, snapshot, ledger, gpu=gpu, exclude=exclude):
        key = (node, snapshot.memberships[uid].role)
        counts[key] = counts.get(key, 0) + 1
    return counts


def placed_subgroups(
    gang: GangKey, snapshot: ClusterSnapshot, ledger: Ledger, *, gpu: str = GPU,
    exclude: str | None = None,
) -> dict[tuple[NodeName, str, str], int]:
    """The gang's pods bound or in flight that say their subgroup, per ``(node, role,
    subgroup)`` (``exclude`` left out): where each of a LeaderWorkerSet's subgroups runs."""
    counts: dict[tuple[NodeName, str, str], int] = {}
    for uid, node in _placed(gang, snapshot, ledger, gpu=gpu, exclude=exclude):
        member = snapshot.memberships[uid]
        if member.subgroup is not None:
            key = (node, member.role, member.subgroup)
            counts[key] = counts.get(key, 0) + 1
    return counts


def placed_in_of(
    gang: Gang, snapshot: ClusterSnapshot, ledger: Ledger, *, gpu: str = GPU,
    exclude: str | None = None,
) -> dict[tuple[NodeName, str, str], int] | None:
    """:func:`placed_subgroups` for a gang whose pods say their subgroup, else ``None``: what
    :func:`~extender.core.gang.placement.plan_gang` takes as ``placed_in``."""
    if gang.subgroups is None or gang.subgroups.label is None:
        return None
    return placed_subgroups(gang.key, snapshot, ledger, gpu=gpu, exclude=exclude)


def occupants(
    snapshot: ClusterSnapshot, ledger: Ledger, *, gpu: str = GPU, force: bool = False,
) -> dict[NodeName, list[Gang]]:
    """Per node, the gangs with pods bound or in flight or a plan there. Empty when no gang
    of the snapshot is exclusive and not ``force``d: then nobody needs it, and the cost is
    one pass over the gangs."""
    if not force and not any(g.subgroups is not None or (g.topology is not None
                                                          and g.topology.exclusive)
                             for g in snapshot.gangs.values()):
        return {}
    found: dict[NodeName, dict[GangKey, Gang]] = {}
    keys = [GangKey(k) for k in index_of(snapshot, gpu=gpu).gang_pods]
    held = [(k, set(ledger.placed(k, snapshot, gpu=gpu))) for k in keys]
    held += [(k, {(n, r) for n, r, _ in res.plan.slots}) for k, res in ledger.reservations()]
    for key, where in held:
        gang = snapshot.gangs.get(key)
        if gang is None:
            continue
        sub = gang.subgroups
        for node, role in sorted(where):
            if sub is not None and sub.kind_of(role) is None:
                # A pod of a role in no subgroup holds no domain alone: here the gang is
                # seen without its subgroups, unless its subgroups' pods are here too.
                found.setdefault(node, {}).setdefault(key, replace(gang, subgroups=None))
            else:
                found.setdefault(node, {})[key] = gang
    return {n: list(gangs.values()) for n, gangs in found.items()}


def per_role(counts: Mapping[tuple[NodeName, str], int]) -> dict[str, int]:
    """:func:`placed_counts` summed per role."""
    out: dict[str, int] = {}
    for (_, role), n in counts.items():
        out[role] = out.get(role, 0) + n
    return out


def per_node(counts: Mapping[tuple[NodeName, str], int]) -> dict[NodeName, int]:
    """:func:`placed_counts` summed per node."""
    out: dict[NodeName, int] = {}
    for (node, _), n in counts.items():
        out[node] = out.get(node, 0) + n
    return out


def in_flight_demands(
    snapshot: ClusterSnapshot, ledger: Ledger, *, gpu: str = GPU, without: str | None = None,
    node: NodeName | None = None,
) -> list[tuple[NodeName, str, Demand]]:
    """``(node, pod uid, demand)`` of the pods in flight that the snapshot does not charge yet
    (on ``node`` only, if given), largest demand first (then by uid): the order placement packs
    devices in, so a gang's members held at bind are charged the way its plan packed them,
    whatever order they came in.
    """
    index = index_of(snapshot, gpu=gpu)
    out = []
    for uid, flight in ledger.in_flight().items():
        if uid == without or (node is not None and flight.node != node):
            continue
        pod = snapshot.pods.get(uid)
        if pod is None or pod.node_name is not None or flight.node not in index.base:
            continue  # gone, or already charged by the snapshot
        demand = demand_of(pod.shape, gpu=gpu)
        out.append((demand.sort_key(), uid, flight.node, demand))
    return [(node, uid, demand) for _, uid, node, demand in sorted(out)]


def free_capacity(
    snapshot: ClusterSnapshot, ledger: Ledger, *, gpu: str = GPU,
    exclude: GangKey | None = None, reservations: bool = True, without: str | None = None,
) -> CapacityView:
    """Per node: allocatable - bound - in flight - other gangs' unfilled reservations and
    preemption holds.

    ``exclude`` leaves one gang's reservation out (its own members may use it); ``without``
    leaves one pod in flight out (the pod whose bind is being decided, when it retries).
    Memoised per snapshot and ledger version (:meth:`Ledger.capacity_memo`).
    """
    index = index_of(snapshot, gpu=gpu)
    memo = ledger.capacity_memo(snapshot)
    key = (gpu, without, reservations, exclude if reservations else None)
    changes = memo.changes.get(key)
    if changes is None:
        changes = _free_changes(snapshot, ledger, index.base, memo, gpu=gpu, exclude=exclude,
                                reservations=reservations, without=without)
        memo.changes[key] = changes
    return CapacityView(index.base, changes)


Charge = tuple[GangKey, Demand, int]
"""One gang's unfilled slots on a node: its gang, the demand of one pod, how many."""


@dataclass(slots=True)
class CapacityMemo:
    """What :func:`free_capacity` derived from one snapshot and one ledger version."""

    changes: dict[tuple[object, ...], dict[NodeName, NodeCapacity]]
    """Key -> the nodes free capacity changes from the base, and their capacity."""
    charges: dict[str, Charges]
    """GPU resource -> the reservations' and holds' unfilled slots (:func:`_charges`)."""


@dataclass(frozen=True, slots=True)
class Charges:
    by_node: dict[NodeName, list[Charge]]
    """Per node, the reservations and holds charged to it, in the order they are charged."""
    nodes_of: dict[GangKey, dict[NodeName, None]]
    """Per gang, the nodes it has a charge on (a dict as an ordered set)."""


def _free_changes(
    snapshot: ClusterSnapshot, ledger: Ledger, base: Mapping[NodeName, NodeCapacity],
    memo: CapacityMemo, *, gpu: str, exclude: GangKey | None, reservations: bool,
    without: str | None,
) -> dict[NodeName, NodeCapacity]:
    """The nodes :func:`free_capacity` changes from the base, and their capacity.

    Every gang's look asks for free capacity without its own reservation. That is worked out
    from the one with every reservation: only the nodes the excluded gang holds differ, and
    each is charged again from pods in flight, in the same order, without the gang's
    slots. A charge touches one node, so the result is the same as charging every other
    gang's slots from the start, in O(the gang's nodes) instead of O(every reservation)."""
    flights = memo.changes.get((gpu, without, False, None))
    if flights is None:
        flights = {}
        for node, _, demand in in_flight_demands(snapshot, ledger, gpu=gpu, without=without):
            flights[node] = take(flights.get(node) or base[node], demand, force=True)
        memo.changes[(gpu, without, False, None)] = flights
    if not reservations:
        return flights
    charged = memo.charges.get(gpu)
    if charged is None:
        charged = memo.charges[gpu] = _charges(snapshot, ledger, base, gpu=gpu)
    if exclude is not None:
        every = memo.changes.get((gpu, without, True, None))
        if every is None:
            every = memo.changes[(gpu, without, True, None)] = _free_changes(
                snapshot, ledger, base, memo, gpu=gpu, exclude=None, reservations=True,
                without=without)
        changes = dict(every)
        for node in charged.nodes_of.get(exclude, {}):
            cap = flights.get(node)
            for gang, demand, left in charged.by_node[node]:
                if gang != exclude:
                    cap = take(cap or base[node], demand, left, force=True)
            if cap is None:
                del changes[node]
            else:
                changes[node] = cap
        return changes
    changes = dict(flights)
    for node, charges in charged.by_node.items():
        cap = changes.get(node) or base[node]
        for _, demand, left in charges:
            cap = take(cap, demand, left, force=True)
        changes[node] = cap
    return changes


def _charges(snapshot: ClusterSnapshot, ledger: Ledger, base: Mapping[NodeName, NodeCapacity],
             *, gpu: str) -> Charges:
    """Every reservation's and hold's unfilled slots, per node in the order they are charged
    (reservations by gang, then holds by gang, each plan's slots in order), and per gang the
    nodes they are on."""
    by_node: dict[NodeName, list[Charge]] = {}
    nodes_of: dict[GangKey, dict[NodeName, None]] = {}
    for gang, res in [*ledger.reservations(), *ledger.holds()]:
        for node, demand, left in unfilled(res.plan, snapshot, ledger, gpu=gpu):
            if node not in base:
                continue
            by_node.setdefault(node, []).append((gang, demand, left))
            nodes_of.setdefault(gang, {})[node] = None
    return Charges(by_node, nodes_of)


def unfilled(plan: Plan, snapshot: ClusterSnapshot, ledger: Ledger, *,
             gpu: str) -> Iterator[tuple[NodeName, Demand, int]]:
    """The plan's slots no member fills yet (bound or in flight), in the plan's order:
    ``(node, demand of one pod, how many)``. A slot kept for a member not placed yet
    (:attr:`Plan.kept_for`) is charged with that member's own pod, what it takes there: a
    claim left allocated for no pod is out of the node's supply already, and its role's
    template would charge those devices a second time."""
    placed = ledger.placed(plan.gang, snapshot, gpu=gpu)
    kept: dict[tuple[NodeName, str], list[Demand]] = {}
    if plan.kept_for:
        flying = ledger.in_flight()
        for uid, node, role in plan.kept_for:
            pod = snapshot.pods.get(uid)
            if pod is not None and pod.node_name is None and uid not in flying:
                kept.setdefault((node, role), []).append(demand_of(pod.shape, gpu=gpu))
    for node, role, count in plan.slots:
        left = count - placed.get((node, role), 0)
        shape = plan.shape(role)
        if left <= 0 or shape is None:
            continue
        own = kept.get((node, role), [])[:left]
        for demand in own:
            yield node, demand, 1
        if left > len(own):
            yield node, demand_of(shape, gpu=gpu), left - len(own)


def short_node(plan: Plan, snapshot: ClusterSnapshot, ledger: Ledger, *,
               gpu: str) -> NodeName | None:
    """A node of the plan that can no longer hold the slots still open on it, with every
    other gang's promises charged (``None`` when all can): capacity was taken there behind
    Muster's back since the plan was made (a pod another scheduler bound, devices DRA
    allocated to a pod filtered before the plan). Members sent to the rest of the plan
    would wait at the barrier for a member that has nowhere to go."""
    free = free_capacity(snapshot, ledger, gpu=gpu, exclude=plan.gang)
    caps: dict[NodeName, NodeCapacity] = {}
    for node, demand, left in unfilled(plan, snapshot, ledger, gpu=gpu):
        cap = caps.get(node) or free.get(node)
        if cap is None:
            return node
        caps[node] = take(cap, demand, left, force=True)
    for node, cap in caps.items():
        if cap.oversubscribed():
            return node
    return None
