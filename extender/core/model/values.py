"""Values shared by every part of the core: nodes, pods, pod shapes, workloads, roles, gangs.

All are frozen dataclasses built once at the edge (from API objects, snapshot files or the
simulator) and never mutated. Nothing here does I/O or reads a clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NewType

from extender.core.model.errors import ModelError
from extender.core.model.resources import DEVICE_CLASS_PREFIX, EMPTY, UNCOUNTABLE_PREFIX, Resources

GangKey = NewType("GangKey", str)
"""``namespace/name`` of a gang, e.g. ``ml/llama``, ``ml/vllm/group-1``, ``ml/pcs/0/prefill-1``."""

NodeName = NewType("NodeName", str)

Labels = tuple[tuple[str, str], ...]
"""Labels as sorted ``(key, value)`` pairs, so that values stay hashable."""


class LabelError(ModelError):
    """A label, annotation or selector entry whose key or value is not a string."""


def freeze_labels(raw: Mapping[str, object] | None) -> Labels:
    """``raw`` as sorted pairs; like the API server (``map[string]string``), a key or value
    that is not a string is refused rather than turned into one with ``str()`` (which would
    also expand whatever a YAML alias stands for)."""
    out = []
    for k, v in (raw or {}).items():
        if not isinstance(k, str):
            raise LabelError(f"key {k!r:.40}: expected a string key, got {type(k).__name__}")
        if not isinstance(v, str):
            raise LabelError(f"{k}: expected a string value, got {type(v).__name__}")
        out.append((k, v))
    return tuple(sorted(out))


class Phase(StrEnum):
    """Common workload phases every descriptor maps its kind's status onto."""

    INITIALIZING = "Initializing"
    RUNNING = "Running"
    COMPLETED = "Completed"
    FAILED = "Failed"
    DEGRADED = "Degraded"
    SUSPENDED = "Suspended"
    UNDEFINED = "Undefined"


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = TaintEffect.NO_SCHEDULE.value


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # empty tolerates every effect


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """Requirements ANDed together; a pod's required affinity ORs several terms."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()  # only ``metadata.name`` exists


@dataclass(frozen=True, slots=True)
class TopologyConstraint:
    """Keep a gang inside one domain of a node label (a rack, an NVLink domain)."""

    key: str
    required: bool = True
    exclusive: bool = False
    """No other gang in the gang's domain while it holds it (LWS ``exclusive-topology``).
    Only a required constraint can be exclusive: a gang spread over domains holds none."""

    def __post_init__(self) -> None:
        if self.exclusive and not self.required:
            raise ValueError(f"topology {self.key}: only a required domain can be exclusive")


@dataclass(frozen=True, slots=True)
class SubgroupKind:
    """``copies`` subgroups made alike: each needs ``pods`` (``(role, count)``, sorted) in one
    domain. A JobSet replicatedJob's Jobs: each its leader pod and its followers."""

    name: str
    """Names the copies in reasons: copy ``j`` is ``<name>-<j>`` (a JobSet Job's index)."""
    pods: tuple[tuple[str, int], ...]
    copies: int
    values: tuple[str, ...] = ()
    """Under a :attr:`SubgroupTopology.label`, the label value of each copy (the subgroup
    indexes LeaderWorkerSet writes on its pods); ``copies`` of them. Copy ``v`` is then named
    ``subgroup-<v>``."""

    def __post_init__(self) -> None:
        if self.values and len(self.values) != self.copies:
            raise ValueError(f"subgroup kind {self.name}: {len(self.values)} values for "
                             f"{self.copies} copies")


@dataclass(frozen=True, slots=True)
class SubgroupTopology:
    """Each subgroup of a gang alone in a domain of a node label, a different domain each,
    with no other gang's pods there (JobSet ``exclusive-topology``: each child Job alone)."""

    key: str
    kinds: tuple[SubgroupKind, ...]
    label: str | None = None
    """A pod label naming each pod's subgroup (LeaderWorkerSet's ``subgroup-index``), when
    subgroups share roles and only the pods can say which one they are in; ``None`` when a
    subgroup is told by its roles and domain alone (JobSet's Jobs)."""

    @property
    def count(self) -> int:
        """Subgroups in all: the distinct domains the gang needs."""
        return sum(k.copies for k in self.kinds)

    def kind_of(self, role: str) -> SubgroupKind | None:
        for kind in self.kinds:
            if any(r == role for r, _ in kind.pods):
                return kind
        return None

    def unit_name(self, value: str) -> str | None:
        """The name of the subgroup whose pods carry ``value`` in :attr:`label`, or ``None``
        when no copy has that value."""
        return (f"subgroup-{value}"
                if any(value in kind.values for kind in self.kinds) else None)


