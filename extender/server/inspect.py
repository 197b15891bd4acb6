"""``GET /inspect/gangs``: every gang Muster serves, as JSON a person (or jq) can read.

Pure: built from a snapshot, the ledger and the session's last reasons and holders; the
caller holds the lock that guards the ledger. A gang counts only when one of its pods (or,
before any exists, its pod templates) names a scheduler this Muster serves: a JobSet left to
a scheduler without the extender would otherwise show as "waiting" forever.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from extender.core.decide.holders import Holder
from extender.core.gang.ledger import Ledger
from extender.core.gang.lifecycle import observed_state
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, GangKey, PodInfo, PodPhase, PodShape

DEFAULT_SCHEDULER = "default-scheduler"
"""What a pod without ``schedulerName`` gets (the API server's default)."""


def _gpus(shape: PodShape) -> float:
    return float(shape.gpus)  # whole devices


def served(gang: Gang, pods: Sequence[PodInfo], snapshot: ClusterSnapshot,
           names: Collection[str] | None) -> bool:
    """Whether ``gang`` is scheduled by one of the profiles ``names`` (``None``: any)."""
    if names is None:
        return True
    if pods:
        return any(p.scheduler_name in names for p in pods)
    tree = snapshot.workloads.get(gang.workload.key)
    roles = {m.role for m in gang.members}
    for role in tree.roles if tree is not None else ():
        if role.name not in roles:
            continue
        spec = role.template.get("spec")
        name = spec.get("schedulerName") if isinstance(spec, Mapping) else None
        if (name or DEFAULT_SCHEDULER) in names:
            return True
    return False


def describe_gangs(snapshot: ClusterSnapshot, ledger: Ledger, *,
                   last_reason: Mapping[GangKey, str],
                   waiting: Mapping[str, GangKey | None],
                   holders: Mapping[GangKey, Sequence[Holder]] | None = None,
                   scheduler_names: Collection[str] | None = None,
                   wall_offset: float = 0.0) -> list[dict[str, Any]]:
    """The gangs as ``/inspect/gangs`` shows them; ``wall_offset`` (the wall clock less the
    session's) turns a deadline into the wall-clock time a person reads."""
    out = []
    held: dict[GangKey | None, int] = {}
    for gang_key in waiting.values():
        held[gang_key] = held.get(gang_key, 0) + 1
    for key, gang in sorted(snapshot.gangs.items()):
        pods = snapshot.pods_of_gang(key)
        if not served(gang, pods, snapshot, scheduler_names):
            continue
        bound = sum(1 for p in pods if p.holds_resources)
        reservation = ledger.reservation(key)
        plan = reservation.plan if reservation is not None else None
        reserved = 0.0
        if plan is not None:
            shapes = dict(plan.shapes)
            for _node, role, count in plan.slots:
                member = gang.member(role)
                shape = shapes.get(role) or (member.shape if member else None)
                reserved += count * (_gpus(shape) if shape is not None else 0.0)
            reserved = max(0.0, reserved - sum(
                _gpus(p.shape) for p in pods if p.holds_resources))
        finished = sum(1 for p in pods if p.phase is PodPhase.SUCCEEDED)
        state = observed_state(ledger.record(key), min_member=gang.min_member, bound=bound,
                               finished=finished, held_at_bind=held.get(key, 0))
        out.append({
            "gang": key,
            "workload": gang.workload.key,
            "minMember": gang.min_member,
            "pods": gang.pods,
            "bound": bound,
            "succeeded": finished,
            "heldAtBind": held.get(key, 0),
            "state": state.value,
            "members": [
                {"pod": p.key, "uid": p.uid, "role": snapshot.memberships[p.uid].role,
                 "node": p.node_name, "phase": p.phase.value}
                for p in pods
            ],
            "plan": [{"node": n, "role": r, "pods": c} for n, r, c in plan.slots]
                    if plan is not None else None,
            "reservationDeadline": (reservation.deadline + wall_offset
                                    if reservation is not None else None),
            "reservedGpus": reserved,
            "lastReason": last_reason.get(key, ""),
            "heldBy": [h.as_dict() for h in (holders or {}).get(key, ())],
            "created": gang.created,
        })
        if gang.last_stage:
            # Created in stages: which stage the barrier released last, and each stage's
            # members (a later one is held in the plan until its pods appear and bind).
            released = ledger.admitted_stage(key)
            out[-1]["releasedStage"] = released
            out[-1]["stages"] = [
                {"stage": s, "roles": [m.role for m in gang.members if m.stage == s],
                 "minimum": gang.stage_minimum(s),
                 "bound": sum(1 for p in pods if p.holds_resources
                              and gang.stage_of(snapshot.memberships[p.uid].role) == s),
                 "state": "released" if s <= released else
                          "held" if plan is not None else "waiting"}
                for s in range(gang.last_stage + 1)]
    return out
