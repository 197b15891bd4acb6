"""Which node-label domain each gang keeps to, read from what the workload's author wrote.

In order, the first that names a label key wins for the whole workload:

1. Muster's own annotations on the workload object, for any kind:
   ``muster.dev/topology-required: <label key>`` (or ``muster.dev/topology-preferred``), and
   ``muster.dev/topology-exclusive: "true"`` with a required key;
2. the descriptor's ``spec.gangs.topology`` rules, in order (the catalog reads the operators'
   own annotations there, e.g. LeaderWorkerSet's ``exclusive-topology``);
   a ``per: replica`` rule instead keeps each *replica* (with its followers) alone in its own
   domain, a different one each (JobSet's ``exclusive-topology``: each child Job alone), and
   the gang itself to none;
3. per gang, Kueue's ``kueue.x-k8s.io/podset-required-topology`` (or ``-preferred-``) on the
   pod templates, when every role of the gang asks for the same key: Kueue keeps each pod set
   in one domain, and Muster can keep only a whole gang to one.

   a ``per: subgroup`` rule keeps each *subgroup* alone in its own domain: a group's pods
   cut in slices as LeaderWorkerSet cuts them (``subGroupSize``; the leader in the first,
   unless ``leaderExcluded``), each pod saying its slice in ``spec.pods.subgroup.label``
   (LeaderWorkerSet's ``subgroup-exclusive-topology``);

Annotations Muster reads but cannot honour (LWS subgroups without a ``per: subgroup`` rule,
a JobSet's exclusive placement where no ``per: replica`` rule applies) become warnings on
the workload, never a stricter constraint that would leave a gang waiting forever.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from extender.core.model.values import (
    Gang,
    Role,
    SubgroupKind,
    SubgroupTopology,
    TopologyConstraint,
)
from extender.core.workloads.expressions import (
    ITEM,
    OBJECT,
    Condition,
    Count,
    PathRef,
    Scope,
    WorkloadError,
)

__all__ = [
    "KUEUE_PREFERRED",
    "KUEUE_REQUIRED",
    "MUSTER_EXCLUSIVE",
    "MUSTER_PREFERRED",
    "MUSTER_REQUIRED",
    "Slices",
    "TopologyRule",
    "bad_label_key",
    "with_topology",
]

MUSTER_REQUIRED = "muster.dev/topology-required"
MUSTER_PREFERRED = "muster.dev/topology-preferred"
MUSTER_EXCLUSIVE = "muster.dev/topology-exclusive"
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"

_UNHONOURED = {
    "alpha.jobset.sigs.k8s.io/exclusive-topology": (
        "puts each child Job alone in its own domain; with the node-selector strategy Muster "
        "keeps the JobSet's gang to no domain of its own (the nodeSelectors JobSet writes on its "
        "pods still apply)"),
    "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology": (
        "puts each subgroup alone in its own domain; a Muster gang is the whole group, so Muster "
        "keeps it to no single domain (the affinities LWS writes on its pods still apply)"),
}

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def bad_label_key(key: str) -> str | None:
    """Why ``key`` is not a node label key (``prefix/name``, as the API server checks it)."""
    prefix, _, name = key.rpartition("/")
    shown = repr(key if len(key) <= 80 else key[:77] + "...")  # a hostile value stays short
    if prefix and (len(prefix) > 253 or not _PREFIX.match(prefix)):
        return f"{shown} is not a label key: its prefix must be a DNS subdomain"
    if not _NAME.match(name):
        return (f"{shown} is not a label key: the name must be 1-63 letters, digits, '-', '_' "
                "or '.', starting and ending with a letter or digit")
    return None


@dataclass(frozen=True, slots=True)
class Slices:
    """How a ``per: subgroup`` rule cuts a gang into subgroups, as LeaderWorkerSet cuts a
    group (``SubGroupPolicy``): the pods, leader first, in slices of ``size``; when the
    workers alone divide by ``size`` the leader is an extra pod in the first slice."""

    size: Count
    leader: str
    """The role whose one pod is the group's first (index 0)."""
    leader_excluded: Condition | None = None
    """Where this holds, the leader is in no subgroup (``LeaderExcluded``)."""


