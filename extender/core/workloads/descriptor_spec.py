"""The ``WorkloadDescriptor`` format's values: a compiled descriptor, role by role, as the
workload resolver reads it.

Frozen values only: nothing here parses or validates a document
(:func:`~extender.core.workloads.descriptor.compile_descriptor` builds them, once per
descriptor). The format is documented field by field in ``docs/descriptors.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from extender.core.model.values import Phase
from extender.core.workloads.expressions import Condition, Count, Name, PathRef
from extender.core.workloads.topology import TopologyRule

API_VERSION = "muster.dev/v1alpha1"
KIND = "WorkloadDescriptor"
DEFAULT_GANG_GROUP = "group"
"""The gang group of roles without ``gangGroup``: its gangs are ``ns/name/group-<i>``."""


class GangPolicy(StrEnum):
    """How a workload is cut into gangs."""

    WORKLOAD = "workload"
    """One gang of all gang roles; its minimum is the sum of the roles' minimum pods."""
    REPLICA = "replica"
    """One gang per replica index shared by the gang roles (an LWS group: leader + workers); with
    ``gangGroup`` set, one per replica index of each group of roles (KServe's decode and
    prefill LeaderWorkerSets)."""
    ROLE = "role"
    """One gang per role (a JobSet replicatedJob, a Dynamo service, as Karta groups them)."""
    ROLE_REPLICA = "roleReplica"
    """One gang per replica of each gang role (a multi-node Dynamo service replica)."""
    BASE_AND_SCALED = "baseAndScaled"
    """One base gang per replica index, holding each role's first ``subReplicas.base`` copies,
    plus one gang per further copy (Grove: a base PodGang per PodCliqueSet replica, a scaled
    PodGang per PodCliqueScalingGroup replica above ``minAvailable``)."""
    NONE = "none"
    """No gangs: pods schedule one by one (plain serving replicas)."""


@dataclass(frozen=True, slots=True)
class Target:
    """The kind a descriptor describes and the names people may call it by."""

    group: str
    kind: str
    versions: tuple[str, ...]
    plural: str
    short_names: tuple[str, ...] = ()

    @property
    def api_versions(self) -> tuple[str, ...]:
        return tuple(f"{self.group}/{v}" if self.group else v for v in self.versions)

    @property
    def group_kind(self) -> str:
        """``Kind.group`` as kubectl spells it (``JobSet.jobset.x-k8s.io``; ``Pod`` for core)."""
        return f"{self.kind}.{self.group}" if self.group else self.kind


@dataclass(frozen=True, slots=True)
class Join:
    """Bind, for each role item, the entry of another list whose ``match`` equals ``equals``."""

    alias: str
    source: PathRef
    match: PathRef
    equals: PathRef


@dataclass(frozen=True, slots=True)
class TemplateSpec:
    """Where a role's pod is described: a template, a PodSpec, or scattered fields."""

    pod_template: PathRef | None = None
    pod_spec: PathRef | None = None
    metadata: PathRef | None = None
    containers: tuple[PathRef, ...] = ()
    resources: PathRef | None = None
    node_selector: PathRef | None = None
    tolerations: PathRef | None = None
    affinity: PathRef | None = None
    resource_names: tuple[tuple[str, str], ...] = ()
    """The kind's own resource names mapped to Kubernetes ones (``gpu`` -> ``nvidia.com/gpu``)."""


@dataclass(frozen=True, slots=True)
class SubReplicaSpec:
    """How a role's replicas are cut into base and scaled gangs (``baseAndScaled``)."""

    group: Name
    """Names the scaled gangs; roles of one group share them. Selecting nothing: not cut."""
    count: Count
    """Copies per gang replica (a PodCliqueScalingGroup's ``replicas``)."""
    base: Count
    """Copies in the base gang (``min(minAvailable, replicas)``); each further one is a gang."""


class Readiness(StrEnum):
    """What an earlier role must reach before an operator creates a later role's pods."""

    READY = "Ready"
    """Its pods are Ready (JobSet ``dependsOn`` Ready, LWS ``LeaderReady``, MPIJob
    ``WaitForWorkersReady``): the later stage's capacity is held for it meanwhile."""
    SCHEDULED = "Scheduled"
    """Its pods are bound to nodes (JobSet's pod webhook admits a Job's followers only once
    its leader pod has a node, under ``exclusive-topology``): held like ``Ready``."""
    COMPLETE = "Complete"
    """It has finished (JobSet ``dependsOn`` Complete, Trainer initializers): the later role
    is a gang of its own, admitted whole when its pods appear, so the GPUs of a trainer are
    not held idle while an initializer runs."""


