"""kube-scheduler's filter plugins over its cache, class by class.

Nodes alike in what eligibility and the default scores read (allocatable, labels other than
per-node ones, taints, cordon) are one *kind*; nodes of one kind with the same free capacity
(devices sorted: :func:`canonical`) are one *class*, so the filter looks at a few hundred
classes rather than ten thousand nodes.

It reads the scheduler cache and never changes it: :class:`~simulator.cluster.ClusterModel`
writes the cache and tells it which node moved (:meth:`CacheFilter.moved`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping

from extender.core.gang.charging import count_fitting
from extender.core.gang.constraints import ineligibility
from extender.core.gang.nodecapacity import Demand, NodeCapacity
from extender.core.model.values import NodeInfo, NodeName, PodShape

#: Node kind: what eligibility and default scores depend on besides free capacity.
Kind = tuple[object, ...]


def _kind_of(node: NodeInfo, personal: frozenset[str]) -> Kind:
    labels = tuple((k, v) for k, v in node.labels if k not in personal)
    return (node.allocatable, labels, node.taints, node.unschedulable)


def _personal_keys(nodes: Iterable[NodeInfo]) -> frozenset[str]:
    """Label keys whose value differs on every node (``kubernetes.io/hostname``): left out of
    a node's kind, or every node would be a kind of its own."""
    values: dict[str, list[str]] = {}
    for node in nodes:
        for k, v in node.labels:
            values.setdefault(k, []).append(v)
    return frozenset(k for k, vs in values.items() if len(vs) > 1 and len(set(vs)) == len(vs))


def _by_name(shape: PodShape, personal: frozenset[str]) -> bool:
    """Whether eligibility may differ between nodes of one kind: affinity on
    ``metadata.name``, or a selector on a per-node label."""
    if any(term.match_fields for term in shape.affinity):
        return True
    keys = {k for k, _ in shape.node_selector}
    keys.update(r.key for term in shape.affinity for r in term.match_expressions)
    return bool(keys & personal)


def canonical(cap: NodeCapacity) -> NodeCapacity:
    """The capacity with its devices sorted: which index a free device has does not change
    what fits or how a node scores, and ignoring it keeps the number of classes small."""
    ordered = tuple(sorted(cap.devices))
    if ordered == cap.devices:
        return cap
    return NodeCapacity(free=cap.free, devices=ordered, unpacked=cap.unpacked)


class CacheFilter:
    """Where one pod of a shape fits in the scheduler cache and its constraints allow, class
    by class; the cluster model's own, for one replay."""

    def __init__(self, nodes: Mapping[NodeName, NodeInfo],
                 cache: Mapping[NodeName, NodeCapacity]) -> None:
        self.nodes = nodes
        self.cache = cache
        """The cluster model's scheduler cache, read only here."""
        kinds: dict[Kind, int] = {}
        self._kind: dict[NodeName, int] = {}
        self._kind_node: list[NodeInfo] = []
        self.personal = _personal_keys(nodes.values())
        """Label keys left out of node kinds (their value differs on every node)."""
        for name, node in nodes.items():
            k = kinds.setdefault(_kind_of(node, self.personal), len(kinds))
            self._kind[name] = k
            if k == len(self._kind_node):
                self._kind_node.append(node)
        self._classes: dict[tuple[int, NodeCapacity], list[NodeName]] = {}
        for name in nodes:
            self._classes.setdefault((self._kind[name], canonical(cache[name])),
                                     []).append(name)
        self._eligible_kinds: dict[PodShape, tuple[int, ...]] = {}
        self._fits: dict[tuple[NodeCapacity, Demand], bool] = {}
        """Memo: does one pod of the demand fit a class's free capacity (values never change)."""

    def moved(self, node: NodeName, before: NodeCapacity, after: NodeCapacity) -> None:
        """``node``'s free capacity in the cache went from ``before`` to ``after``."""
        kind, old, new = self._kind[node], canonical(before), canonical(after)
        if old == new:
            return
        names = self._classes[(kind, old)]
        del names[bisect.bisect_left(names, node)]
        if not names:
            del self._classes[(kind, old)]
        bisect.insort(self._classes.setdefault((kind, new), []), node)

    def kind_node(self, name: NodeName) -> NodeInfo:
        """A node of the same kind (same allocatable, labels, taints)."""
        return self._kind_node[self._kind[name]]

    def feasible(self, shape: PodShape, demand: Demand) -> Iterator[tuple[NodeCapacity,
                                                                         list[NodeName]]]:
        """Classes of nodes where one pod of ``shape`` fits in the scheduler cache and its
        nodeSelector, affinity and tolerations allow: kube-scheduler's filter plugins.

        Yields ``(free capacity with devices sorted, sorted node names)``; the lists must not
        be modified.
        """
        by_name = _by_name(shape, self.personal)
        kinds = None if by_name else self._eligible_kind_set(shape)
        fits = self._fits
        for (kind, cap), names in self._classes.items():
            if not names:
                continue
            fit = fits.get((cap, demand))
            if fit is None:
                fit = fits[(cap, demand)] = count_fitting(cap, demand) > 0
            if not fit:
                continue
            if kinds is not None:
                if kind in kinds:
                    yield cap, names
                continue
            allowed = [n for n in names if ineligibility(shape, self.nodes[n]) is None]
            if allowed:
                yield cap, allowed

    def feasible_among(self, shape: PodShape, demand: Demand,
                       names: Iterable[NodeName]) -> list[NodeName]:
        """Those of ``names`` :meth:`feasible` would yield, in the order given."""
        by_name = _by_name(shape, self.personal)
        kinds = None if by_name else self._eligible_kind_set(shape)
        out = []
        for name in names:
            if name not in self.nodes or count_fitting(self.cache[name], demand) <= 0:
                continue
            if (self._kind[name] in kinds) if kinds is not None else \
                    ineligibility(shape, self.nodes[name]) is None:
                out.append(name)
        return out

    def _eligible_kind_set(self, shape: PodShape) -> tuple[int, ...]:
        found = self._eligible_kinds.get(shape)
        if found is None:
            found = tuple(k for k, node in enumerate(self._kind_node)
                          if ineligibility(shape, node) is None)
            self._eligible_kinds[shape] = found
        return found
