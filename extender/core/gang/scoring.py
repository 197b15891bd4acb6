"""Scoring policies, selected by name: which node (and which topology domain) is better.

Placement sorts candidate nodes by :func:`node_order_key`, prioritize turns
:func:`node_score` into kube-scheduler's 0..10, and topology placement compares whole plans
by :func:`domain_cost`. The simulator's gang replay uses these very functions (through the
gang session); its FGD trace replay does not: ``simulator/policies`` holds the paper's own
policies over devices, with numpy, and no gang decisions.

- ``binpack`` (the default): fill the fullest node that still fits, keeping whole nodes free for
  big gangs; prioritize also weighs in GPU fragments left and the gang's topology domain.
- ``spread``: the emptiest node first (fewer neighbours, more headroom).
- ``topology``: binpack inside the fullest topology domain that holds the gang.
- ``fragmentation``: the node whose GPUs are left least fragmented, after the FGD paper's idea
  (ATC'23): a GPU that is free but unusable (a sliver of a shared device, or devices on a node
  whose CPU is exhausted) is waste; choose the placement that creates the least of it.
  (FGD weighs fragments by the expected mix of future pods; without that mix we count the
  slivers a whole-GPU pod cannot use.)
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from extender.core.gang.capacity import DEVICE, Demand, NodeCapacity, take
from extender.core.gang.errors import PlacementError
from extender.core.model.resources import CPU


class Policy(StrEnum):
    BINPACK = "binpack"
    SPREAD = "spread"
    TOPOLOGY = "topology"
    FRAGMENTATION = "fragmentation"


class UnknownPolicyError(PlacementError):
    """A scoring policy name that does not exist."""


def policy_named(name: str) -> Policy:
    try:
        return Policy(name)
    except ValueError as err:
        known = ", ".join(p.value for p in Policy)
        raise UnknownPolicyError(f"unknown scoring policy {name!r}; known: {known}") from err


def fragmentation(cap: NodeCapacity, *, empty: NodeCapacity | None = None) -> int:
    """GPU milli on this node that a whole-GPU pod could not use.

    Slivers of shared devices always count. Given ``empty`` (the node's allocatable), a node
    that had CPU and has none left strands every free GPU, and those count too.
    """
    if not cap.devices:
        return 0
    if empty is not None and empty.free.get(CPU, 0) > 0 and cap.free.get(CPU, 0) <= 0:
        return sum(max(d, 0) for d in cap.devices)
    return sum(d for d in cap.devices if 0 < d < DEVICE)


def _fullness(cap: NodeCapacity) -> tuple[int, int, int]:
    # Ascending = fuller first: whole devices, shared milli, then CPU.
    return (cap.whole_free, cap.gpu_milli_free, cap.free.get(CPU, 0))


def node_order_key(policy: Policy, cap: NodeCapacity, demand: Demand) -> tuple[int, ...]:
    """Sort key for placing one pod of ``demand`` on a node with ``cap`` free: lower first.

    Callers add the node name as the final tie-break, which keeps placement deterministic.
    """
    if policy is Policy.SPREAD:
        whole, milli, cpu = _fullness(cap)
        return (-whole, -milli, -cpu)
    if policy is Policy.FRAGMENTATION:
        after = take(cap, demand, 1, force=True)
        return (fragmentation(after) - fragmentation(cap), *_fullness(cap))
    return _fullness(cap)


def _used_fraction(cap: NodeCapacity, empty: NodeCapacity) -> float:
    """How full a node is, by GPU where it has GPUs, else by CPU."""
    if empty.devices:
        total = len(empty.devices) * DEVICE
        return 1.0 - cap.gpu_milli_free / total
    total_cpu = empty.free.get(CPU, 0)
    if total_cpu <= 0:
        return 0.0
    return 1.0 - cap.free.get(CPU, 0) / total_cpu


def node_score(
    policy: Policy, cap: NodeCapacity, demand: Demand, *, empty: NodeCapacity,
    in_domain: bool | None = None,
) -> int:
    """0..10 for prioritize; ``empty`` is the node with nothing on it (its allocatable).

    ``in_domain`` says whether the node is in the topology domain the pod's gang keeps to;
    ``None`` when no domain applies. Under ``binpack`` (the default) the score is at most 9,
    so a gang member's planned nodes (10, see
    :func:`~extender.core.decide.decisions.decide_prioritize`) come first; then nodes inside the
    gang's domain (5..9, with a domain); then nodes the pod leaves without a new GPU fragment
    (5..9 without a domain, 2 more with one); the fuller node first within each band.
    """
    after = take(cap, demand, 1, force=True)
    used = min(max(_used_fraction(after, empty), 0.0), 1.0)
    if policy is Policy.SPREAD:
        return round(10 * (1.0 - used))
    added = fragmentation(after, empty=empty) - fragmentation(cap, empty=empty)
    if policy is Policy.FRAGMENTATION:
        total = max(len(empty.devices) * DEVICE, 1)
        return max(0, min(10, round(10 * (1.0 - max(added, 0) / total))))
    if policy is Policy.TOPOLOGY:
        # Half the scale for staying inside the gang's domain, half for packing.
        return min(10, (5 if in_domain else 0) + round(5 * used))
    # In order: inside the gang's domain; no new GPU fragment (a sliver of a device, or free
    # GPUs stranded without CPU); the fuller node.
    tidy = added <= 0
    if in_domain is None:
        return (5 if tidy else 0) + round(4 * used)
    return (5 if in_domain else 0) + (2 if tidy else 0) + round(2 * used)


def domain_cost(policy: Policy, caps_after: Iterable[NodeCapacity]) -> tuple[int, ...]:
    """Compare whole plans (one per topology domain): lower is better.

    ``caps_after`` is every node of the domain after the plan, so a full domain costs less
    under binpack and topology, more under spread.
    """
    caps = list(caps_after)
    whole = sum(c.whole_free for c in caps)
    milli = sum(c.gpu_milli_free for c in caps)
    cpu = sum(c.free.get(CPU, 0) for c in caps)
    if policy is Policy.SPREAD:
        return (-whole, -milli, -cpu)
    if policy is Policy.FRAGMENTATION:
        return (sum(fragmentation(c) for c in caps), whole, milli)
    return (whole, milli, cpu)