@dataclass(frozen=True, slots=True)
class CreatedAfterSpec:
    """``createdAfter``: the role's pods exist only once other roles reach a status."""

    roles: tuple[str, ...] = ()
    roles_ref: PathRef | None = None
    previous: bool = False
    """The role made for the previous item of the same ``forEach`` (JobSet ``startupPolicy:
    InOrder``: each replicatedJob is created once the one before it is Ready)."""
    leader: bool = False
    """Each replica's pods other than its leader are created once the leader reaches
    ``status``: the role is split into its leaders and ``<role>/followers``."""
    status: Readiness | None = Readiness.READY
    """One status for every role named; ``None`` when ``status_ref`` reads one per role."""
    status_ref: PathRef | None = None
    """Statuses aligned with the roles found (JobSet ``dependsOn[*].status``)."""
    when: Condition | None = None


@dataclass(frozen=True, slots=True)
class RoleSpec:
    """One role, or one role per item of ``for_each``."""

    name: Name
    replicas: Count
    pods_per_replica: Count
    template: TemplateSpec
    for_each: PathRef | None = None
    joins: tuple[Join, ...] = ()
    when: Condition | None = None
    min_replicas: Count | None = None
    after: tuple[str, ...] = ()
    after_ref: PathRef | None = None
    in_gang: Condition | None = None
    """When set, the role's pods join gangs only where this holds (a Karta member filter)."""
    min_pods_per_replica: Count | None = None
    """Pods of one replica that must start together (Grove clique ``minAvailable``)."""
    sub_replicas: SubReplicaSpec | None = None
    created_after: tuple[CreatedAfterSpec, ...] = ()
    """When the role's pods are created only after other roles reach a status (a *stage*)."""
    gang_group: str = ""
    """Under gang policy ``replica``, the group whose per-replica gangs the role's replicas
    join (``ns/name/<group>-<i>``); empty: the default group (``ns/name/group-<i>``)."""


@dataclass(frozen=True, slots=True)
class GangSpec:
    policy: GangPolicy = GangPolicy.WORKLOAD
    roles: tuple[str, ...] = ()
    """Roles in gangs; empty means every role."""
    topology: tuple[TopologyRule, ...] = ()
    """Where each gang's domain label is read; the first rule that finds a key wins."""


class RoleMatch(StrEnum):
    """How a role label's value names a role."""

    EXACT = "exact"
    """The value is the role name (after ``role.map``)."""
    SUFFIX = "suffix"
    """The value is the role name or ends with ``-<role>`` (an object named
    ``<parent>-<index>-<role>``, as Grove names PodCliques); the longest name wins."""


@dataclass(frozen=True, slots=True)
class PodMatch:
    """How a pod is tied to its workload, role and replica."""

    owners: tuple[str, ...] = ()
    """Kinds between a pod and the workload on the controller chain (``Job``, ``StatefulSet``)."""
    workload_label: str | None = None
    """A pod label whose value names the workload, used when the owner chain is unknown."""
    role_labels: tuple[str, ...] = ()
    role_map: tuple[tuple[str, str], ...] = ()
    role_default: str | None = None
    role_match: RoleMatch = RoleMatch.EXACT
    replica_label: str | None = None
    sub_replica_label: str | None = None
    """A label holding a pod's sub-replica index (Grove's PodCliqueScalingGroup replica)."""
    subgroup_label: str | None = None
    """A label naming the subgroup a pod is in, for ``per: subgroup`` topology
    (LeaderWorkerSet's ``subgroup-index``)."""
    leader_key: str | None = None
    """A label (or else annotation) whose value ``leader_value`` marks a replica's leader
    pod; the others are its followers when a ``createdAfter`` rule splits the role."""
    leader_value: str = "0"


@dataclass(frozen=True, slots=True)
class StatusRule:
    phase: Phase
    when: Condition


@dataclass(frozen=True, slots=True)
class StatusSpec:
    conditions: PathRef | None = None
    phase_field: PathRef | None = None
    rules: tuple[StatusRule, ...] = ()
    default: Phase = Phase.UNDEFINED


@dataclass(frozen=True, slots=True)
class Descriptor:
    """A compiled, validated ``WorkloadDescriptor``."""

    name: str
    target: Target
    roles: tuple[RoleSpec, ...]
    gangs: GangSpec
    pods: PodMatch
    status: StatusSpec
    description: str = ""
    format: str = "muster"
    """``muster`` (a WorkloadDescriptor) or ``karta`` (read from a Workload Map ``Karta``)."""
    source: str = ""
    """Where it came from (a file, ``catalog`` or ``cluster``), for people reading output."""
    notes: tuple[str, ...] = ()
    """What a translated descriptor could not express exactly, in words."""
