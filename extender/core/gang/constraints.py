"""Which nodes a pod shape may go to: nodeSelector, required node affinity, taints, cordons.

These are the checks kube-scheduler's NodeAffinity, TaintToleration and NodeUnschedulable
plugins make. The core repeats them because it plans a whole gang, including members
kube-scheduler has not seen yet, onto nodes of its own choosing. Each check returns ``None``
when the node is allowed and otherwise a short reason naming the rule that excludes it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import (
    Gang,
    NodeInfo,
    NodeName,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodShape,
    Taint,
    TaintEffect,
    Toleration,
    TopologyConstraint,
)

#: The taint kube-scheduler's NodeUnschedulable plugin treats as the cordon.
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"

_HARD_EFFECTS = frozenset({TaintEffect.NO_SCHEDULE.value, TaintEffect.NO_EXECUTE.value})


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """``Toleration.ToleratesTaint`` from k8s.io/api/core/v1."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    # An empty key with operator Equal is invalid in the API; treat it as not matching.
    return bool(toleration.key) and toleration.operator in ("Equal", "") and (
        toleration.value == taint.value
    )


def untolerated_taint(shape: PodShape, node: NodeInfo) -> Taint | None:
    """The first NoSchedule/NoExecute taint of ``node`` no toleration of ``shape`` covers."""
    for taint in node.taints:
        if taint.effect not in _HARD_EFFECTS:
            continue
        if not any(tolerates(t, taint) for t in shape.tolerations):
            return taint
    return None


def _int_or_none(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def requirement_matches(req: NodeSelectorRequirement, value: str | None) -> bool:
    """One matchExpressions entry against a node's label value (``None`` = label absent)."""
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        # The API requires exactly one integer value; a label that is not an integer fails.
        if value is None or len(req.values) != 1:
            return False
        have, bound = _int_or_none(value), _int_or_none(req.values[0])
        if have is None or bound is None:
            return False
        return have > bound if op == "Gt" else have < bound
    return False  # an unknown operator matches nothing, as the API server would reject it


def term_matches(term: NodeSelectorTerm, node: NodeInfo) -> bool:
    """A nodeSelectorTerm: all its expressions and fields hold (an empty term matches none)."""
    if not term.match_expressions and not term.match_fields:
        return False
    for req in term.match_expressions:
        if not requirement_matches(req, node.label(req.key)):
            return False
    for req in term.match_fields:
        value = str(node.name) if req.key == "metadata.name" else None
        if not requirement_matches(req, value):
            return False
    return True


def ineligibility(shape: PodShape, node: NodeInfo) -> str | None:
    """Why ``shape`` may not run on ``node`` (``None`` if it may), in a few words."""
    if node.unschedulable:
        tolerated = any(
            tolerates(t, Taint(UNSCHEDULABLE_TAINT, "", TaintEffect.NO_SCHEDULE.value))
            for t in shape.tolerations
        )
        if not tolerated:
            return "node is cordoned (unschedulable)"
    for key, want in shape.node_selector:
        if node.label(key) != want:
            return f"nodeSelector {key}={want} does not match"
    if shape.affinity and not any(term_matches(t, node) for t in shape.affinity):
        return "required node affinity does not match"
    taint = untolerated_taint(shape, node)
    if taint is not None:
        shown = f"{taint.key}={taint.value}" if taint.value else taint.key
        return f"taint {shown}:{taint.effect} is not tolerated"
    return None


def eligible_nodes(shape: PodShape, nodes: Iterable[NodeInfo]) -> tuple[NodeName, ...]:
    """Names of the nodes ``shape`` may run on, in the order given."""
    return tuple(n.name for n in nodes if ineligibility(shape, n) is None)


def ineligibility_summary(shape: PodShape, nodes: Iterable[NodeInfo]) -> str:
    """Count the reasons nodes exclude ``shape``: ``"3 nodes: taint gpu:NoSchedule ..."``."""
    counts: dict[str, int] = {}
    for node in nodes:
        reason = ineligibility(shape, node)
        if reason is not None:
            counts[reason] = counts.get(reason, 0) + 1
    if not counts:
        return "no nodes"
    parts = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return "; ".join(f"{n} node{'s' if n != 1 else ''}: {r}" for r, n in parts)


def topology_domains(
    topology: TopologyConstraint, nodes: Mapping[NodeName, NodeInfo], names: Sequence[NodeName]
) -> dict[str, tuple[NodeName, ...]]:
    """Group ``names`` by their value of the topology label; nodes without it join no domain."""
    domains: dict[str, list[NodeName]] = {}
    for name in names:
        value = nodes[name].label(topology.key)
        if value is not None:
            domains.setdefault(value, []).append(name)
    return {k: tuple(v) for k, v in sorted(domains.items())}


def exclusive_key(gang: Gang, role: str | None = None) -> str | None:
    """The node label whose domains ``gang`` (or its pods of ``role``) holds alone, if any:
    its subgroups' (each alone in one; a role in no subgroup holds none) or its own
    exclusive domain's."""
    if gang.subgroups is not None:
        if role is not None and gang.subgroups.kind_of(role) is None:
            return None
        return gang.subgroups.key
    if gang.topology is not None and gang.topology.exclusive:
        return gang.topology.key
    return None


def exclusive_fences(
    gang: Gang, snapshot: ClusterSnapshot, occupied: Mapping[NodeName, Collection[Gang]],
) -> tuple[frozenset[NodeName], dict[str, str]]:
    """What exclusivity closes to ``gang``: the nodes of every domain an exclusive other gang
    is in (its pods bound, in flight or planned; ``occupied``: node -> gangs there), and, when
    ``gang`` is exclusive itself, its domains any other gang is in, with why. A gang whose
    subgroups each keep to a domain of their own is exclusive in every domain it is in.

    Work is one pass over the occupied nodes, plus one over all nodes per label key fenced."""
    mine = exclusive_key(gang)
    fences: dict[str, set[str]] = {}  # label key -> values held by exclusive gangs
    taken: dict[str, str] = {}
    for node in sorted(occupied):
        info = snapshot.nodes.get(node)
        others = sorted((g for g in occupied[node] if g.key != gang.key), key=lambda g: g.key)
        if info is None or not others:
            continue
        for other in others:
            held = exclusive_key(other)
            if held is not None:
                value = info.label(held)
                if value is not None:
                    fences.setdefault(held, set()).add(value)
        if mine is not None:
            value = info.label(mine)
            if value is not None and value not in taken:
                taken[value] = f"gang {others[0].key} is there"
    if not fences:  # the usual case: no exclusive gang is anywhere; no pass over every node
        return frozenset(), taken
    fenced = frozenset(n.name for n in snapshot.nodes.values() for key, values in fences.items()
                       if n.label(key) in values)
    return fenced, taken