@dataclass(frozen=True, slots=True)
class PodShape:
    """What one pod needs from a node and where it may go; many pods share one shape."""

    requests: Resources = EMPTY
    gpu_share: int = 0
    """Milli of ONE GPU device for a GPU-sharing pod (500 = half a GPU), else 0."""
    node_selector: Labels = ()
    affinity: tuple[NodeSelectorTerm, ...] = ()
    """Required node affinity terms (ORed); empty means any node."""
    tolerations: tuple[Toleration, ...] = ()
    priority: int = 0
    preempts: bool = True
    """False for ``preemptionPolicy: Never``: the pod waits instead of evicting anyone (it
    may still be evicted itself)."""
    claims: bool = False
    """The pod lists ``spec.resourceClaims``: it takes DRA devices, even once its claims are
    allocated (their devices then count in the supply, not in :attr:`requests`)."""

    @property
    def gpus(self) -> int:
        return self.requests.gpus

    def takes_devices(self, gpu: str) -> bool:
        """Whether the pod asks for GPUs or other devices: ``gpu``, a share of one, or DRA
        devices (through claims, or an extended resource a DeviceClass serves). Only such
        pods are Muster's to decide, as an extender block with ``managedResources`` would
        choose them; a claim-only pod names no resource such a list could hold."""
        return self.claims or self.gpu_share > 0 or any(
            name == gpu or name.startswith((DEVICE_CLASS_PREFIX, UNCOUNTABLE_PREFIX))
            for name in self.requests)


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: NodeName
    allocatable: Resources
    labels: Labels = ()
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False

    @property
    def gpu_devices(self) -> int:
        return self.allocatable.gpus

    def label(self, key: str) -> str | None:
        for k, v in self.labels:
            if k == key:
                return v
        return None


@dataclass(frozen=True, slots=True)
class OwnerRef:
    api_version: str
    kind: str
    name: str
    uid: str = ""
    controller: bool = False


class PodPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


@dataclass(frozen=True, slots=True)
class PodInfo:
    """A pod as observed (API server, snapshot file or simulator)."""

    uid: str
    namespace: str
    name: str
    shape: PodShape
    node_name: NodeName | None = None
    phase: PodPhase = PodPhase.PENDING
    labels: Labels = ()
    annotations: Labels = ()
    owners: tuple[OwnerRef, ...] = ()
    scheduler_name: str = "default-scheduler"
    created: float = 0.0
    deleting: bool = False
    gpu_devices: tuple[int, ...] = ()
    """Device indexes the pod holds on its node, when known (GPU sharing); else empty."""
    gates: tuple[str, ...] = ()
    """Names of its ``spec.schedulingGates``: while any is left, kube-scheduler keeps the pod
    out of its queue (no filter, no bind)."""
    claimed: Resources = EMPTY
    """Of ``shape.requests``, what the pod's ResourceClaims ask (lowered by
    :mod:`~extender.core.devices`). By the time kube-scheduler asks an extender to bind the
    pod, its DynamicResources PreBind has allocated all of them on that node, and they stay
    the pod's whatever the bind's answer."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def holds_resources(self) -> bool:
        """Bound and not terminal: counts against its node's capacity."""
        return self.node_name is not None and self.phase not in (
            PodPhase.SUCCEEDED,
            PodPhase.FAILED,
        )

    def label(self, key: str) -> str | None:
        for k, v in self.labels:
            if k == key:
                return v
        return None

    @property
    def controller(self) -> OwnerRef | None:
        for owner in self.owners:
            if owner.controller:
                return owner
        return self.owners[0] if self.owners else None


@dataclass(frozen=True, slots=True)
class WorkloadRef:
    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class SubReplicas:
    """A role whose replicas come in blocks of ``count``, one block per gang replica.

    In each block the first ``base`` copies join the replica's base gang; every further copy
    ``j`` is a gang of its own, shared with the other roles of ``group`` (a Grove
    PodCliqueScalingGroup replica above ``minAvailable``: leader and workers together).
    """

    group: str
    count: int
    base: int


