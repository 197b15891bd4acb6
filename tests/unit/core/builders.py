"""Small builders for core values: nodes, pods, gangs and snapshots, with readable defaults."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from extender.core.model.notices import PodRef
from extender.core.model.resources import Resources
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import (
    Gang,
    GangKey,
    GangMember,
    Membership,
    NodeInfo,
    NodeName,
    Phase,
    PodInfo,
    PodPhase,
    PodShape,
    Role,
    Taint,
    Toleration,
    TopologyConstraint,
    WorkloadRef,
    WorkloadTree,
    freeze_labels,
)


def make_node(
    name: str = "n1", *, gpus: int = 8, cpu: int = 64, memory_gi: int = 512,
    labels: dict[str, str] | None = None, taints: Sequence[Taint] = (),
    unschedulable: bool = False, max_pods: int = 110,
) -> NodeInfo:
    alloc = {"cpu": cpu * 1000, "memory": memory_gi * 2**30 * 1000, "pods": max_pods * 1000}
    if gpus:
        alloc["nvidia.com/gpu"] = gpus * 1000
    return NodeInfo(name=NodeName(name), allocatable=Resources(alloc),
                    labels=freeze_labels(labels), taints=tuple(taints),
                    unschedulable=unschedulable)


def make_shape(
    *, gpus: int = 0, cpu: int = 1, memory_gi: int = 0, share: int = 0,
    selector: dict[str, str] | None = None, tolerations: Sequence[Toleration] = (),
    priority: int = 0,
) -> PodShape:
    req = {"cpu": cpu * 1000}
    if memory_gi:
        req["memory"] = memory_gi * 2**30 * 1000
    if gpus:
        req["nvidia.com/gpu"] = gpus * 1000
    return PodShape(requests=Resources(req), gpu_share=share,
                    node_selector=freeze_labels(selector), tolerations=tuple(tolerations),
                    priority=priority)


def make_pod(
    name: str, *, shape: PodShape | None = None, node: str | None = None, ns: str = "ml",
    phase: PodPhase | None = None, devices: tuple[int, ...] = (),
) -> PodInfo:
    return PodInfo(
        uid=f"uid-{ns}-{name}", namespace=ns, name=name, shape=shape or make_shape(),
        node_name=NodeName(node) if node else None,
        phase=phase or (PodPhase.RUNNING if node else PodPhase.PENDING),
        gpu_devices=devices,
    )


def make_gang(
    name: str = "llama", *, roles: Iterable[tuple[str, int, PodShape]] = (),
    minimum: dict[str, int] | None = None, ns: str = "ml", priority: int = 0,
    created: float = 0.0, topology: TopologyConstraint | None = None,
    stages: dict[str, int] | None = None,
) -> Gang:
    minimum = minimum or {}
    stages = stages or {}
    members = tuple(
        GangMember(role=r, count=c, min_count=minimum.get(r, c), shape=s,
                   stage=stages.get(r, 0)) for r, c, s in roles
    )
    return Gang(key=GangKey(f"{ns}/{name}"),
                workload=WorkloadRef("jobset.x-k8s.io/v1alpha2", "JobSet", ns, name),
                members=members, topology=topology, priority=priority, created=created)


def tree_of(gang: Gang, *, extra_gangs: Sequence[Gang] = ()) -> WorkloadTree:
    gangs = (gang, *extra_gangs)
    roles = tuple(
        Role(name=m.role, replicas=m.count, pods_per_replica=1, shape=m.shape,
             min_replicas=m.min_count)
        for g in gangs for m in g.members
    )
    return WorkloadTree(ref=gang.workload, descriptor="test", phase=Phase.INITIALIZING,
                        roles=roles, gangs=gangs)


def gang_pods(gang: Gang, *, bound: dict[str, str] | None = None) -> tuple[
    list[PodInfo], dict[str, Membership]
]:
    """One pod per member slot, named ``<gang>-<role>-<i>``; ``bound`` maps names to nodes."""
    bound = bound or {}
    pods, members = [], {}
    ns, name = gang.key.split("/", 1)
    for m in gang.members:
        for i in range(m.count):
            pod_name = f"{name}-{m.role}-{i}"
            pod = make_pod(pod_name, shape=m.shape, node=bound.get(pod_name), ns=ns)
            pods.append(pod)
            members[pod.uid] = Membership(workload=gang.workload, role=m.role, replica=i,
                                          gang=gang.key)
    return pods, members


def make_snapshot(
    nodes: Iterable[NodeInfo], *, gangs: Sequence[Gang] = (), pods: Iterable[PodInfo] = (),
    bound: dict[str, str] | None = None,
) -> ClusterSnapshot:
    """A snapshot with every gang's pods (pending unless named in ``bound``) plus ``pods``."""
    all_pods = list(pods)
    memberships: dict[str, Membership] = {}
    trees = []
    for gang in gangs:
        gp, gm = gang_pods(gang, bound=bound)
        all_pods.extend(gp)
        memberships.update(gm)
        trees.append(tree_of(gang))
    return ClusterSnapshot.of(nodes, all_pods, trees, memberships)


def uid(gang: Gang, role: str, i: int) -> str:
    ns, name = gang.key.split("/", 1)
    return f"uid-{ns}-{name}-{role}-{i}"


def pod_ref(snapshot: ClusterSnapshot, pod_uid: str) -> PodRef:
    """The reference a bind request carries for the snapshot's pod ``pod_uid``."""
    pod = snapshot.pods[pod_uid]
    return PodRef(pod.namespace, pod.name, pod.uid)