@dataclass(frozen=True, slots=True)
class TopologyRule:
    """One ``spec.gangs.topology`` entry: the label key is a literal or read at a path."""

    required: bool
    exclusive: bool = False
    literal: str | None = None
    ref: PathRef | None = None
    per_replica: bool = False
    """Each replica of the gang's roles (a JobSet Job: its leader and followers) alone in its
    own domain, rather than the whole gang in one."""
    when: Condition | None = None
    """The rule applies only where this holds on the object."""
    slices: Slices | None = None
    """Each subgroup so cut alone in its own domain (``per: subgroup``)."""
    over: PathRef | None = None
    """Items (a JobSet's replicatedJobs) on each of which the key and ``when`` are read; the
    rule applies when the items that give a key all give the same one, to the roles those
    items name (their ``name``), the others keeping to no domain (each replicatedJob's own
    ``exclusive-topology``)."""

    @property
    def whole(self) -> bool:
        """Whether the rule keeps the whole gang to one domain (not per replica or subgroup)."""
        return not self.per_replica and self.slices is None

    def key(self, obj: Mapping[str, Any]) -> str | None:
        if self.over is not None:
            asked = {k for _, k in _item_keys(self, obj) if k is not None}
            return next(iter(asked)) if len(asked) == 1 else None
        if self.when is not None and not self.when.holds(Scope({OBJECT: obj})):
            return None
        if self.literal is not None:
            return self.literal
        assert self.ref is not None
        found = self.ref.find(Scope({OBJECT: obj}))
        return found[0] if found and isinstance(found[0], str) and found[0] else None


