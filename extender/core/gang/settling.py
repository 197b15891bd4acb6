"""What the ledger learns from the cluster: whether a plan has done its job
(:func:`plan_filled`, asked by :meth:`~extender.core.gang.ledger.Ledger.settle`), which
admitted gangs lost a member that a replacement should take the place of (:func:`departures`,
for :meth:`~extender.core.gang.ledger.Ledger.keep_for_replacements`), and what a restart
restores (:func:`restored`, for :meth:`~extender.core.gang.ledger.Ledger.rebuild`).

Pure: these read the snapshot and the ledger and write nothing but a record's settle memo.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from extender.core.gang.capacity import gang_priority, gang_stamps, index_of
from extender.core.gang.freeview import (
    free_capacity,
    occupants,
    per_node,
    per_role,
    placed_counts,
)
from extender.core.gang.lifecycle import GangRecord, Member
from extender.core.gang.placement import Plan, placed_domain, plan_gang
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, GangKey, NodeName, Phase, PodPhase, PodShape

_ENDING = (Phase.COMPLETED, Phase.FAILED, Phase.SUSPENDED)
"""Workload phases in which a member that goes is not replaced."""

if TYPE_CHECKING:
    from extender.core.gang.ledger import Ledger


def plan_filled(gang: GangKey, plan: Plan, pods: tuple[str, ...], *, record: GangRecord,
                stamps: Mapping[str, int] | None, snapshot: ClusterSnapshot, ledger: Ledger,
                gpu: str) -> bool:
    """Whether every role of ``plan`` has as many of the gang's pods bound or in flight as
    its slots hold: then it has done its job, the snapshot charges those pods now, and keeping
    it would reserve their capacity a second time once they finish or are deleted.

    Counted per role, not per slot: kube-scheduler may put two members of a role on one
    planned node where the plan had one there and one on another (the filter offers each
    member every node with a slot open for its role when they are decided together), and the
    slot left empty would otherwise hold its node's capacity from every other pod until the
    plan's TTL. The members placed when the plan was made (:attr:`Plan.placed`: it was made
    for the rest, after a plan ended or a restart) are counted on top of its slots; otherwise
    such a plan would end at once, and what it holds for the rest of the gang would go to the
    next gang planned before the rest binds there.

    Kept in the gang's ``record`` while the gang's stamp, its pods in flight and the plan
    stay the same: settling runs on every new snapshot, and most pod events touch no planned
    gang, so counting every member of every plan each time was most of its cost."""
    stamp = None if stamps is None else stamps.get(gang)
    flights = tuple(map(ledger.in_flight().get, pods))
    key = (stamp, plan, flights)
    if stamp is not None:
        kept = record.settled
        if kept is not None and kept[0] == key:
            return kept[1]
    placed = per_role(placed_counts(gang, snapshot, ledger, gpu=gpu))
    wanted: dict[str, int] = {}
    for _node, role, n in plan.slots:
        wanted[role] = wanted.get(role, 0) + n
    for role, n in plan.placed:  # a plan made for the rest of the gang
        if role in wanted:
            wanted[role] += n
    filled = all(placed.get(role, 0) >= n for role, n in wanted.items())
    if stamp is not None:
        record.settled = (key, filled)
    return filled


def restored(snapshot: ClusterSnapshot, ledger: Ledger, *,
             gpu: str) -> Iterator[tuple[Gang, int, Plan | None]]:
    """After a restart, per gang with members bound (the barrier released them before), in
    the order gangs are planned (priority, then age): the last stage released (that of its
    bound members) and, for a gang left below its minimum (a crash between two binds), a
    plan for the rest of its minimum, or ``None``. Each plan is made against the ledger as it
    stands when the next item is asked for: the caller reserves one before asking on."""
    order = sorted(snapshot.gangs.values(),
                   key=lambda g: (-gang_priority(g, snapshot, gpu=gpu), g.created, g.key))
    for gang in order:
        bound = placed_counts(gang.key, snapshot, ledger, gpu=gpu)  # nothing is in flight
        placed, nodes = per_role(bound), per_node(bound)
        if not placed:
            continue
        stage = max(gang.stage_of(role) for role in placed)
        if sum(placed.values()) >= gang.min_member:
            yield gang, stage, None
            continue
        capacity = free_capacity(snapshot, ledger, gpu=gpu)
        plan = plan_gang(gang, snapshot=snapshot, capacity=capacity, placed=placed, gpu=gpu,
                         within=placed_domain(gang, snapshot, nodes),
                         occupied=occupants(snapshot, ledger, gpu=gpu))
        yield gang, stage, plan if isinstance(plan, Plan) and plan.slots else None


@dataclass(frozen=True, slots=True)
class Departure:
    """What :func:`departures` found for one admitted gang whose members changed."""

    gang: GangKey
    members: dict[str, Member]
    """Its members holding resources now (the record's new ``members``)."""
    stamp: int | None
    hold: Plan | None = None
    """A plan for the members that went, on their nodes: the gang fell below its minimum."""
    gone: tuple[str, ...] = ()
    """The uids of the members the hold is for."""
    end: bool = False
    """Its replacement hold is no longer wanted (no member left, or the gang is ending)."""


def departures(snapshot: ClusterSnapshot, ledger: Ledger, *, gpu: str,
               spare: Collection[GangKey] = ()) -> list[Departure]:
    """Per admitted gang whose members holding resources changed since the last look: its
    members now, and a plan holding the nodes and demands of members that went (deleted,
    evicted, failed) when the gang fell below its minimum with members still holding
    resources, its workload still there and not ending (no member succeeded, its phase not
    completed, failed or suspended); a member whose node is gone or cordoned is not held
    for (its replacement could not be placed there). Gangs in ``spare`` (a preemption's
    victims) and gangs with a plan or a barrier of their own are left alone. Gangs whose
    stamp is unchanged are not read again."""
    stamps = gang_stamps(snapshot)
    members_of = index_of(snapshot, gpu=gpu).gang_pods
    found: list[Departure] = []
    for key, record in ledger.admitted():
        gang = snapshot.gangs.get(key)
        if gang is None and not record.members:
            continue  # its workload is gone, and it was remembered with no member
        stamp = None if stamps is None else stamps.get(key)
        if stamp is not None and stamp == record.members_stamp:
            continue
        change = _departure(key, gang, record, stamp=stamp, snapshot=snapshot,
                            uids=members_of.get(key, ()), spare=spare)
        if change is not None:
            found.append(change)
    return sorted(found, key=lambda d: d.gang)


def _departure(key: GangKey, gang: Gang | None, record: GangRecord, *, stamp: int | None,
               snapshot: ClusterSnapshot, uids: tuple[str, ...],
               spare: Collection[GangKey]) -> Departure | None:
    """:func:`departures` for one admitted gang (``None``: nothing changed)."""
    pods = [snapshot.pods[u] for u in uids if u in snapshot.pods] if gang is not None else []
    members = {p.uid: (p.node_name, snapshot.memberships[p.uid].role, p.shape)
               for p in pods if p.holds_resources and p.node_name is not None}
    tree = None if gang is None else snapshot.workloads.get(gang.workload.key)
    ending = (gang is None or key in spare or any(p.phase is PodPhase.SUCCEEDED for p in pods)
              or (tree is not None and tree.phase in _ENDING))
    res = record.plan
    if res is not None and res.replacing and (ending or not members):
        return Departure(key, members, stamp, end=True)
    if members == record.members:
        return None if stamp == record.members_stamp else Departure(key, members, stamp)
    gone = sorted(u for u in record.members if u not in members)
    short = 0 if gang is None else gang.min_member - len(members)
    if (ending or not gone or short <= 0 or not members or res is not None
            or record.barrier is not None):
        return Departure(key, members, stamp)
    nodes = snapshot.nodes
    held = [(u, record.members[u]) for u in gone if record.members[u][0] in nodes
            and not nodes[record.members[u][0]].unschedulable][:short]
    return Departure(key, members, stamp, hold=_hold(key, held, members) if held else None,
                     gone=tuple(u for u, _ in held))


def _hold(gang: GangKey, held: list[tuple[str, Member]], members: Mapping[str, Member]) -> Plan:
    """A plan of one slot per member that went, where it was, around the members left."""
    slots: dict[tuple[NodeName, str], int] = {}
    shapes: dict[str, PodShape] = {}
    for _, (node, role, shape) in held:
        slots[(node, role)] = slots.get((node, role), 0) + 1
        shapes.setdefault(role, shape)
    left: dict[str, int] = {}
    for _, role, _ in members.values():
        left[role] = left.get(role, 0) + 1
    return Plan(gang=gang, slots=tuple(sorted((n, r, c) for (n, r), c in slots.items())),
                shapes=tuple((r, shapes[r]) for r in sorted(shapes)), required=len(held),
                placed=tuple(sorted(left.items())))
