"""kube-scheduler's default scores that matter for GPU placement, and how it picks among ties.

Each plugin scores a node 0..100; the node's total is the sum of ``weight x score`` with the
weights of kube-scheduler's default profile, plus each extender's 0..10 score x its weight x 10.
Integer arithmetic follows the Go code so totals tie where kube-scheduler's tie:

====================================  ======  ===========================================
plugin                                weight  a node scores higher when
====================================  ======  ===========================================
NodeResourcesFit (LeastAllocated)     1       more CPU and memory are left after the pod
NodeResourcesBalancedAllocation       1       its CPU and memory fractions stay closer
TaintToleration                       3       fewer PreferNoSchedule taints go untolerated
NodeAffinity (preferred terms)        2       the weights of the terms it matches sum higher
====================================  ======  ===========================================

TaintToleration and NodeAffinity are normalised over the nodes being scored (the best gets
100), as the plugins' NormalizeScore does. Not modelled: PodTopologySpread's system default
spreading (pods selected by a Service or StatefulSet), InterPodAffinity, ImageLocality, and the
"non-zero" 100m/200Mi that LeastAllocated counts for a pod that requests no CPU or memory.

kube-scheduler picks uniformly at random among the nodes with the best total
(``selectHost``'s reservoir sampling). :func:`pick` does the same with the replay's seeded
generator, so a replay is the same every time and a different seed gives a different one.

Pure: no I/O, no clock; randomness only from the generator passed in.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from extender.core.gang.capacity import Demand, NodeCapacity
from extender.core.gang.constraints import term_matches, tolerates
from extender.core.model.resources import CPU, MEMORY
from extender.core.model.values import NodeInfo, PodShape, TaintEffect
from simulator.preferences import Preferred

MAX_NODE_SCORE = 100
MAX_EXTENDER_PRIORITY = 10
_PREFER = TaintEffect.PREFER_NO_SCHEDULE.value


@dataclass(frozen=True, slots=True)
class Weights:
    """Plugin weights of kube-scheduler's default profile."""

    least_allocated: int = 1
    balanced_allocation: int = 1
    taint_toleration: int = 3
    node_affinity: int = 2


@dataclass(frozen=True, slots=True)
class Candidate:
    """Nodes that score alike: one free capacity, one kind of node."""

    cpu_left: int
    """Milli-CPU free once the pod is on the node."""
    memory_left: int
    cpu: int
    """The node's allocatable milli-CPU."""
    memory: int
    node: NodeInfo
    """A node of the group (labels and taints are what its members share)."""
    size: int = 1
    """How many nodes the group stands for."""
    extender: int = 0
    """The extender's 0..10 score for these nodes (Muster mode)."""


def candidate(free: NodeCapacity, empty: NodeCapacity, demand: Demand, node: NodeInfo, *,
              size: int = 1, extender: int = 0) -> Candidate:
    """The candidate for nodes with ``free`` capacity (``empty`` when idle) and the pod's
    ``demand``."""
    return Candidate(
        cpu_left=free.free.get(CPU, 0) - demand.scalar.get(CPU, 0),
        memory_left=free.free.get(MEMORY, 0) - demand.scalar.get(MEMORY, 0),
        cpu=empty.free.get(CPU, 0), memory=empty.free.get(MEMORY, 0),
        node=node, size=size, extender=extender)


def least_allocated(c: Candidate) -> int:
    """NodeResourcesFit's LeastAllocated: mean over CPU and memory of free-after x 100 / alloc."""
    total, count = 0, 0
    for left, capacity in ((c.cpu_left, c.cpu), (c.memory_left, c.memory)):
        if capacity > 0:
            total += max(left, 0) * MAX_NODE_SCORE // capacity
            count += 1
    return total // count if count else 0


def balanced_allocation(c: Candidate, demand: Demand) -> int:
    """NodeResourcesBalancedAllocation: ``(1 - std of the CPU and memory fractions) x 100``;
    a pod requesting neither is not scored (0 on every node)."""
    if not demand.scalar.get(CPU, 0) and not demand.scalar.get(MEMORY, 0):
        return 0
    fractions = [min((capacity - left) / capacity, 1.0)
                 for left, capacity in ((c.cpu_left, c.cpu), (c.memory_left, c.memory))
                 if capacity > 0]
    std = abs(fractions[0] - fractions[1]) / 2 if len(fractions) == 2 else 0.0
    return int((1 - std) * MAX_NODE_SCORE)


def intolerable_taints(shape: PodShape, node: NodeInfo) -> int:
    """PreferNoSchedule taints of ``node`` that no PreferNoSchedule (or any-effect)
    toleration of ``shape`` covers: TaintToleration's raw score (fewer is better)."""
    tolerations = [t for t in shape.tolerations if t.effect in ("", _PREFER)]
    return sum(1 for taint in node.taints
               if taint.effect == _PREFER and not any(tolerates(t, taint) for t in tolerations))


def preferred_weight(preferred: Preferred, node: NodeInfo) -> int:
    """NodeAffinity's raw score: the weights of the preferred terms ``node`` matches."""
    return sum(weight for weight, term in preferred if term_matches(term, node))


def normalize(raw: Sequence[int], *, reverse: bool) -> list[int]:
    """``DefaultNormalizeScore``: scale so the largest is 100 (reversed: the smallest)."""
    top = max(raw, default=0)
    if top == 0:
        return [MAX_NODE_SCORE if reverse else 0 for _ in raw]
    scaled = [MAX_NODE_SCORE * r // top for r in raw]
    return [MAX_NODE_SCORE - s for s in scaled] if reverse else scaled


def totals(shape: PodShape, demand: Demand, preferred: Preferred,
           candidates: Sequence[Candidate], *, weights: Weights = Weights(),
           extender_weight: int = 0) -> list[int]:
    """Each candidate's total score, normalising over all of them."""
    taints = normalize([intolerable_taints(shape, c.node) for c in candidates], reverse=True)
    affinity = (normalize([preferred_weight(preferred, c.node) for c in candidates],
                          reverse=False) if preferred else [0] * len(candidates))
    per_extender_point = extender_weight * (MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY)
    return [
        weights.least_allocated * least_allocated(c)
        + weights.balanced_allocation * balanced_allocation(c, demand)
        + weights.taint_toleration * t + weights.node_affinity * a
        + c.extender * per_extender_point
        for c, t, a in zip(candidates, taints, affinity, strict=True)
    ]


def pick(scores: Sequence[int], sizes: Sequence[int], rng: random.Random) -> tuple[int, int]:
    """A node drawn uniformly among those with the best score: ``(candidate, member)``,
    where ``member`` indexes the nodes the candidate stands for."""
    best = max(scores)
    tied = [i for i, s in enumerate(scores) if s == best]
    if len(tied) == 1 and sizes[tied[0]] == 1:
        return tied[0], 0
    draw = rng.randrange(sum(sizes[i] for i in tied))
    for i in tied:
        if draw < sizes[i]:
            return i, draw
        draw -= sizes[i]
    raise AssertionError("unreachable: the draw is below the tied total")
