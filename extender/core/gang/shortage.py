"""Why a gang does not fit, in words: the shortage on the nodes a role may use, and the
topology domains a failure names.

Explanations only: nothing here places a pod or decides whether a gang fits; the planner
calls these once it has failed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from extender.core.gang.capacity import CapacityView
from extender.core.gang.nodecapacity import Demand, NodeCapacity
from extender.core.model.quantity import format_quantity
from extender.core.model.resources import MEMORY, UNCOUNTABLE_PREFIX, device_phrase
from extender.core.model.values import NodeName

SHOWN_DOMAINS = 8
"""Domains a failure names one by one (each with why); the rest are counted."""


def shortage(
    pods: tuple[str, Demand, int], nodes: Sequence[NodeName], *,
    cap_of: Mapping[NodeName, NodeCapacity], gpu: str,
) -> str:
    """Why one more pod of ``pods`` (role, demand, pods left) fits on none of ``nodes``,
    naming the largest free. Pods left (not 0) say the pods that fit took their room in
    ``cap_of``, and the reason says so: "1 of 4 pods fit; ... the largest free is 0" would
    read as a contradiction. 0: nothing was placed."""
    role, demand, left = pods
    caps = [cap_of[n] for n in nodes]
    if caps and all(c.pods is not None and c.pods < 1 for c in caps):
        return (f"a {role} needs a pod slot on one node, and every eligible node has reached "
                f"its pods limit")
    needs, after = f"a {role} needs", ""
    if left:
        needs = (f"the {role} pod left needs" if left == 1 else
                 f"each of the {left} {role} pods left needs")
        after = " once those that fit are placed"
    if demand.whole:
        largest = max((c.whole_free for c in caps), default=0)
        if largest < demand.whole:
            return (f"{needs} {demand.whole} {gpu} on one node, "
                    f"the largest free is {largest}{after}")
    if demand.share:
        largest = max((d for c in caps for d in c.devices), default=0)
        if largest < demand.share:
            return (f"{needs} {demand.share}m of one {gpu} device, "
                    f"the largest free device has {max(largest, 0)}m{after}")
    # What cannot be counted at all first: its reason says why, not a shortfall.
    for name, amount in sorted(demand.scalar.items(),
                               key=lambda kv: not kv[0].startswith(UNCOUNTABLE_PREFIX)):
        largest = max((c.free.get(name, 0) for c in caps), default=0)
        if largest < amount:
            phrase = device_phrase(name, amount)
            if phrase is not None:
                if name.startswith(UNCOUNTABLE_PREFIX):
                    return f"a {role} waits: its {phrase}"
                return (f"{needs} {phrase} on one node, the most free is "
                        f"{max(largest, 0) // 1000}{after}")
            binary = name == MEMORY
            free = format_quantity(max(largest, 0), binary=binary)
            return (f"{needs} {name}={format_quantity(amount, binary=binary)} on one "
                    f"node, the largest free is {free}{after}")
    return (f"no node has all of a {role}'s demand free at once "
            f"({len(nodes)} eligible node{'s' if len(nodes) != 1 else ''})")


def list_taken(taken: Mapping[str, str]) -> str:
    items = sorted(taken.items())
    shown = "; ".join(f"{v} ({why})" for v, why in items[:SHOWN_DOMAINS])
    more = len(items) - SHOWN_DOMAINS
    return shown + (f"; and {more} more" if more > 0 else "")


def failure_detail(
    failed: tuple[str, Demand, int] | None, eligible: Mapping[str, Sequence[NodeName]], *,
    domain_nodes: Sequence[NodeName] | None, free: Mapping[NodeName, NodeCapacity], gpu: str,
) -> str:
    """Why the role a greedy attempt stopped at (``failed``: role, demand, pods left) fits
    nowhere, on ``free``, the capacity the attempt left (a :class:`CapacityView` whose
    changes are the pods the attempt placed)."""
    assert failed is not None  # only called for a failed greedy attempt
    role, demand, left = failed
    placed = isinstance(free, CapacityView) and bool(free.changes)
    nodes = list(eligible.get(role, ()))
    if domain_nodes is not None:
        inside = set(domain_nodes)
        nodes = [n for n in nodes if n in inside]
    if not nodes:
        return f"no node accepts a {role} (see its nodeSelector, affinity and tolerations)"
    return shortage((role, demand, left if placed else 0), nodes, cap_of=free, gpu=gpu)