def _item_keys(rule: TopologyRule, obj: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """``(item name, key or None)`` per item of ``rule.over``."""
    assert rule.over is not None and rule.ref is not None
    keys: list[tuple[str, str | None]] = []
    for item in rule.over.find(Scope({OBJECT: obj})):
        name = item.get("name") if isinstance(item, Mapping) else None
        scope = Scope({OBJECT: obj, ITEM: item})
        key = None
        if rule.when is None or rule.when.holds(scope):
            found = rule.ref.find(scope)
            key = found[0] if found and isinstance(found[0], str) and found[0] else None
        keys.append((str(name), key))
    return keys


def _partly(obj: Mapping[str, Any], rules: Sequence[TopologyRule]) -> list[str]:
    """Warnings for rules read per item whose items ask for different keys."""
    out = []
    for i, rule in enumerate(rules):
        if rule.over is None or rule.key(obj) is not None:
            continue
        asked = sorted({k for _, k in _item_keys(rule, obj) if k is not None})
        if asked:
            out.append(f"spec.gangs.topology[{i}] of the descriptor: {rule.over.text} ask "
                       f"for domains of different node labels ({', '.join(asked)}); Muster "
                       "keeps each replica to a domain of its own of one label only, so it "
                       "keeps them to none (the affinities the operator writes still apply)")
    return out


def _annotations(meta: object) -> Mapping[str, Any]:
    found = meta.get("annotations") if isinstance(meta, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def _checked(key: str, where: str) -> str:
    why = bad_label_key(key)
    if why is not None:
        raise WorkloadError(f"{where}: {why}")
    return key


def _from_muster(notes: Mapping[str, Any]) -> TopologyConstraint | None:
    required, preferred = notes.get(MUSTER_REQUIRED), notes.get(MUSTER_PREFERRED)
    exclusive = str(notes.get(MUSTER_EXCLUSIVE, "false")).strip().lower()
    if exclusive not in ("true", "false"):
        raise WorkloadError(f"metadata.annotations['{MUSTER_EXCLUSIVE}']: expected \"true\" or "
                            f"\"false\", got {notes[MUSTER_EXCLUSIVE]!r}")
    if required is not None and preferred is not None:
        raise WorkloadError(f"metadata.annotations: {MUSTER_REQUIRED} and {MUSTER_PREFERRED} "
                            "are both set; a gang keeps to one label, choose one")
    if exclusive == "true" and required is None:
        raise WorkloadError(f"metadata.annotations['{MUSTER_EXCLUSIVE}']: needs "
                            f"{MUSTER_REQUIRED} (only a required domain can be held alone)")
    for name, value in ((MUSTER_REQUIRED, required), (MUSTER_PREFERRED, preferred)):
        if value is not None:
            key = _checked(str(value), f"metadata.annotations['{name}']")
            return TopologyConstraint(key, required=name == MUSTER_REQUIRED,
                                      exclusive=exclusive == "true")
    return None


def _from_rules(obj: Mapping[str, Any], rules: Sequence[TopologyRule],
                ) -> TopologyConstraint | None:
    for i, rule in enumerate(rules):
        key = rule.key(obj) if rule.whole else None
        if key is not None:
            where = f"spec.gangs.topology[{i}] of the descriptor"
            return TopologyConstraint(_checked(key, where), required=rule.required,
                                      exclusive=rule.exclusive)
    return None


def _from_kueue(gang: Gang, roles: Mapping[str, Role]) -> tuple[TopologyConstraint | None,
                                                                  str | None]:
    """The gang's constraint from its pod templates, or why the templates' differ."""
    asked = []
    for m in gang.members:
        role = roles.get(m.role)
        notes = _annotations(role.template.get("metadata")) if role is not None else {}
        req, pref = notes.get(KUEUE_REQUIRED), notes.get(KUEUE_PREFERRED)
        asked.append((m.role, str(req) if req else None, str(pref) if pref else None))
    if not any(req or pref for _, req, pref in asked):
        return None, None
    for index, required in ((1, True), (2, False)):
        keys = {a[index] for a in asked}
        if len(keys) == 1 and None not in keys:
            key = _checked(str(next(iter(keys))), f"role {asked[0][0]!r} pod template "
                           f"annotation {KUEUE_REQUIRED if required else KUEUE_PREFERRED}")
            return TopologyConstraint(key, required=required), None
    shown = ", ".join(f"{r}: {req or pref or 'none'}" for r, req, pref in asked)
    return None, (f"gang {gang.key}: Kueue podset topology differs between its roles ({shown}); "
                  "Muster keeps a whole gang to one domain or none, so it keeps to none")


def _per_replica_key(obj: Mapping[str, Any], rules: Sequence[TopologyRule],
                     ) -> tuple[str, frozenset[str] | None] | None:
    """The key each replica keeps to, and the roles that do (``None``: every role)."""
    for i, rule in enumerate(rules):
        key = rule.key(obj) if rule.per_replica else None
        if key is not None:
            only = (None if rule.over is None else
                    frozenset(n for n, k in _item_keys(rule, obj) if k is not None))
            return _checked(key, f"spec.gangs.topology[{i}] of the descriptor"), only
    return None


def _per_subgroup(obj: Mapping[str, Any], rules: Sequence[TopologyRule],
                  ) -> tuple[str, Slices] | None:
    for i, rule in enumerate(rules):
        key = rule.key(obj) if rule.slices is not None else None
        if key is not None and rule.slices is not None:
            return _checked(key, f"spec.gangs.topology[{i}] of the descriptor"), rule.slices
    return None


def _sliced(key: str, gang: Gang, *, size: int, leader: str, excluded: bool, label: str,
            ) -> tuple[SubgroupTopology | None, str | None]:
    """The gang cut into subgroups as LeaderWorkerSet's pod webhook numbers them
    (``getSubGroupIndex``), or why it cannot be."""
    lead = gang.member(leader)
    workers = [m for m in gang.members if m.role != leader]
    if len(workers) != 1 or lead is None or lead.count != 1:
        return None, (f"gang {gang.key}: subgroups are cut from one leader and one role of "
                      f"workers; its roles are {', '.join(m.role for m in gang.members)}")
    if any(m.min_count != m.count for m in gang.members):
        return None, (f"gang {gang.key} is elastic; Muster keeps each subgroup to its own "
                      f"{key} domain only when every pod must start")
    worker, n = workers[0].role, workers[0].count
    if size < 1 or size > n + 1:
        return None, f"gang {gang.key}: subgroup size {size} is not between 1 and {n + 1}"
    if excluded:
        return None, (f"gang {gang.key}: with LeaderExcluded its leader is in no subgroup, "
                      f"which Muster does not plan; it keeps the subgroups to no {key} "
                      "domain of their own")
    if n % size == 0:  # the leader is an extra pod in the first slice
        first, rest = ((leader, 1), (worker, size)), n // size - 1
    elif (n + 1) % size == 0:
        first, rest = ((leader, 1), (worker, size - 1)), (n + 1) // size - 1
    else:
        return None, (f"gang {gang.key}: neither its {n + 1} pods nor its {n} workers divide "
                      f"into subgroups of {size}")
    kinds = [SubgroupKind(leader, tuple(sorted(p for p in first if p[1] > 0)), 1, ("0",))]
    if rest:
        kinds.append(SubgroupKind(worker, ((worker, size),), rest,
                                  tuple(str(i) for i in range(1, rest + 1))))
    return SubgroupTopology(key, tuple(kinds), label=label), None


def _subgroups(key: str, gang: Gang, roles: Mapping[str, Role],
               only: frozenset[str] | None = None,
               ) -> tuple[SubgroupTopology | None, str | None]:
    """Each replica of the gang's roles (with its followers' role) as one subgroup, or why
    the gang cannot be cut so (an elastic role: which replicas start is not known). With
    ``only``, just those roles are cut; the others keep to no domain."""
    kinds = []
    members = {m.role for m in gang.members}
    for m in gang.members:
        role = roles.get(m.role)
        if role is None or role.follows or (only is not None and role.name not in only):
            continue
        if m.min_count != m.count:
            return None, (f"gang {gang.key}: role {m.role} is elastic; Muster keeps each "
                          f"replica to its own {key} domain only when every pod must start")
        pods = [(role.name, role.pods_per_replica)]
        pods += [(f.name, f.pods_per_replica) for f in roles.values()
                 if f.follows == role.name and f.name in members]
        kinds.append(SubgroupKind(role.name, tuple(sorted(pods)), role.replicas))
    return (SubgroupTopology(key, tuple(kinds)) if kinds else None), None


def with_topology(obj: Mapping[str, Any], rules: Sequence[TopologyRule],
                  roles: Sequence[Role], gangs: Sequence[Gang], *,
                  subgroup_label: str | None = None,
                  ) -> tuple[tuple[Gang, ...], tuple[str, ...]]:
    """``gangs`` with the domain each keeps to, and warnings for what is not honoured.
    ``subgroup_label`` is the pod label saying a pod's subgroup (``per: subgroup`` rules).

    Raises :class:`WorkloadError` for a malformed key, naming the annotation or rule."""
    notes = _annotations(obj.get("metadata"))
    per_replica = _per_replica_key(obj, rules)
    per_subgroup = _per_subgroup(obj, rules) if subgroup_label is not None else None
    warnings = [f"annotation {name} {why}" for name, why in _UNHONOURED.items()
                if notes.get(name) and per_replica is None and per_subgroup is None]
    warnings += _partly(obj, rules)
    if not gangs:
        return tuple(gangs), tuple(warnings)
    whole = _from_muster(notes) or _from_rules(obj, rules)
    if per_replica is not None:
        by_name = {r.name: r for r in roles}
        key, only = per_replica
        if whole is not None:
            warnings.append(f"each replica keeps to its own {key} domain, so the "
                            f"whole-gang {whole.key} domain is not kept")
        cut = []
        for gang in gangs:
            sub, why = _subgroups(key, gang, by_name, only)
            if why is not None:
                warnings.append(why)
            cut.append(gang if sub is None else replace(gang, subgroups=sub))
        return tuple(cut), tuple(warnings)
    if per_subgroup is not None and subgroup_label is not None:
        key, slices = per_subgroup
        if whole is not None:
            # LeaderWorkerSet's exclusive-topology and subgroup-exclusive-topology together:
            # the group keeps to one domain of its own; the subgroups' affinities, which LWS
            # writes on the pods, still apply within it.
            warnings.append(f"the whole gang keeps to its own {whole.key} domain, so each "
                            f"subgroup's own {key} domain is not planned by Muster")
        else:
            scope = Scope({OBJECT: obj})
            size = slices.size.evaluate(scope)
            excluded = (slices.leader_excluded is not None
                        and slices.leader_excluded.holds(scope))
            cut = []
            for gang in gangs:
                sub, why = _sliced(key, gang, size=size, leader=slices.leader,
                                   excluded=excluded, label=subgroup_label)
                if why is not None:
                    warnings.append(why)
                cut.append(gang if sub is None else replace(gang, subgroups=sub))
            return tuple(cut), tuple(warnings)
    if whole is not None:
        return tuple(replace(g, topology=whole) for g in gangs), tuple(warnings)
    by_name = {r.name: r for r in roles}
    out = []
    for gang in gangs:
        found, why = _from_kueue(gang, by_name)
        if why is not None:
            warnings.append(why)
        out.append(gang if found is None else replace(gang, topology=found))
    return tuple(out), tuple(warnings)
