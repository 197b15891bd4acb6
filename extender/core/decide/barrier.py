"""Bind: the gang barrier, and the last check that a pod still has room where it goes.

- A pod must still fit on its node (:mod:`extender.core.gang.room`): between filter and bind a plan
  can expire and its capacity go to another gang, or a gang be planned over a lone pod's node.
- Members of a gang are held until its minimum have reached bind or are bound, then released
  together; a barrier whose next member does not come within ``bind_timeout`` fails them all
  (:func:`withdraw`).

Like filter, bind records what it decided in the ledger (a pod in flight, a member held).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from extender.core.decide.settings import CoreSettings
from extender.core.gang.capacity import index_of
from extender.core.gang.constraints import exclusive_fences, exclusive_key
from extender.core.gang.ledger import Ledger, free_capacity, occupants
from extender.core.gang.placement import Plan
from extender.core.gang.room import lack_of_room
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, GangKey, NodeName, PodInfo


def gang_reached(gang: Gang, snapshot: ClusterSnapshot, ledger: Ledger, *, gpu: str) -> int:
    """Members bound or at bind (in flight): what the barrier counts."""
    inflight = ledger.in_flight()
    return sum(
        1 for uid in index_of(snapshot, gpu=gpu).gang_pods.get(gang.key, ())
        if snapshot.pods[uid].holds_resources
        or (snapshot.pods[uid].node_name is None and uid in inflight)
    )


class BindOutcome(StrEnum):
    BIND = "bind"
    """Post the Binding for every pod in ``release`` (this one included, unless bound)."""
    WAIT = "wait"
    """Hold this bind request; a later decision releases or rejects it."""
    REJECT = "reject"
    """Fail this bind (and every pod in ``rejected``) so kube-scheduler requeues them."""


@dataclass(frozen=True, slots=True)
class BindDecision:
    outcome: BindOutcome
    reason: str
    gang: GangKey | None = None
    release: tuple[tuple[str, NodeName], ...] = ()
    """(pod uid, node) pairs now free to bind."""
    rejected: tuple[tuple[str, NodeName], ...] = ()
    """(pod uid, node) pairs held at the barrier that must now fail."""


def decide_bind(
    pod_uid: str, node: NodeName, *, snapshot: ClusterSnapshot, ledger: Ledger, now: float,
    settings: CoreSettings,
) -> BindDecision:
    pod = snapshot.pods.get(pod_uid)
    if pod is None:
        return BindDecision(BindOutcome.REJECT, f"no pod with uid {pod_uid} (deleted or replaced)")
    gang = snapshot.gang_of(pod_uid)
    key = None if gang is None else gang.key
    if pod.node_name is not None:
        if pod.node_name == node:
            return BindDecision(BindOutcome.BIND, f"pod {pod.key} is already bound to {node}", key)
        return BindDecision(BindOutcome.REJECT,
                            f"pod {pod.key} is already bound to {pod.node_name}, not {node}", key)
    if pod.deleting:
        return BindDecision(BindOutcome.REJECT, f"pod {pod.key} is being deleted", key)
    if node not in snapshot.nodes:
        return BindDecision(BindOutcome.REJECT, f"node {node} is not in the cluster", key)
    if gang is None and pod_uid in snapshot.unresolved:
        return BindDecision(BindOutcome.REJECT,
                            f"pod {pod.key}: {snapshot.unresolved[pod_uid]}; it may be a gang "
                            "member", key)
    if gang is not None:
        ledger.recheck_admitted(gang.key, snapshot, gpu=settings.gpu_resource)
    stage = 0 if gang is None else gang.stage_of(snapshot.memberships[pod_uid].role)
    admitted = gang is not None and ledger.admitted_stage(gang.key) >= stage
    if gang is not None and not admitted and barrier_expired(gang.key, ledger=ledger, now=now,
                                                              settings=settings):
        return withdraw(gang.key, ledger=ledger, also=(pod_uid, node))
    lack = lack_of_room(pod, node, snapshot=snapshot, ledger=ledger,
                        gpu=settings.gpu_resource, exclude=key, prebound=True)
    if lack is not None:
        return _no_room(pod, gang, node, lack, snapshot=snapshot, ledger=ledger)
    fenced = None if gang is None else _fenced(gang, pod_uid, node, snapshot=snapshot,
                                                ledger=ledger,
                                                gpu=settings.gpu_resource)
    if fenced is not None:
        return _no_room(pod, gang, node, f"pod {pod.key}: {fenced}", snapshot=snapshot,
                        ledger=ledger)
    ledger.mark_bind_requested(pod_uid, node, now=now, ttl=settings.inflight_ttl)
    if gang is None:
        return BindDecision(BindOutcome.BIND, f"pod {pod.key} is not in a gang",
                            release=((pod_uid, node),))
    if admitted:
        return BindDecision(BindOutcome.BIND, f"gang {gang.key} is already admitted", gang.key,
                            release=((pod_uid, node),))
    ledger.arrive(gang.key, pod_uid, node, now=now)
    ledger.progress(gang.key, pod_uid, now=now, ttl=settings.plan_ttl)
    lost = lost_node(gang.key, snapshot=snapshot, ledger=ledger)
    if lost is not None:
        # Releasing now would bind a held member to a node that is gone and leave the gang
        # short of its minimum: fail the gang's held members whole; it is planned again.
        return withdraw(gang.key, ledger=ledger, reason=lost)
    if gang.last_stage > 0:
        return _staged_barrier(gang, pod_uid, snapshot=snapshot, ledger=ledger, now=now,
                               settings=settings)
    reached = gang_reached(gang, snapshot, ledger, gpu=settings.gpu_resource)
    if reached >= gang.min_member:
        crowded = _held_without_room(gang.key, pod_uid, snapshot=snapshot, ledger=ledger,
                                     gpu=settings.gpu_resource)
        if crowded is not None:
            # Something took a held member's room while it waited (a pod bound by another
            # scheduler or by hand): releasing would oversubscribe that node.
            return withdraw(gang.key, ledger=ledger, reason=crowded)
        released = ledger.admit(gang.key, now=now)
        return BindDecision(BindOutcome.BIND,
                            f"gang {gang.key}: {reached} of minimum {gang.min_member} at bind; "
                            "bound whole", gang.key, release=released)
    return BindDecision(BindOutcome.WAIT,
                        f"gang {gang.key}: {reached} of minimum {gang.min_member} at bind; "
                        f"waiting up to {settings.bind_timeout:g}s for the next", gang.key)


def _stage_reached(gang: Gang, stage: int, snapshot: ClusterSnapshot, ledger: Ledger, *,
                   gpu: str) -> int:
    """Members of ``stage`` bound or at bind."""
    inflight = ledger.in_flight()
    count = 0
    for uid in index_of(snapshot, gpu=gpu).gang_pods.get(gang.key, ()):
        pod = snapshot.pods[uid]
        if gang.stage_of(snapshot.memberships[uid].role) != stage:
            continue
        if pod.holds_resources or (pod.node_name is None and uid in inflight):
            count += 1
    return count


def _staged_barrier(gang: Gang, pod_uid: str, *, snapshot: ClusterSnapshot, ledger: Ledger,
                    now: float, settings: CoreSettings) -> BindDecision:
    """The barrier of a gang whose operator creates its pods in stages: the whole gang was
    planned (every stage's capacity is held by its plan), and each stage is released as soon
    as its own minimum has reached bind; the plan then holds the next stages' capacity for
    ``stage_ttl`` while their pods are created."""
    gpu = settings.gpu_resource
    stage = ledger.admitted_stage(gang.key) + 1
    released: list[tuple[str, NodeName]] = []
    notes = []
    released_stages: list[str] = []
    while stage <= gang.last_stage:
        reached, need = _stage_reached(gang, stage, snapshot, ledger, gpu=gpu), \
            gang.stage_minimum(stage)
        if reached < need:
            break
        crowded = _held_without_room(gang.key, pod_uid, snapshot=snapshot, ledger=ledger,
                                     gpu=gpu)
        if crowded is not None:
            return withdraw(gang.key, ledger=ledger, reason=crowded)
        later = frozenset(u for u in ledger.held(gang.key)
                          if gang.stage_of(snapshot.memberships[u].role) > stage)
        released += ledger.admit(gang.key, now=now, stage=stage, keep=later)
        notes.append(f"stage {stage} ({_roles(gang, stage)}) {reached} of {need} at bind")
        released_stages.append(str(stage))
        stage += 1
    if notes:
        if stage <= gang.last_stage:
            # The next stage's pods are created once this one is Ready: hold its capacity.
            ledger.extend(gang.key, deadline=now + settings.stage_ttl)
            notes.append(f"holding stage {stage} ({_roles(gang, stage)}) for up to "
                         f"{settings.stage_ttl:g}s while its pods are created")
        return BindDecision(BindOutcome.BIND, f"gang {gang.key}: {'; '.join(notes)}; "
                            f"{'stages' if len(released_stages) > 1 else 'stage'} "
                            f"{', '.join(released_stages)} bound whole",
                            gang.key, release=tuple(released))
    reached = _stage_reached(gang, stage, snapshot, ledger, gpu=gpu)
    return BindDecision(BindOutcome.WAIT,
                        f"gang {gang.key}: stage {stage} ({_roles(gang, stage)}) {reached} of "
                        f"{gang.stage_minimum(stage)} at bind; waiting up to "
                        f"{settings.bind_timeout:g}s for the next", gang.key)


def _roles(gang: Gang, stage: int) -> str:
    return ", ".join(m.role for m in gang.members if m.stage == stage)


def _no_room(
    pod: PodInfo, gang: Gang | None, node: NodeName, lack: str, *, snapshot: ClusterSnapshot,
    ledger: Ledger,
) -> BindDecision:
    """Refuse a bind the node has no room for; the pod holds nothing afterwards.

    If the pod's gang has a slot of its role open on the node, the plan no longer holds
    (something took the slot behind Muster's back): it ends, so the next member's filter plans
    the rest of the gang again around the members already held at the barrier. A member sent
    where its own gang's members already fill the role's slots (kube-scheduler may pick one
    planned node for two members it filtered before either bound) found the node's other room
    reserved for someone else, as planned: its gang's plan still holds its open slots, which
    its filter offers it next time.
    """
    ledger.forget_pod(pod.uid)
    if gang is None:
        return BindDecision(BindOutcome.REJECT, lack)
    plan = ledger.plan_for(gang.key)
    role = snapshot.memberships[pod.uid].role
    if plan is None or plan.count(node, role) <= 0:
        return BindDecision(BindOutcome.REJECT, lack, gang.key)
    if slot_filled(gang.key, node, role, plan, snapshot=snapshot, ledger=ledger):
        lack += (f"; gang {gang.key}'s {role} slots on {node} are filled by its other members, "
                 "and its plan keeps the open ones")
    else:
        ledger.drop_plan(gang.key)
        lack += f"; gang {gang.key} is planned again"
    return BindDecision(BindOutcome.REJECT, lack, gang.key)


def slot_filled(gang: GangKey, node: NodeName, role: str, plan: Plan, *,
                snapshot: ClusterSnapshot, ledger: Ledger) -> bool:
    """Whether the gang's members bound or in flight on ``node`` already fill ``plan``'s slots
    of ``role`` there: another member sent there is beyond the plan on that node, and the room
    it lacks was never its gang's."""
    return ledger.placed(gang, snapshot).get((node, role), 0) >= plan.count(node, role)


def _fenced(gang: Gang, pod_uid: str, node: NodeName, *, snapshot: ClusterSnapshot,
            ledger: Ledger, gpu: str) -> str | None:
    """Why ``node`` is closed to ``gang`` by exclusivity since its filter passed it (a plan
    expired meanwhile and an exclusive gang took the domain, or, for an exclusive gang,
    another gang came into the domain); ``None`` when it is open."""
    fenced, taken = exclusive_fences(gang, snapshot, occupants(snapshot, ledger, gpu=gpu))
    if node in fenced:
        return f"node {node} is in a domain an exclusive gang holds"
    key = exclusive_key(gang, snapshot.memberships[pod_uid].role)
    value = None if key is None else snapshot.nodes[node].label(key)
    if key is not None and value is not None and value in taken:
        return (f"node {node} is in {key} {value}, which gang {gang.key} must hold alone, "
                f"and {taken[value]}")
    return None


def lost_node(gang: GangKey, *, snapshot: ClusterSnapshot, ledger: Ledger) -> str | None:
    """Why the gang's barrier cannot open as it stands: a member is held there for a node the
    cluster no longer has (``None`` when every held member's node is still there)."""
    nodes = snapshot.nodes
    for uid, node in ledger.held(gang).items():
        if node not in nodes:
            pod = snapshot.pods.get(uid)
            who = pod.key if pod is not None else uid
            return (f"gang {gang}: node {node} was deleted while member {who} was held at "
                    "the bind barrier; the gang is planned again")
    return None


def _held_without_room(gang: GangKey, arriving: str, *, snapshot: ClusterSnapshot,
                       ledger: Ledger, gpu: str) -> str | None:
    """Why a held member may not be released where it waits: its node has no room for it any
    more (``None`` when every held member still fits). ``arriving`` was just checked."""
    # Every held member is in flight on its node, so a node whose free capacity (in flight
    # and other gangs' reservations charged) is not oversubscribed holds all of them: only
    # members on the others are checked one by one.
    free = free_capacity(snapshot, ledger, gpu=gpu, exclude=gang)
    for uid, node in sorted(ledger.held(gang).items()):
        pod = snapshot.pods.get(uid)
        cap = free.get(node)
        if uid == arriving or pod is None or (cap is not None and not cap.oversubscribed()):
            continue
        lack = lack_of_room(pod, node, snapshot=snapshot, ledger=ledger, gpu=gpu, exclude=gang,
                            prebound=True)
        if lack is not None:
            return (f"gang {gang}: held member {lack.removeprefix('pod ')}; the gang is "
                    "planned again")
    return None


def barriers_on_lost_nodes(*, snapshot: ClusterSnapshot, ledger: Ledger) -> list[
        tuple[GangKey, str]]:
    """Gangs held at the barrier with a member on a deleted node, and why (the server
    withdraws each when the cluster changes, not only when the next member arrives)."""
    found = []
    for gang, _ in ledger.barriers():
        lost = lost_node(gang, snapshot=snapshot, ledger=ledger)
        if lost is not None:
            found.append((gang, lost))
    return found


def barrier_expired(
    gang: GangKey, *, ledger: Ledger, now: float, settings: CoreSettings
) -> bool:
    started = ledger.barrier_started(gang)
    return started is not None and now >= started + settings.bind_timeout


def expired_barriers(*, ledger: Ledger, now: float, settings: CoreSettings) -> list[GangKey]:
    """Gangs whose members have waited at bind too long (the server withdraws each)."""
    return [g for g, _ in ledger.barriers()
            if barrier_expired(g, ledger=ledger, now=now, settings=settings)]


def withdraw(
    gang: GangKey, *, ledger: Ledger, also: tuple[str, NodeName] | None = None,
    reason: str | None = None,
) -> BindDecision:
    """Fail every member held at the barrier and drop the gang's plan, so its GPUs go to
    others instead of being held by a gang that cannot complete (scheduler-plugins#713)."""
    held = ledger.withdraw(gang)
    if also is not None:
        ledger.forget_pod(also[0])
        held = tuple(sorted({*held, also}))
    why = reason or f"gang {gang}: the minimum did not reach bind in time"
    return BindDecision(BindOutcome.REJECT, f"{why}; failing {len(held)} held member(s)", gang,
                        rejected=held)
