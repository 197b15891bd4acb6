"""When greedy placement fails: search for a placement.

:func:`search` is a bounded depth-first search over pod -> node assignments, per node (a pod
fits one node or it does not). Interchangeable pods (same role) are placed in node order; of
interchangeable nodes (same capacity now, same eligibility) only the first is tried. Per role,
and per group of roles competing for a resource, it keeps how many pods the nodes left could
still take, and backs off once that is too few. Failed states are remembered. On small
instances it finishes, so placement is never weaker than exhaustive search there. Before it
runs, :func:`~extender.core.gang.fit_conditions.could_fit` proves most gangs that cannot fit
impossible (re-exported here with the room counts).

Pure and deterministic: nodes in name order, ties broken by name.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from extender.core.gang.charging import count_fitting, take
from extender.core.gang.fit_conditions import (
    could_fit,
    free_totals,
    free_whole,
    role_groups,
    room_for,
    room_of_group,
)
from extender.core.gang.nodecapacity import Demand, NodeCapacity
from extender.core.model.resources import CPU
from extender.core.model.values import NodeName

__all__ = ["Assignment", "could_fit", "free_totals", "free_whole", "room_for", "search"]

Assignment = dict[tuple[NodeName, str], int]


class _Counts:
    """Per node index, how many pods of one role fit there; sums over index ranges in
    O(log n) (a Fenwick tree), kept up to date as the search changes nodes."""

    __slots__ = ("tree", "values")

    def __init__(self, values: list[int]) -> None:
        self.values = list(values)
        self.tree = [0] * (len(values) + 1)
        for i, v in enumerate(values):
            self._add(i, v)

    def _add(self, i: int, delta: int) -> None:
        i += 1
        while i < len(self.tree):
            self.tree[i] += delta
            i += i & -i

    def set(self, i: int, value: int) -> None:
        if value != self.values[i]:
            self._add(i, value - self.values[i])
            self.values[i] = value

    def total(self) -> int:
        return self.prefix(len(self.values))

    def prefix(self, end: int) -> int:
        """Sum of the values at indexes below ``end``."""
        out = 0
        while end > 0:
            out += self.tree[end]
            end -= end & -end
        return out


@dataclass(slots=True)
class _Frame:
    """One level of :func:`search`: where pod ``i`` may go and which of those is tried now."""

    i: int
    state: tuple[int, int, tuple[tuple[int, int], ...]]
    candidates: list[int]
    next: int = 0
    tried: int | None = None
    previous: int | None = None
    """The tried node's capacity before this pod (``None``: untouched)."""


def _fullness(cap: NodeCapacity) -> tuple[int, int, int]:
    return (cap.whole_free, cap.gpu_milli_free, cap.free.get(CPU, 0))


