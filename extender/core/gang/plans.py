"""The planner's values: what a gang still needs (:class:`RoleDemand`), and its answer, a
:class:`Plan` or why not (:class:`Infeasible`).

Values only: nothing here searches, counts capacity or reads a snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from extender.core.model.values import Gang, GangKey, NodeName, PodShape


@dataclass(frozen=True, slots=True)
class RoleDemand:
    """Pods of one role the gang still needs placed."""

    role: str
    shape: PodShape
    need: int
    """Pods that must be placed for the gang to reach its minimum."""
    extra: int = 0
    """Pods beyond the minimum, placed only where they fit after the minimum is placed."""
    first: bool = False
    """Packed before every other demand: one member whose own pod may use only some of its
    role's nodes (:mod:`~extender.core.gang.narrowed`), the most constrained."""

@dataclass(frozen=True, slots=True)
class Plan:
    """Which node takes how many pods of which role."""

    gang: GangKey
    slots: tuple[tuple[NodeName, str, int], ...]
    """``(node, role, pods)`` sorted by node then role; pods > 0."""
    shapes: tuple[tuple[str, PodShape], ...] = ()
    """Each planned role's pod shape, sorted by role."""
    domain: str | None = None
    """The topology domain the plan keeps to, if any."""
    required: int = 0
    """Pods of the plan that the gang's minimum needs (the rest are elastic extras)."""
    subgroup_domains: tuple[tuple[str, str], ...] = ()
    """``(subgroup, domain)`` for a gang whose subgroups each keep to a domain of their own."""
    placed: tuple[tuple[str, int], ...] = ()
    """``(role, pods)`` of the gang bound or in flight when the plan was made, sorted by role:
    the slots are for the rest, so the plan is filled once a role has these and its slots'
    pods placed (:meth:`~extender.core.gang.ledger.Ledger.settle`), not its slots' alone."""
    kept_for: tuple[tuple[str, NodeName, str], ...] = ()
    """``(pod uid, node, role)``, sorted: a slot (counted in :attr:`slots`) kept for one
    member whose own pod may go only to some of its role's nodes (an allocated
    ResourceClaim's node: :mod:`~extender.core.gang.narrowed`); other members are not sent
    there while it is still to be placed."""
    narrowed: tuple[str, ...] = ()
    """UIDs of the members the plan was made with their own node constraints, sorted: those
    without a slot in :attr:`kept_for` are extras that did not fit there."""
    _by_role: dict[str, tuple[NodeName, ...]] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )
    _counts: dict[tuple[NodeName, str], int] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )
    _nodes: set[NodeName] = field(default_factory=set, init=False, compare=False, hash=False,
                                  repr=False)

    def __post_init__(self) -> None:
        # Indexed once: the filter of every pinned member asks these, and every bind asks
        # each other plan whether it has a slot on the bind's node.
        by_role: dict[str, list[NodeName]] = {}
        for node, role, n in self.slots:
            by_role.setdefault(role, []).append(node)
            self._counts[(node, role)] = n
            self._nodes.add(node)
        self._by_role.update({r: tuple(ns) for r, ns in by_role.items()})

    def uses(self, node: NodeName) -> bool:
        """Whether the plan has a slot on ``node``."""
        return node in self._nodes

    @property
    def pods(self) -> int:
        return sum(n for _, _, n in self.slots)

    def nodes_for(self, role: str) -> tuple[NodeName, ...]:
        return self._by_role.get(role, ())

    def count(self, node: NodeName, role: str) -> int:
        return self._counts.get((node, role), 0)

    def shape(self, role: str) -> PodShape | None:
        for r, s in self.shapes:
            if r == role:
                return s
        return None

    def by_node(self) -> dict[NodeName, dict[str, int]]:
        out: dict[NodeName, dict[str, int]] = {}
        for node, role, n in self.slots:
            out.setdefault(node, {})[role] = n
        return out

@dataclass(frozen=True, slots=True)
class Infeasible:
    gang: GangKey
    reason: str
    placed: int
    """Pods of the minimum that would fit (best attempt)."""
    needed: int


def gang_demands(gang: Gang, placed: Mapping[str, int] | None = None) -> list[RoleDemand]:
    """What a gang still needs: per role, its minimum minus pods already placed (bound or in
    flight), plus the elastic extras up to the role's full count."""
    placed = placed or {}
    out = []
    for member in gang.members:
        have = placed.get(member.role, 0)
        need = max(0, member.min_count - have)
        extra = max(0, member.count - max(have, member.min_count))
        if need or extra:
            out.append(RoleDemand(member.role, member.shape, need=need, extra=extra))
    return out
