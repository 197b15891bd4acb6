"""What the ledger learns from the cluster: whether a plan has done its job
(:func:`plan_filled`, asked by :meth:`~extender.core.gang.ledger.Ledger.settle`), and what a
restart restores (:func:`restored`, for :meth:`~extender.core.gang.ledger.Ledger.rebuild`).

Pure: these read the snapshot and the ledger and write nothing but a record's settle memo.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from extender.core.gang.capacity import gang_priority
from extender.core.gang.freeview import (
    free_capacity,
    occupants,
    per_node,
    per_role,
    placed_counts,
)
from extender.core.gang.lifecycle import GangRecord
from extender.core.gang.placement import Plan, placed_domain, plan_gang
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, GangKey

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
