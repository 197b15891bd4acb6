"""Which gang gives way when gangs held at the bind barrier wait for each other.

Each gang in a deadlock holds capacity (members at the barrier, a reservation) that another
one in it needs, so none completes before its barrier times out, and then all of them fail
together and may deadlock again. Breaking it early and on purpose lets one complete: the gang
that yields is the one with the lowest priority, then the youngest (then by key).

Pure: :func:`decide_yields` reads the snapshot and the ledger and changes neither. The caller
applies each :class:`Yield` as it does a barrier timeout::

    for y in decide_yields(snapshot=s, ledger=ledger, now=now, settings=settings):
        decision = withdraw(y.gang, ledger=ledger, reason=y.reason)
        ...  # fail every (pod, node) in decision.rejected, as for an expired barrier
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from extender.core.decide.graph import wait_for_graph, yielder
from extender.core.decide.settings import CoreSettings
from extender.core.gang.capacity import gang_priority
from extender.core.gang.ledger import Ledger
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import GangKey


@dataclass(frozen=True, slots=True)
class Yield:
    """A gang to withdraw (fail its members at the barrier, drop its plan) to end a deadlock."""

    gang: GangKey
    reason: str
    cycle: tuple[GangKey, ...]
    """The gangs waiting on each other, starting with this one: each waits for the next."""


def decide_yields(
    *, snapshot: ClusterSnapshot, ledger: Ledger, now: float, settings: CoreSettings
) -> list[Yield]:
    """The gangs that must yield now, one per deadlock (more where breaking one cycle leaves
    another), in a deterministic order. Empty in the common case: no gang is held at the
    barrier, or none that is held is stuck. Call it after ``ledger.expire(now)``."""
    del now  # the answer depends on state only; kept for the decisions' uniform signature
    if len(ledger.barriers()) < 2:
        return []
    g = wait_for_graph(snapshot, ledger, gpu=settings.gpu_resource, policy=settings.policy,
                       budget=settings.search_budget)
    out: list[Yield] = []
    while True:
        stuck = sorted((sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1),
                       key=lambda c: c[0])
        if not stuck:
            return out
        for component in stuck:
            gang = yielder(component, snapshot.gangs, lambda g: gang_priority(
                g, snapshot, gpu=settings.gpu_resource))
            cycle = _cycle_from(g, gang)
            path = " -> ".join([*cycle, cycle[0]])
            reason = (f"gang {gang} yields to end a deadlock at the bind barrier ({path}: each "
                      "waits for capacity the next holds); it has the lowest priority, then is "
                      "the youngest")
            out.append(Yield(gang, reason, cycle))
            g.remove_node(gang)


def _cycle_from(g: nx.DiGraph, start: GangKey) -> tuple[GangKey, ...]:
    """A shortest cycle through ``start`` (ties: smallest keys first)."""
    best: list[GangKey] | None = None
    for succ in sorted(g.successors(start)):
        try:
            back = nx.shortest_path(g, succ, start)
        except nx.NetworkXNoPath:
            continue
        path = [start, *back[:-1]]
        if best is None or (len(path), path) < (len(best), best):
            best = path
    assert best is not None  # ``start`` lies in a strongly connected component of 2 or more
    return tuple(best)
