"""Preferred node affinity: the part of a pod spec kube-scheduler scores but the core ignores.

:class:`~extender.core.model.values.PodShape` holds what decides *whether* a pod may go to a node
(the core plans gangs with it); ``preferredDuringSchedulingIgnoredDuringExecution`` only
changes kube-scheduler's NodeAffinity score, so the simulator reads it from the pod spec or
template itself and keeps it beside the pod.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.core.model.values import NodeSelectorRequirement, NodeSelectorTerm

#: ``(weight, term)`` pairs; a node scores the sum of the weights of the terms it matches.
Preferred = tuple[tuple[int, NodeSelectorTerm], ...]


class PreferenceError(ValueError):
    """A preferred affinity term that cannot be read; the message says where."""


def _requirements(raw: object, path: str) -> tuple[NodeSelectorRequirement, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise PreferenceError(f"{path}: expected a list")
    out = []
    for i, item in enumerate(raw):
        if not isinstance(item, Mapping) or not isinstance(item.get("key"), str) or \
                not isinstance(item.get("operator"), str):
            raise PreferenceError(f"{path}[{i}]: needs a string key and operator")
        values = item.get("values") or []
        if not isinstance(values, list):
            raise PreferenceError(f"{path}[{i}].values: expected a list")
        out.append(NodeSelectorRequirement(key=item["key"], operator=item["operator"],
                                           values=tuple(str(v) for v in values)))
    return tuple(out)


def preferred_affinity(spec: Mapping[str, Any] | None, *, path: str = "spec") -> Preferred:
    """The preferred node affinity terms of a PodSpec (weight 0 terms are dropped, as
    kube-scheduler skips them)."""
    if not isinstance(spec, Mapping):
        return ()
    affinity = spec.get("affinity")
    node = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    raw = node.get("preferredDuringSchedulingIgnoredDuringExecution") \
        if isinstance(node, Mapping) else None
    if raw is None:
        return ()
    where = f"{path}.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
    if not isinstance(raw, list):
        raise PreferenceError(f"{where}: expected a list")
    out = []
    for i, item in enumerate(raw):
        weight = item.get("weight") if isinstance(item, Mapping) else None
        if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= 100:
            raise PreferenceError(f"{where}[{i}].weight: expected an integer 0..100, "
                                  f"got {weight!r}")
        assert isinstance(item, Mapping)
        term = item.get("preference")
        if not isinstance(term, Mapping):
            raise PreferenceError(f"{where}[{i}].preference: expected an object")
        if weight == 0:
            continue
        out.append((weight, NodeSelectorTerm(
            match_expressions=_requirements(term.get("matchExpressions"),
                                            f"{where}[{i}].preference.matchExpressions"),
            match_fields=_requirements(term.get("matchFields"),
                                       f"{where}[{i}].preference.matchFields"))))
    return tuple(out)



def per_node(preferred: Preferred, personal: frozenset[str]) -> bool:
    """Whether the terms can score nodes of one kind differently: they read the node's name
    or a label whose value differs on every node (``kubernetes.io/hostname``)."""
    return any(term.match_fields or any(r.key in personal for r in term.match_expressions)
               for _, term in preferred)
