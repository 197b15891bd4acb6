"""A resolved workload and its pods as plain data: the JSON/YAML ``describe`` prints, and what
its tables and tree are drawn from. GPUs count ``nvidia.com/gpu``.

The keys scripts rely on are always present: ``kind, apiVersion, name, namespace, descriptor,
descriptorFormat, phase, roles[] {name, replicas, pods, gpusPerPod, gpus}, gangs[] {name,
minMember, pods}, totals {pods, gpus, cpu, memory}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.cli.workloads import Found, PodView
from extender.core.model.quantity import format_quantity
from extender.core.model.resources import CPU, MEMORY, Resources
from extender.core.model.values import Gang, Phase


def cpu_text(amount: int) -> str:
    return format_quantity(amount)


def memory_text(amount: int) -> str:
    return format_quantity(amount, binary=True)


def _condition(raw: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    status = raw.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for cond in conditions if isinstance(conditions, list) else []:
        if isinstance(cond, Mapping) and cond.get("type") == kind:
            return cond
    return None


def shown_phase(found: Found) -> Phase:
    """The workload's phase as its descriptor reads its status, but never Running while pods
    of it are known and none is bound: an operator's status may run ahead of the pods (a Job
    counts pending and scheduling-gated pods as active)."""
    phase = found.tree.phase
    if phase is Phase.RUNNING and found.pods and not any(v.info.node_name for v in found.pods):
        return Phase.INITIALIZING
    return phase


def pod_ready(raw: Mapping[str, Any]) -> bool:
    cond = _condition(raw, "Ready")
    return cond is not None and cond.get("status") == "True"


def pod_status(raw: Mapping[str, Any]) -> tuple[str, str]:
    """``(phase, reason)`` as a person wants it: ``Pending``/``Unschedulable`` from the
    PodScheduled condition, a waiting container's reason, ``Terminating`` while deleted."""
    meta = raw.get("metadata")
    status = raw.get("status")
    status = status if isinstance(status, Mapping) else {}
    phase = str(status.get("phase") or "Pending")
    if isinstance(meta, Mapping) and meta.get("deletionTimestamp"):
        return phase, "Terminating"
    if status.get("reason"):
        return phase, str(status["reason"])
    scheduled = _condition(raw, "PodScheduled")
    if scheduled is not None and scheduled.get("status") == "False":
        return phase, str(scheduled.get("reason") or "NotScheduled")
    waiting = status.get("containerStatuses")
    for container in waiting if isinstance(waiting, list) else []:
        state = container.get("state") if isinstance(container, Mapping) else None
        reason = (state.get("waiting") or {}).get("reason") if isinstance(state, Mapping) else None
        if reason:
            return phase, str(reason)
    return phase, ""


def status_text(phase: str, reason: str) -> str:
    return f"{phase} ({reason})" if reason else phase


def _pod_data(view: PodView) -> dict[str, Any]:
    phase, reason = pod_status(view.raw)
    return {
        "name": view.info.name,
        "role": view.membership.role,
        "replica": view.membership.replica,
        "gang": view.membership.gang,
        "phase": phase,
        "reason": reason,
        "ready": pod_ready(view.raw),
        "node": view.info.node_name,
        "gpus": view.info.shape.gpus,
    }


def _amounts(requests: Resources) -> tuple[str, str]:
    return cpu_text(requests.get(CPU)), memory_text(requests.get(MEMORY))


def workload_data(found: Found) -> dict[str, Any]:
    """Everything ``describe`` shows, as JSON-ready data."""
    tree = found.tree
    pods = [_pod_data(v) for v in found.pods]
    names = {r.name for r in tree.roles}
    roles = []
    for role in tree.roles:
        mine = [p for p in pods if p["role"] == role.name]
        cpu, memory = _amounts(role.shape.requests)
        total_cpu, total_memory = _amounts(role.shape.requests.scale(role.pods))
        roles.append({
            "name": role.name,
            "replicas": role.replicas,
            "podsPerReplica": role.pods_per_replica,
            "pods": role.pods,
            "minPods": role.min_pods,
            "ready": sum(1 for p in mine if p["ready"]),
            "gpusPerPod": role.shape.gpus,
            "gpus": role.gpus,
            "cpuPerPod": cpu,
            "memoryPerPod": memory,
            "cpu": total_cpu,
            "memory": total_memory,
            "observed": mine,
        })
    cpu, memory = _amounts(tree.requests)
    return {
        "kind": tree.ref.kind,
        "apiVersion": tree.ref.api_version,
        "name": tree.ref.name,
        "namespace": tree.ref.namespace,
        "descriptor": tree.descriptor,
        "descriptorFormat": found.origin.format,
        "descriptorSource": found.origin.source,
        "phase": str(shown_phase(found)),
        "roles": roles,
        "gangs": [_gang_view(g) for g in tree.gangs],
        "order": [{"before": b, "after": a} for b, a in tree.edges],
        "totals": {
            "pods": tree.pods,
            "gpus": tree.gpus,
            "cpu": cpu,
            "memory": memory,
            "readyPods": sum(1 for p in pods if p["ready"]),
            "observedPods": len(pods),
        },
        "unassigned": [p for p in pods if p["role"] not in names],
    }


def _gang_view(g: Gang) -> dict[str, Any]:
    """A gang as ``describe -o json`` shows it; ``topology`` only when it keeps to a domain."""
    view: dict[str, Any] = {"name": g.key, "minMember": g.min_member, "pods": g.pods,
                            "gpus": g.gpus, "roles": {m.role: m.count for m in g.members}}
    if g.topology is not None:
        view["topology"] = {"key": g.topology.key, "required": g.topology.required,
                            "exclusive": g.topology.exclusive}
    if g.subgroups is not None:
        # Each subgroup (a JobSet Job) alone in a domain of its own.
        view["subgroupTopology"] = {"key": g.subgroups.key, "subgroups": g.subgroups.count,
                                    "exclusive": True}
    if g.last_stage:
        # Pods its operator creates in stages: the whole gang is held, each stage released
        # as it reaches bind.
        view["stages"] = [{"stage": s, "roles": [m.role for m in g.members if m.stage == s],
                           "minimum": g.stage_minimum(s)} for s in range(g.last_stage + 1)]
    return view
