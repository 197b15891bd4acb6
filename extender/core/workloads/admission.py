"""Whether a pod being created should wait behind Muster's scheduling gate.

The admission webhook (:mod:`extender.server.admission`) asks this for every new pod. A pod is
gated only when Muster will later remove the gate itself (:mod:`extender.core.decide.gating`):

- its ``schedulerName`` is one this Muster serves (no other scheduler's pod waits on Muster);
- it is not bound already (the API server refuses gates beside ``spec.nodeName``);
- it resolves to a gang through the descriptors and the workloads Muster holds, or its owner
  chain stops at an object of a watched kind Muster has not observed yet (informers lag the
  operator that just created the owner): such a pod is ungated as soon as it resolves to no
  gang, or after ``gate_bound`` seconds if it never resolves.

A pod of no gang, of a refused workload, or of a kind no descriptor covers is never gated.

Must never: read a clock, do I/O, or know about capacity and plans.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.core.model.objects import ObjectError, pod_from_api
from extender.core.model.values import GangKey, WorkloadRef, WorkloadTree
from extender.core.workloads.catalog import Catalog
from extender.core.workloads.cluster import read_tree
from extender.core.workloads.descriptor import GangPolicy
from extender.core.workloads.membership import (
    ObjectIndex,
    find_membership,
    pending_owner,
    refused_owner,
)
from extender.core.workloads.workload import DEFAULT_LIMITS, WorkloadLimits

GATE = "muster.dev/gang"
"""The name of Muster's scheduling gate."""


@dataclass(frozen=True, slots=True)
class GateVerdict:
    gate: bool
    """Add the gate."""
    reason: str
    gang: GangKey | None = None
    pending: bool = False
    """Gated although no gang is known yet (an owner not observed)."""


def gate_verdict(
    raw: Mapping[str, Any], *, objects: ObjectIndex, catalog: Catalog,
    workloads: Mapping[str, WorkloadTree],
    refused: Mapping[str, tuple[WorkloadRef, str]] | None = None,
    scheduler_names: tuple[str, ...], gate: str = GATE,
    limits: WorkloadLimits = DEFAULT_LIMITS,
) -> GateVerdict:
    """The verdict for the pod ``raw`` as the API server is about to create it (it may have
    no name yet, only ``generateName``, and never a UID)."""
    meta = raw.get("metadata")
    meta = dict(meta) if isinstance(meta, Mapping) else {}
    if not meta.get("name"):
        # The name is generated after admission; resolution only needs one to exist.
        meta["name"] = f"{meta.get('generateName') or 'pod-'}(generated)"
    pod_obj = {"apiVersion": "v1", "kind": "Pod", **raw, "metadata": meta}
    try:
        pod = pod_from_api(pod_obj)
    except ObjectError as err:
        return GateVerdict(False, f"pod not readable: {err}")
    if pod.scheduler_name not in scheduler_names:
        return GateVerdict(False, f"schedulerName {pod.scheduler_name!r} is not served by "
                                  "this Muster")
    if pod.node_name is not None:
        return GateVerdict(False, "already bound (spec.nodeName is set)")
    if gate in pod.gates:
        return GateVerdict(False, "already gated")
    known: Mapping[str, WorkloadTree] = workloads
    if not pod.owners:
        own = read_tree(pod_obj, catalog, limits)
        if isinstance(own, WorkloadTree):
            known = {**workloads, own.ref.key: own}
    member = find_membership(pod, objects=objects, catalog=catalog, workloads=known)
    if member is not None:
        if member.gang is None:
            return GateVerdict(False, f"of {member.workload.key} but in no gang")
        return GateVerdict(True, f"member of gang {member.gang}", member.gang)
    why = refused_owner(pod, objects=objects, refused=refused or {})
    if why is not None:
        return GateVerdict(False, why)
    pending = pending_owner(pod, objects=objects, catalog=catalog)
    if pending is not None:
        return GateVerdict(True, f"may be a gang member: {pending}", pending=True)
    return GateVerdict(False, "not part of any described workload")


def may_join_a_gang(catalog: Catalog) -> str | None:
    """A CEL expression (a webhook ``matchCondition``) over the pod being created, false only
    for pods that cannot be in a gang of ``catalog``, so the API server does not call the
    webhook for them: pods with no owner reference and none of the descriptors' workload
    labels. Their own descriptor (``Pod``) has no gangs; a pod is found in a workload only
    through its owners or such a label (:func:`find_membership`). ``None`` when bare pods can
    be gangs (a ``Pod`` descriptor with gangs): then every pod may be.

    Computed from the catalog the webhook is installed with; a descriptor applied later with
    a new workload label for pods without owners is not in it, and such pods are created
    ungated, which filter and bind hold as strictly (gating only spares kube-scheduler)."""
    bare = catalog.for_api("v1", "Pod")
    if bare is not None and bare.gangs.policy is not GangPolicy.NONE:
        return None
    labels = sorted({d.pods.workload_label for d in catalog.descriptors
                     if d.pods.workload_label})
    owned = "has(object.metadata.ownerReferences)"
    if not labels:
        return owned
    listed = ", ".join(f"'{label}'" for label in labels)
    return (f"{owned} || (has(object.metadata.labels) && "
            f"[{listed}].exists(l, l in object.metadata.labels))")
