"""The one port every decision reads: an immutable picture of the cluster.

Three sources produce it (live informers, a snapshot file, the simulator's in-memory cluster);
the core never knows which. Build it with :meth:`ClusterSnapshot.of`, which indexes once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from extender.core.model.values import (
    Gang,
    GangKey,
    Membership,
    NodeInfo,
    NodeName,
    PodInfo,
    WorkloadRef,
    WorkloadTree,
)

_GANG_PODS = "pods by gang"
"""The :attr:`ClusterSnapshot.derived` key of :meth:`ClusterSnapshot.pods_of_gang`'s groups."""


@dataclass(frozen=True)
class ClusterSnapshot:
    nodes: Mapping[NodeName, NodeInfo]
    pods: Mapping[str, PodInfo]
    """Pods by UID."""
    workloads: Mapping[str, WorkloadTree] = field(default_factory=dict)
    """Resolved workloads by :attr:`WorkloadRef.key`."""
    memberships: Mapping[str, Membership] = field(default_factory=dict)
    """Pod UID -> where the pod belongs; pods absent here are not part of any workload."""
    gangs: Mapping[GangKey, Gang] = field(default_factory=dict)
    """Every gang of every resolved workload."""
    revision: int = 0
    """Increases whenever the source changes; lets callers cache derived values."""
    unresolved: Mapping[str, str] = field(default_factory=dict)
    """Pod UID -> why its workload is not known yet (an owner not observed so far, or refused).
    Such a pod may belong to a gang: deciding for it as a lone pod could bind part of one."""
    refused: Mapping[str, tuple[WorkloadRef, str]] = field(default_factory=dict)
    """Workloads of a described kind that could not be resolved (beyond the limits, fields of
    the wrong type...), by :attr:`WorkloadRef.key`, with why. Their pods wait, saying so."""
    derived: dict[str, object] = field(default_factory=dict, compare=False, repr=False)
    """Values derived from this snapshot once, by the core or by the source that built it
    (base capacity per node, capacity with nothing placed), as kube-scheduler's ``Snapshot``
    keeps its derived node lists: a snapshot never changes, so neither do they. Read and
    written only through :mod:`extender.core.gang.capacity` and :meth:`pods_of_gang`."""

    @classmethod
    def of(
        cls,
        nodes: Iterable[NodeInfo],
        pods: Iterable[PodInfo],
        workloads: Iterable[WorkloadTree] = (),
        memberships: Mapping[str, Membership] | None = None,
        *,
        revision: int = 0,
        unresolved: Mapping[str, str] | None = None,
        refused: Mapping[str, tuple[WorkloadRef, str]] | None = None,
    ) -> ClusterSnapshot:
        trees = {w.ref.key: w for w in workloads}
        gangs = {g.key: g for w in trees.values() for g in w.gangs}
        return cls(
            nodes=MappingProxyType({n.name: n for n in sorted(nodes, key=lambda n: n.name)}),
            pods=MappingProxyType({p.uid: p for p in pods}),
            workloads=MappingProxyType(trees),
            memberships=MappingProxyType(dict(memberships or {})),
            gangs=MappingProxyType(dict(sorted(gangs.items()))),
            revision=revision,
            unresolved=MappingProxyType(dict(unresolved or {})),
            refused=MappingProxyType(dict(sorted((refused or {}).items()))),
        )

    def gang_of(self, pod_uid: str) -> Gang | None:
        member = self.memberships.get(pod_uid)
        if member is None or member.gang is None:
            return None
        return self.gangs.get(member.gang)

    def pods_of_gang(self, key: GangKey) -> list[PodInfo]:
        """The gang's pods that exist now, sorted by name for determinism.

        Every gang's pods are grouped in one pass over the memberships, the first time any
        gang's are asked for, and kept in :attr:`derived`: describing every gang is then one
        pass, not one per gang."""
        found = self.derived.get(_GANG_PODS)
        if isinstance(found, dict):
            groups: dict[GangKey, list[PodInfo]] = found
        else:
            groups = {}
            for uid, member in self.memberships.items():
                if member.gang is not None and uid in self.pods:
                    groups.setdefault(member.gang, []).append(self.pods[uid])
            self.derived[_GANG_PODS] = groups
        return sorted(groups.get(key, ()), key=lambda p: p.key)