@dataclass(frozen=True, slots=True)
class Role:
    """One kind of pod in a workload: JobSet replicatedJob, Ray worker group, LWS worker."""

    name: str
    replicas: int
    """Replicas of the role's unit (Jobs of a replicatedJob, LWS groups, Ray hosts groups)."""
    pods_per_replica: int
    shape: PodShape
    min_replicas: int | None = None
    """Elastic minimum (PyTorch elasticPolicy, Ray minReplicas); ``None`` means ``replicas``."""
    template: Mapping[str, object] = field(default_factory=dict, compare=False, hash=False)
    """The pod template as written, for controllers the simulator models."""
    min_pods_per_replica: int | None = None
    """Pods of one replica that must start together (Grove clique ``minAvailable``);
    ``None`` means ``pods_per_replica``."""
    sub_replicas: SubReplicas | None = None
    """How the replicas are cut into base and scaled gangs (gang policy ``baseAndScaled``)."""
    created_after: tuple[tuple[str, str], ...] = ()
    """``(role, status)``: this role's pods are created only once ``role`` reaches ``status``
    (``Ready`` or ``Complete``); empty when they are created with the workload."""
    gang_root: str = ""
    """The role created after another *completes* whose gang this role joins (itself, or a
    role it waits to be Ready for); empty: the workload's own gang."""
    follows: str = ""
    """The role whose replica ``j`` is this role's leader: this role holds the other pods of
    each replica (a JobSet Job's followers, created once its index-0 pod is scheduled)."""
    gang_group: str = ""
    """Under gang policy ``replica``, the group of roles whose copies of one replica index form
    one gang, ``ns/name/<group>-<i>`` (a second LeaderWorkerSet of the workload); empty: the
    default group, ``ns/name/group-<i>``."""

    @property
    def pods(self) -> int:
        return self.replicas * self.pods_per_replica

    @property
    def min_per_replica(self) -> int:
        if self.min_pods_per_replica is None:
            return self.pods_per_replica
        return self.min_pods_per_replica

    @property
    def min_pods(self) -> int:
        base = self.replicas if self.min_replicas is None else self.min_replicas
        return base * self.min_per_replica

    @property
    def gpus(self) -> int:
        return self.pods * self.shape.gpus


@dataclass(frozen=True, slots=True)
class GangMember:
    """The pods of one role that belong to one gang."""

    role: str
    count: int
    min_count: int
    shape: PodShape
    stage: int = 0
    """When the role's pods come into being: 0 with the workload, ``n`` once the roles of
    stage ``n - 1`` are Ready (its operator creates them only then). The gang is admitted
    whole, every stage's capacity held, and its barrier releases stage by stage."""


@dataclass(frozen=True, slots=True)
class Gang:
    """The unit of all-or-nothing: at least ``min_member`` pods start together or none."""

    key: GangKey
    workload: WorkloadRef
    members: tuple[GangMember, ...]
    topology: TopologyConstraint | None = None
    priority: int = 0
    created: float = 0.0
    subgroups: SubgroupTopology | None = None
    """Each subgroup in its own exclusive domain (the whole gang then keeps to none)."""

    @property
    def min_member(self) -> int:
        return sum(m.min_count for m in self.members)

    @property
    def pods(self) -> int:
        return sum(m.count for m in self.members)

    @property
    def gpus(self) -> int:
        return sum(m.count * m.shape.gpus for m in self.members)

    def member(self, role: str) -> GangMember | None:
        for m in self.members:
            if m.role == role:
                return m
        return None

    @property
    def last_stage(self) -> int:
        """The gang's last stage (0: every member's pods are created with the workload)."""
        return max((m.stage for m in self.members), default=0)

    def stage_minimum(self, stage: int) -> int:
        """Pods of ``stage`` that must reach bind before the barrier releases it."""
        return sum(m.min_count for m in self.members if m.stage == stage)

    def stage_of(self, role: str) -> int:
        member = self.member(role)
        return 0 if member is None else member.stage


@dataclass(frozen=True, slots=True)
class WorkloadTree:
    """A workload object resolved through its descriptor."""

    ref: WorkloadRef
    descriptor: str
    phase: Phase
    roles: tuple[Role, ...]
    gangs: tuple[Gang, ...]
    edges: tuple[tuple[str, str], ...] = ()
    """Ordering between roles: ``(before, after)`` means ``after`` starts once ``before`` has."""
    descriptor_format: str = "muster"
    warnings: tuple[str, ...] = field(default=(), compare=False)
    """What looks wrong but resolves (every role looked for where nothing is)."""

    @property
    def pods(self) -> int:
        return sum(r.pods for r in self.roles)

    @property
    def gpus(self) -> int:
        return sum(r.gpus for r in self.roles)

    @property
    def requests(self) -> Resources:
        total = EMPTY
        for r in self.roles:
            total = total + r.shape.requests.scale(r.pods)
        return total


@dataclass(frozen=True, slots=True)
class Membership:
    """Where a pod belongs: its workload, role, replica and gang (``None`` = not a gang pod)."""

    workload: WorkloadRef
    role: str
    replica: int | None = None
    gang: GangKey | None = None
    subgroup: str | None = None
    """The pod's subgroup, read from the descriptor's ``pods.subgroup.label`` (the value of
    LeaderWorkerSet's ``subgroup-index``); ``None`` when the pod has none."""
