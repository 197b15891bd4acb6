"""Who holds the capacity a waiting gang needs: other gangs' plans, preemptors' holds and pods
in flight at bind.

"The largest free is 0" is true but unhelpful when the GPUs are not used by anything running:
Muster itself promised them to another gang's plan, or pods of another gang are between the
barrier and their observed Binding. :func:`holders_in_the_way` asks once whether the gang
would fit if those promises were not there (on a copy of the ledger) and, if so, names the
holders on the nodes that plan would use, largest first. Pure and bounded: one extra
placement, and the text names at most :data:`SHOWN` holders and :data:`SHOWN_NODES` nodes
each.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from extender.core.decide.settings import CoreSettings
from extender.core.gang.capacity import DEVICE, demand_of
from extender.core.gang.ledger import Ledger, free_capacity, occupants, placed_in_of
from extender.core.gang.placement import Infeasible, plan_gang
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, GangKey, NodeName

SHOWN = 3
"""Holders a reason names one by one; the rest are counted."""
SHOWN_NODES = 4
"""Nodes named per holder; the rest are counted."""

PLAN = "plan"
PREEMPTION = "preemption"
IN_FLIGHT = "in_flight"


@dataclass(frozen=True, slots=True)
class Holder:
    """Capacity a waiting gang could use, held for someone else."""

    kind: str
    """``plan`` (another gang's reservation), ``preemption`` (held for a higher-priority
    gang while its victims are evicted) or ``in_flight`` (pods at bind, not yet observed
    bound)."""
    gang: GangKey | None
    """The holding gang; ``None`` for pods in flight outside any gang."""
    nodes: tuple[NodeName, ...]
    gpu_milli: int
    pods: int
    """Pods the plan still has to place there, or pods in flight."""

    @property
    def text(self) -> str:
        amount = (f"{self.gpu_milli / DEVICE:g} GPU{'s' if self.gpu_milli != DEVICE else ''}"
                  if self.gpu_milli else "capacity")
        verb = "are" if self.gpu_milli and self.gpu_milli != DEVICE else "is"
        where = _names(self.nodes)
        if self.kind == PLAN:
            return f"{amount} on {where} {verb} held for gang {self.gang}'s plan"
        if self.kind == PREEMPTION:
            return (f"{amount} on {where} {verb} held for gang {self.gang}, which preempts "
                    "to fit there")
        who = f"of gang {self.gang} " if self.gang is not None else "outside any gang "
        pods = f"{self.pods} pod{'s' if self.pods != 1 else ''}"
        return f"{amount} on {where} {verb} held by {pods} {who}in flight at bind"

    def as_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "gang": self.gang, "nodes": list(self.nodes),
                "gpus": self.gpu_milli / DEVICE, "pods": self.pods}


def _names(nodes: tuple[NodeName, ...]) -> str:
    shown = ", ".join(nodes[:SHOWN_NODES])
    more = len(nodes) - SHOWN_NODES
    return shown + (f" and {more} more" if more > 0 else "")


def describe_holders(holders: tuple[Holder, ...]) -> str:
    """``"16 GPUs on n1, n2 are held for gang ml/a's plan; ... and 2 more holders"``."""
    text = "; ".join(h.text for h in holders[:SHOWN])
    more = len(holders) - SHOWN
    return text + (f"; and {more} more holder{'s' if more != 1 else ''}" if more > 0 else "")


def holders_in_the_way(
    gang: Gang, *, snapshot: ClusterSnapshot, ledger: Ledger, settings: CoreSettings,
    placed: Mapping[str, int], within: str | None,
) -> tuple[Holder, ...]:
    """The plans and pods in flight that keep ``gang`` from fitting now, largest first;
    empty when there are none, or when the gang would not fit without them either."""
    gpu = settings.gpu_resource
    plans = [(PLAN, k, r) for k, r in ledger.reservations() if k != gang.key] + [
        (PREEMPTION, k, r) for k, r in ledger.holds() if k != gang.key]
    flights = {}
    for uid, flight in ledger.in_flight().items():
        pod = snapshot.pods.get(uid)
        member = snapshot.memberships.get(uid)
        owner = None if member is None else member.gang
        if pod is not None and pod.node_name is None and owner != gang.key:
            flights[uid] = (flight.node, owner)
    if not plans and not flights:
        return ()
    # What if nobody else held anything? On a copy: the session's ledger must not change.
    twin = ledger.clone()
    for kind, key, _ in plans:
        if kind == PLAN:
            twin.drop_plan(key)
        else:
            twin.unhold(key)
    for uid in flights:
        twin.forget_pod(uid)
    plan = plan_gang(gang, snapshot=snapshot, capacity=free_capacity(snapshot, twin, gpu=gpu,
                                                                     exclude=gang.key),
                     placed=placed, policy=settings.policy, gpu=gpu,
                     budget=settings.search_budget, within=within,
                     occupied=occupants(snapshot, twin, gpu=gpu),
                     placed_at=ledger.placed(gang.key, snapshot, gpu=gpu),
                     placed_in=placed_in_of(gang, snapshot, ledger, gpu=gpu))
    if isinstance(plan, Infeasible):
        return ()
    wanted = {n for n, _, _ in plan.slots}
    found: dict[tuple[str, GangKey | None], dict[NodeName, list[int]]] = {}
    for kind, key, res in plans:
        counted = ledger.placed(key, snapshot, gpu=gpu)
        gpus = {role: demand_of(shape, gpu=gpu).gpu_milli for role, shape in res.plan.shapes}
        for node, role, count in res.plan.slots:
            left = count - counted.get((node, role), 0)
            if left > 0 and role in gpus:
                held = found.setdefault((kind, key), {}).setdefault(node, [0, 0])
                held[0] += left * gpus[role]
                held[1] += left
    for uid, (node, owner) in flights.items():
        held = found.setdefault((IN_FLIGHT, owner), {}).setdefault(node, [0, 0])
        held[0] += demand_of(snapshot.pods[uid].shape, gpu=gpu).gpu_milli
        held[1] += 1
    # Name the holders on the nodes the gang would use; if none is there (an exclusive
    # gang's domain fenced the gang off), every holder stands in the way.
    in_way = {k: {n: v for n, v in per.items() if n in wanted} for k, per in found.items()}
    chosen = {k: per for k, per in in_way.items() if per} or found
    out = [Holder(kind, key, tuple(sorted(per)), sum(v[0] for v in per.values()),
                  sum(v[1] for v in per.values()))
           for (kind, key), per in chosen.items()]
    return tuple(sorted(out, key=lambda h: (-h.gpu_milli, -h.pods, h.kind, h.gang or "")))
