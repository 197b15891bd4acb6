"""Who holds the capacity a waiting gang needs: the running workloads bound on the nodes it
could use, other gangs' plans, preemptors' holds and pods in flight at bind.

"The most free is 0" is true but unhelpful alone. :func:`running_holders` names the workloads
whose bound pods hold GPUs on the nodes the gang's roles may use, asked only for a gang that
waits (the bound pods are read once per snapshot, and summed per workload over every node
once more). A DRA device of a class the gang asks counts as a GPU. :func:`holders_in_the_way`
adds what Muster itself promised:
it asks once whether the gang would fit if other plans and pods in flight were not there (on a
copy of the ledger) and, if so, names those holders on the nodes that plan would use.
:func:`waiting_reason` is the one wording of a waiting gang's reason with its holders, which
the event, the Gang object, ``muster describe`` and ``muster fit`` all show. Pure and bounded:
one extra placement, and the text names at most :data:`SHOWN` holders of each kind and
:data:`SHOWN_NODES` nodes each.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from extender.core.decide.settings import CoreSettings
from extender.core.gang.capacity import DEVICE, demand_of, empty_of, index_of
from extender.core.gang.ledger import (
    Ledger,
    free_capacity,
    occupants,
    per_role,
    placed_counts,
    placed_in_of,
)
from extender.core.gang.placement import Infeasible, eligible_for, gang_demands, plan_gang
from extender.core.model.resources import DEVICE_CLASS_PREFIX
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, GangKey, Membership, NodeName, PodInfo

SHOWN = 3
"""Holders of each kind (Muster's, running) a reason names one by one; the rest are
counted."""
SHOWN_NODES = 4
"""Nodes named per holder; the rest are counted."""

PLAN = "plan"
PREEMPTION = "preemption"
IN_FLIGHT = "in_flight"
RUNNING = "running"


@dataclass(frozen=True, slots=True)
class Holder:
    """Capacity a waiting gang could use, held for someone else."""

    kind: str
    """``plan`` (another gang's reservation), ``preemption`` (held for a higher-priority
    gang while its victims are evicted), ``in_flight`` (pods at bind, not yet observed
    bound) or ``running`` (a workload's bound pods)."""
    gang: GangKey | None
    """The holding gang; ``None`` for pods outside any gang."""
    nodes: tuple[NodeName, ...]
    gpu_milli: int
    """GPUs held, in milli-units (DRA devices of a class the waiting gang asks count too)."""
    pods: int
    """Pods the plan still has to place there, pods in flight, or running pods."""
    name: str = ""
    """``running``: the workload holding them (``namespace/name``): the gang's workload, else
    the pods' controller, else the pod."""

    @property
    def amount(self) -> str:
        """``"16 GPUs"``, ``"1 GPU"``, or ``"capacity"`` when no GPU is held."""
        if not self.gpu_milli:
            return "capacity"
        return f"{self.gpu_milli / DEVICE:g} GPU{'s' if self.gpu_milli != DEVICE else ''}"

    @property
    def text(self) -> str:
        amount = self.amount
        verb = "are" if self.gpu_milli and self.gpu_milli != DEVICE else "is"
        where = _names(self.nodes)
        if self.kind == RUNNING:
            return f"{amount} on {where} {verb} held by {self.name}, running"
        if self.kind == PLAN:
            return f"{amount} on {where} {verb} held for gang {self.gang}'s plan"
        if self.kind == PREEMPTION:
            return (f"{amount} on {where} {verb} held for gang {self.gang}, which preempts "
                    "to fit there")
        who = f"of gang {self.gang} " if self.gang is not None else "outside any gang "
        pods = f"{self.pods} pod{'s' if self.pods != 1 else ''}"
        return f"{amount} on {where} {verb} held by {pods} {who}in flight at bind"

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"kind": self.kind, "gang": self.gang,
                                  "nodes": list(self.nodes), "gpus": self.gpu_milli / DEVICE,
                                  "pods": self.pods}
        if self.name:
            out["name"] = self.name
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Holder:
        """The holder :meth:`as_dict` gave (``/inspect/gangs``' ``heldBy``), to be worded by
        :attr:`text` wherever it is shown."""
        nodes = data.get("nodes")
        gpus = data.get("gpus")
        pods = data.get("pods")
        gang = data.get("gang")
        return cls(str(data.get("kind") or ""), GangKey(str(gang)) if gang else None,
                   tuple(NodeName(str(n)) for n in nodes) if isinstance(nodes, list) else (),
                   round(gpus * DEVICE) if isinstance(gpus, int | float) else 0,
                   pods if isinstance(pods, int) else 0, str(data.get("name") or ""))


def _names(nodes: tuple[NodeName, ...]) -> str:
    shown = ", ".join(nodes[:SHOWN_NODES])
    more = len(nodes) - SHOWN_NODES
    return shown + (f" and {more} more" if more > 0 else "")


def describe_holders(holders: tuple[Holder, ...]) -> str:
    """``"16 GPUs on n1, n2 are held for gang ml/a's plan; ... and 2 more holders; held by
    ml/train-3 (16 GPUs on 2 nodes), ml/serve-1 (8 on n4) and 3 more"``: Muster's own
    promises first, then the running workloads."""
    promised = [h for h in holders if h.kind != RUNNING]
    parts = []
    if promised:
        more = len(promised) - SHOWN
        parts.append("; ".join(h.text for h in promised[:SHOWN]) + (
            f"; and {more} more holder{'s' if more != 1 else ''}" if more > 0 else ""))
    running = [h for h in holders if h.kind == RUNNING]
    if running:
        parts.append(_held_by(running))
    return "; ".join(parts)


def _held_by(running: list[Holder]) -> str:
    """``"held by ml/train-3 (16 GPUs on 2 nodes), ml/serve-1 (8 on n4) and 3 more"``."""
    named = []
    for i, h in enumerate(running[:SHOWN]):
        amount = h.amount if i == 0 else f"{h.gpu_milli / DEVICE:g}"
        where = h.nodes[0] if len(h.nodes) == 1 else f"{len(h.nodes)} nodes"
        named.append(f"{h.name} ({amount} on {where})")
    more = len(running) - SHOWN
    if more > 0:
        return f"held by {', '.join(named)} and {more} more"
    if len(named) == 1:
        return f"held by {named[0]}"
    return f"held by {', '.join(named[:-1])} and {named[-1]}"


def waiting_reason(reason: str, holders: tuple[Holder, ...]) -> str:
    """A waiting gang's reason with who holds what it needs: the one sentence its events,
    its Gang object, ``muster describe`` and ``muster fit`` show."""
    return f"{reason}; {describe_holders(holders)}" if holders else reason


def _holder_name(pod: PodInfo, member: Membership | None) -> tuple[str, GangKey | None]:
    """Who a running pod holding GPUs is named by: its workload, its controller, itself."""
    if member is not None:
        ref = member.workload
        return f"{ref.namespace}/{ref.name}", member.gang
    for owner in pod.owners:
        if owner.controller:
            return f"{pod.namespace}/{owner.name}", None
    return pod.key, None


_Running = tuple[str, GangKey | None, int, int, tuple[tuple[str, int], ...]]
"""One workload's bound pods holding GPUs on one node, as :func:`running_holders` reads
them: who they are named by, their gang, the GPU milli they hold, how many pods, and what
they hold of each DRA device class."""


def _running_on(snapshot: ClusterSnapshot, *, gpu: str) -> Mapping[NodeName, tuple[_Running, ...]]:
    """Per node, the workloads whose bound pods hold GPUs or devices there: derived once per
    snapshot and kept on it, so every gang waiting in one look shares one pass over the bound
    pods."""
    key = f"running-holders:{gpu}"
    found = snapshot.derived.get(key)
    if isinstance(found, dict):
        return found
    out: dict[NodeName, tuple[_Running, ...]] = {}
    for node, uids in index_of(snapshot, gpu=gpu).pods_on.items():
        here: dict[str, tuple[GangKey | None, list[int], dict[str, int]]] = {}
        for uid in uids:
            pod = snapshot.pods[uid]
            shape = pod.shape
            milli = min(shape.gpu_share, DEVICE) if shape.gpu_share > 0 else -(
                -shape.requests.get(gpu, 0) // DEVICE) * DEVICE
            devices = {n: a for n, a in shape.requests.items()
                       if n.startswith(DEVICE_CLASS_PREFIX)}
            if milli <= 0 and not devices:
                continue
            name, owner = _holder_name(pod, snapshot.memberships.get(uid))
            _, counts, held = here.setdefault(name, (owner, [0, 0], {}))
            counts[0] += milli
            counts[1] += 1
            for n, a in devices.items():
                held[n] = held.get(n, 0) + a
        if here:
            out[node] = tuple((name, owner, counts[0], counts[1], tuple(sorted(held.items())))
                              for name, (owner, counts, held) in here.items())
    snapshot.derived[key] = out
    return out


def running_holders(
    gang: Gang, *, snapshot: ClusterSnapshot, gpu: str, placed: Mapping[str, int],
) -> tuple[Holder, ...]:
    """The workloads whose bound pods hold GPUs on the nodes the roles ``gang`` still needs
    pods of may use, largest first (then by name); pods of the gang itself are left out. One
    walk over those nodes (their workloads holding GPUs found once per snapshot)."""
    demands = [rd for rd in gang_demands(gang, placed) if rd.need]
    classes = {name for rd in demands for name in rd.shape.requests
               if name.startswith(DEVICE_CLASS_PREFIX)}
    nodes: set[NodeName] = set()
    for rd in demands:
        nodes.update(eligible_for(rd.shape, snapshot, gpu=gpu))
    running = _running_on(snapshot, gpu=gpu)
    if not classes and nodes.issuperset(running):
        # The gang may use every node that holds GPUs (most gangs): one sum per snapshot.
        key = f"running-holders-all:{gpu}"
        every = snapshot.derived.get(key)
        if not isinstance(every, tuple):
            every = snapshot.derived[key] = _summed(running, running, classes, skip=None)
        return tuple(h for h in every if h.gang != gang.key)
    return _summed(running, nodes.intersection(running), classes, skip=gang.key)


def _summed(running: Mapping[NodeName, tuple[_Running, ...]], nodes: Iterable[NodeName],
            classes: set[str], *, skip: GangKey | None) -> tuple[Holder, ...]:
    """Per workload, what it holds on ``nodes`` (GPUs, and devices of ``classes``), largest
    first, then by name; the pods of gang ``skip`` left out."""
    found: dict[str, tuple[GangKey | None, dict[NodeName, tuple[int, int]]]] = {}
    for node in nodes:
        for name, owner, milli, pods, devices in running[node]:
            held = milli + (sum(a for n, a in devices if n in classes) if devices else 0)
            if held > 0 and (skip is None or owner != skip):
                found.setdefault(name, (owner, {}))[1][node] = (held, pods)
    out = [Holder(RUNNING, owner, tuple(sorted(per)), sum(v[0] for v in per.values()),
                  sum(v[1] for v in per.values()), name)
           for name, (owner, per) in found.items()]
    return tuple(sorted(out, key=lambda h: (-h.gpu_milli, h.name)))


def fit_reason(gang: Gang, reason: str, *, snapshot: ClusterSnapshot,
               settings: CoreSettings) -> str:
    """``muster fit``'s reason for a gang that does not fit now: the planner's ``reason`` with
    the running workloads holding what it needs (:func:`waiting_reason`), as its events
    would say once submitted; a gang no empty cluster holds names nobody. Nothing is
    promised to anyone in a fit: no plan or pod in flight is named."""
    gpu = settings.gpu_resource
    placed = per_role(placed_counts(gang.key, snapshot, Ledger(), gpu=gpu))
    never = plan_gang(gang, snapshot=snapshot, capacity=empty_of(snapshot, gpu=gpu),
                      placed=placed, policy=settings.policy, gpu=gpu,
                      budget=settings.search_budget)
    if isinstance(never, Infeasible):
        return reason
    return waiting_reason(reason, running_holders(gang, snapshot=snapshot, gpu=gpu,
                                                  placed=placed))


def holders_in_the_way(
    gang: Gang, *, snapshot: ClusterSnapshot, ledger: Ledger, settings: CoreSettings,
    placed: Mapping[str, int], within: str | None,
) -> tuple[Holder, ...]:
    """Who holds what ``gang`` needs: the plans and pods in flight that keep it from
    fitting now, largest first (none when the gang would not fit without them either), then
    the running workloads on the nodes it may use (:func:`running_holders`)."""
    gpu = settings.gpu_resource
    running = running_holders(gang, snapshot=snapshot, gpu=gpu, placed=placed)
    return (*_promised(gang, snapshot=snapshot, ledger=ledger, settings=settings,
                       placed=placed, within=within), *running)


def _promised(
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
