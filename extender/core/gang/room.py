"""Is there still room for this pod on this node? The check bind makes before it lets a pod go.

Filter and bind are separate calls, and a lot can happen between them: the pod's gang plan
expires and its capacity goes to another gang; a gang is planned over a node a lone pod was
filtered onto; two lone sharing pods are filtered onto the same device before either binds.
kube-scheduler's own cache sees none of it (it counts whole resources, not reservations or
GPU devices), so bind checks again, on the same free capacity filter uses
(:func:`~extender.core.gang.ledger.free_capacity`), for the one node: allocatable minus bound pods,
minus pods in flight (this one left out), minus other gangs' reservations.

Pure: reads the snapshot and the ledger, changes nothing.
"""

from __future__ import annotations

from dataclasses import replace

from extender.core.gang.capacity import Demand, NodeCapacity, demand_of, fits, index_of, take
from extender.core.gang.freeview import unfilled
from extender.core.gang.ledger import Ledger, in_flight_demands
from extender.core.model.quantity import format_quantity
from extender.core.model.resources import GPU, MEMORY
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import GangKey, NodeName, PodInfo


def _reserved_on(
    node: NodeName, snapshot: ClusterSnapshot, ledger: Ledger, *, gpu: str,
    exclude: GangKey | None,
) -> list[tuple[GangKey, Demand, int]]:
    """Other gangs' reservations still unfilled on ``node``: ``(gang, demand, pods)``."""
    out = []
    for gang, res in ledger.reservations():
        if gang == exclude or not res.plan.uses(node):
            continue
        out += [(gang, demand, left)
                for n, demand, left in unfilled(res.plan, snapshot, ledger, gpu=gpu)
                if n == node]
    return out


def _free_on(
    node: NodeName, snapshot: ClusterSnapshot, ledger: Ledger, *, gpu: str,
    reserved: list[tuple[GangKey, Demand, int]], without: str,
) -> tuple[NodeCapacity, NodeCapacity]:
    """``node``'s free capacity as :func:`~extender.core.gang.ledger.free_capacity` computes it
    (pods in flight, then reservations), without and with ``reserved``; one node only."""
    cap = index_of(snapshot, gpu=gpu).base[node]
    for _, _, demand in in_flight_demands(snapshot, ledger, gpu=gpu, without=without, node=node):
        cap = take(cap, demand, force=True)
    unreserved = cap
    for _, demand, left in reserved:
        cap = take(cap, demand, left, force=True)
    return unreserved, cap


def _lack(demand: Demand, cap: NodeCapacity, *, gpu: str) -> str:
    """What ``cap`` lacks to hold one pod of ``demand``, in a few words."""
    if cap.pods is not None and cap.pods < 1:
        return "the node has no pod slot left (its pods allocatable is used up)"
    if demand.whole and cap.whole_free < demand.whole:
        return f"it needs {demand.whole} whole {gpu}, {max(cap.whole_free, 0)} are free"
    if demand.share:
        largest = max(cap.devices, default=0)
        if largest < demand.share:
            return (f"it needs {demand.share}m of one {gpu} device, the largest free device "
                    f"has {max(largest, 0)}m")
    for name, missing in demand.scalar.shortfall(cap.free).items():
        binary = name == MEMORY
        have = max(demand.scalar[name] - missing, 0)
        return (f"it needs {name}={format_quantity(demand.scalar[name], binary=binary)}, "
                f"free is {name}={format_quantity(have, binary=binary)}")
    return "its demand does not fit all at once"


def lack_of_room(
    pod: PodInfo, node: NodeName, *, snapshot: ClusterSnapshot, ledger: Ledger,
    gpu: str = GPU, exclude: GangKey | None = None, prebound: bool = False,
) -> str | None:
    """``None`` if ``pod`` fits on ``node`` now, else why not (a sentence naming the pod).

    ``exclude`` is the pod's own gang: its reservation is the pod's to use. The pod itself is
    left out of the pods in flight, so a retried bind is not counted twice.

    ``prebound``: the pod has passed kube-scheduler's PreBind (a bind request, a member held
    at the barrier), so the devices its claims ask (:attr:`PodInfo.claimed`) are allocated to
    it on ``node`` already and are not checked. Refusing the bind would not free them
    (kube-scheduler's Unreserve leaves a claim allocated), only keep them from everyone until
    the pod's next scheduling cycle; the snapshot may not show the allocation yet.
    """
    shape = replace(pod.shape, requests=pod.shape.requests - pod.claimed) \
        if prebound and pod.claimed else pod.shape
    demand = demand_of(shape, gpu=gpu)
    reserved = _reserved_on(node, snapshot, ledger, gpu=gpu, exclude=exclude)
    unreserved, cap = _free_on(node, snapshot, ledger, gpu=gpu, reserved=reserved,
                               without=pod.uid)
    if fits(cap, demand):
        return None
    # The picture above charges pods in flight before reservations; GPU shares packed in
    # another order may fit where that one does not. Repack the node, largest first.
    claims = [d for _, _, d in in_flight_demands(snapshot, ledger, gpu=gpu, without=pod.uid,
                                                 node=node)]
    claims += [d for _, d, left in reserved for _ in range(left)]
    packed = index_of(snapshot, gpu=gpu).base[node]
    for d in sorted([*claims, demand], key=Demand.sort_key):
        packed = take(packed, d, force=True)
    if not packed.oversubscribed():
        return None
    why = _lack(demand, cap, gpu=gpu)
    if reserved and fits(unreserved, demand):
        gangs = ", ".join(sorted({g for g, _, _ in reserved}))
        why += f" (capacity reserved for gang {gangs})"
    return f"pod {pod.key} no longer fits on {node}: {why}"