def search(
    demands: Sequence[tuple[str, int, Demand]], eligible: Mapping[str, Sequence[NodeName]], *,
    cap_of: Mapping[NodeName, NodeCapacity], budget: int,
) -> tuple[Assignment, dict[NodeName, NodeCapacity]] | None:
    """A placement of every needed pod, as ``(assignment, changed capacities)``; ``None`` if
    none exists or ``budget`` placements were tried without finding one.

    Besides the symmetry breaking, each step keeps, per role, how many of its pods the nodes
    could still take (counted per node), and backs off as soon as that is less than the role's
    pods still to place on the nodes left to them. Capacities are interned as small numbers,
    and what fits in each (and what is left after one more pod) is computed once.
    """
    pods = [(role, demand) for role, need, demand in demands for _ in range(need)]
    roles = [role for role, need, _ in demands if need]
    demand_of_role = {role: demand for role, need, demand in demands if need}
    allowed = {role: frozenset(eligible.get(role, ())) for role in roles}
    universe = sorted(set().union(*allowed.values())) if allowed else []
    signature = [tuple(r for r in roles if n in allowed[r]) for n in universe]

    caps: list[NodeCapacity] = []
    ids: dict[NodeCapacity, int] = {}

    def intern(cap: NodeCapacity) -> int:
        found = ids.get(cap)
        if found is None:
            found = ids[cap] = len(caps)
            caps.append(cap)
        return found

    fit_memo: dict[tuple[int, str], int] = {}

    def fit(cid: int, role: str) -> int:
        n = fit_memo.get((cid, role))
        if n is None:
            n = fit_memo[(cid, role)] = count_fitting(caps[cid], demand_of_role[role])
        return n

    after_memo: dict[tuple[int, str], int] = {}

    def after(cid: int, role: str) -> int:
        nxt = after_memo.get((cid, role))
        if nxt is None:
            nxt = after_memo[(cid, role)] = intern(take(caps[cid], demand_of_role[role]))
        return nxt

    base_id = [intern(cap_of[n]) for n in universe]
    grouped: dict[tuple[int, tuple[str, ...]], list[int]] = {}
    for i in range(len(universe)):
        grouped.setdefault((base_id[i], signature[i]), []).append(i)
    # Per role: the classes of nodes it may use that could hold one of its pods at all.
    classes = {role: [(cid, sig, idxs) for (cid, sig), idxs in grouped.items()
                      if role in sig and fit(cid, role) > 0] for role in roles}
    room = {role: _Counts([fit(base_id[i], role) if role in signature[i] else 0
                           for i in range(len(universe))]) for role in roles}
    groups = role_groups(demands)
    group_memo: dict[tuple[int, int], int] = {}

    def group_fit(cid: int, g: int) -> int:
        n = group_memo.get((cid, g))
        if n is None:
            n = group_memo[(cid, g)] = room_of_group(caps[cid], groups[g][1])
        return n

    group_nodes = [[i for i in range(len(universe)) if set(roles_g) & set(signature[i])]
                   for roles_g, _ in groups]
    group_room = [_Counts([group_fit(base_id[i], g) if i in set(group_nodes[g]) else 0
                           for i in range(len(universe))]) for g in range(len(groups))]
    in_group = [[g for g, (roles_g, _) in enumerate(groups) if set(roles_g) & set(sig)]
                for sig in signature]
    left_at = [Counter(role for role, _ in pods[i:]) for i in range(len(pods) + 1)]
    fullness: dict[int, tuple[int, int, int]] = {}
    working: dict[int, int] = {}
    """Node index -> interned capacity, for the nodes the search changed."""
    chosen: list[int] = []
    failed: set[tuple[int, int, tuple[tuple[int, int], ...]]] = set()
    spent = 0

    def rank(cid: int) -> tuple[int, int, int]:
        key = fullness.get(cid)
        if key is None:
            key = fullness[cid] = _fullness(caps[cid])
        return key

    def candidates(role: str, low: int) -> list[int]:
        # Nodes in the same state (capacity and eligibility) are interchangeable: try the one
        # with the lowest index, since later pods of this role may only go on from there.
        first: dict[tuple[int, tuple[str, ...]], int] = {}
        for idx, cid in working.items():
            twin = (cid, signature[idx])
            if idx >= low and role in twin[1] and fit(cid, role) > 0 and (
                    first.get(twin, idx) >= idx):
                first[twin] = idx
        for cid, sig, idxs in classes[role]:
            j = bisect_left(idxs, low)
            while j < len(idxs) and idxs[j] in working:
                j += 1
            if j < len(idxs) and first.get((cid, sig), idxs[j]) >= idxs[j]:
                first[(cid, sig)] = idxs[j]
        # Fullest first (best fit, the way greedy packs), then by name.
        return sorted(first.values(), key=lambda idx: (rank(working.get(idx, base_id[idx])),
                                                       idx))

    def move(idx: int, cid: int | None) -> None:
        """Node ``idx`` now has capacity ``cid`` (``None``: back to untouched)."""
        now = base_id[idx] if cid is None else cid
        for r in signature[idx]:
            room[r].set(idx, fit(now, r))
        for g in in_group[idx]:
            group_room[g].set(idx, group_fit(now, g))
        if cid is None:
            del working[idx]
        else:
            working[idx] = cid

    def enter(i: int) -> _Frame | bool:
        """The frame placing pod ``i``; ``True`` when every pod is placed, ``False`` when the
        bounds or a remembered failure rule this state out."""
        if i == len(pods):
            return True
        role = pods[i][0]
        low = chosen[-1] if i > 0 and pods[i - 1][0] == role else 0
        # Bound: each role's pods still to place must fit, counted node by node, on the nodes
        # left to it (this role's run only goes on from node ``low``).
        for r, n in left_at[i].items():
            have = room[r].total() - (room[r].prefix(low) if r == role else 0)
            if have < n:
                return False
        for g, (roles_g, _) in enumerate(groups):
            if group_room[g].total() < sum(left_at[i][r] for r in roles_g):
                return False
        state = (i, low, tuple(sorted(working.items())))
        if state in failed:
            return False
        return _Frame(i=i, state=state, candidates=candidates(role, low))

    def placed() -> bool:
        # Depth-first over pods with an explicit stack: one frame per pod placed, so a gang
        # of thousands of pods never meets the interpreter's recursion limit.
        nonlocal spent
        first = enter(0)
        if isinstance(first, bool):
            return first
        stack = [first]
        while stack:
            frame = stack[-1]
            if frame.tried is not None:  # the pod placed there led nowhere: take it back
                chosen.pop()
                move(frame.tried, frame.previous)
                frame.tried = None
            if frame.next >= len(frame.candidates):
                failed.add(frame.state)
                stack.pop()
                continue
            idx = frame.candidates[frame.next]
            frame.next += 1
            spent += 1
            if spent > budget:
                return False
            previous = working.get(idx)
            move(idx, after(base_id[idx] if previous is None else previous,
                            pods[frame.i][0]))
            chosen.append(idx)
            frame.tried, frame.previous = idx, previous
            child = enter(frame.i + 1)
            if child is True:
                return True
            if isinstance(child, _Frame):
                stack.append(child)
        return False

    if not placed():
        return None
    assignment: Assignment = {}
    for (role, _), idx in zip(pods, chosen, strict=True):
        slot = (universe[idx], role)
        assignment[slot] = assignment.get(slot, 0) + 1
    return assignment, {universe[i]: caps[cid] for i, cid in working.items()}
