"""The gang minimums KAI Scheduler derives from a Karta, for comparison with Muster's.

KAI's Karta pod grouper sets a PodGroup's ``MinAvailable`` with ``CalculateSubtreeScale``: per
component the effective scale is ``minReplicas`` when above 0, else ``replicas``, else 0; a
leaf gives the sum over its instances; a parent gives its own scale times the sum of its
children's (its own alone when the children sum to 0, the children's when its own is 0).
Muster does not schedule by these numbers (it counts the pods a gang holds); they are computed
here so ``docs/compat.md`` can show where the arithmetic and the pods disagree.
"""

from __future__ import annotations

from extender.core.karta.compile import KartaInstances, as_count, gang_plan
from extender.core.karta.model import Component, Karta
from extender.core.workloads.descriptor import GangPolicy

__all__ = ["kai_gang_minimums", "subtree_scale"]


def _effective(c: Component, obj: object) -> list[int]:
    replicas = c.replicas.outputs(obj) if c.replicas is not None else []
    minimum = c.min_replicas.outputs(obj) if c.min_replicas is not None else []
    count = max(len(replicas), len(minimum), 1 if c.replicas or c.min_replicas else 0)
    out = []
    for i in range(count):
        low = as_count(minimum[i] if i < len(minimum) else None, c.name)
        rep = as_count(replicas[i] if i < len(replicas) else None, c.name)
        out.append(low if low is not None and low > 0 else rep if rep is not None else 0)
    return out


def subtree_scale(karta: Karta, name: str, obj: object, *, instance: int | None = None) -> int:
    """KAI's ``CalculateSubtreeScale`` of component ``name`` (one instance, or all)."""
    scales = _effective(karta.component(name), obj)
    own = sum(scales) if instance is None else (scales[instance] if instance < len(scales)
                                                else 0)
    children = karta.children(name)
    if not children:
        return own
    below = sum(subtree_scale(karta, c.name, obj) for c in children)
    if below == 0:
        return own
    if own == 0:
        return below
    return own * below


def kai_gang_minimums(karta: Karta, obj: object) -> list[int]:
    """The ``MinAvailable`` of each PodGroup KAI would make for ``obj``, sorted.

    Per-instance gangs (a JobSet replicatedJob) give one figure per instance; per-replica gangs
    (an LWS group) one figure per replica, all equal; a workload gang one figure.
    ``podGroup`` (v0.2) reports the sum of its subgroups' minimums.
    """
    policy, members, _, _ = gang_plan(karta)
    if policy is GangPolicy.NONE:
        return []
    listed = ([m.component for g in karta.pod_groups for m in g.members] if karta.pod_groups
              else [s.component for s in karta.sub_groups] or [karta.root.name])
    if policy is GangPolicy.ROLE:
        out: list[int] = []
        for name in dict.fromkeys(listed):
            count = len(_effective(karta.component(name), obj))
            out.extend(subtree_scale(karta, name, obj, instance=i) for i in range(count))
        return sorted(out)
    total = sum(subtree_scale(karta, name, obj) for name in dict.fromkeys(listed))
    if policy is GangPolicy.REPLICA:
        pods = [c for c in karta.components if c.name in members]
        rows = KartaInstances(pods[0], in_gang=True, filters=(), replica_peers=tuple(pods)
                              ).find(obj) if pods else []
        groups = rows[0]["replicas"] if rows and isinstance(rows[0], dict) else 1
        return [total] * int(groups)
    return [total]
