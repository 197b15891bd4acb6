"""``GET /inspect/gangs``: every gang Muster knows, as JSON a person (or jq) can read.

Pure: built from a snapshot, the ledger and the service's last reasons; the caller holds the
lock that guards the ledger.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.core.gang.ledger import Ledger
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import GangKey, PodShape


def _gpus(shape: PodShape) -> float:
    return float(shape.gpus)  # whole devices


def describe_gangs(snapshot: ClusterSnapshot, ledger: Ledger, *,
                   last_reason: Mapping[GangKey, str],
                   waiting: Mapping[str, GangKey | None]) -> list[dict[str, Any]]:
    out = []
    held: dict[GangKey | None, int] = {}
    for gang_key in waiting.values():
        held[gang_key] = held.get(gang_key, 0) + 1
    for key, gang in sorted(snapshot.gangs.items()):
        pods = snapshot.pods_of_gang(key)
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
        if bound >= gang.min_member:
            state = "bound"
        elif plan is not None and not held.get(key):
            state = "planned"
        else:
            state = "waiting"
        out.append({
            "gang": key,
            "workload": gang.workload.key,
            "minMember": gang.min_member,
            "pods": gang.pods,
            "bound": bound,
            "heldAtBind": held.get(key, 0),
            "state": state,
            "members": [
                {"pod": p.key, "uid": p.uid, "role": snapshot.memberships[p.uid].role,
                 "node": p.node_name, "phase": p.phase.value}
                for p in pods
            ],
            "plan": [{"node": n, "role": r, "pods": c} for n, r, c in plan.slots]
                    if plan is not None else None,
            "reservationDeadline": reservation.deadline if reservation is not None else None,
            "reservedGpus": reserved,
            "lastReason": last_reason.get(key, ""),
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
