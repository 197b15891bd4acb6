"""When greedy placement fails: prove the gang cannot fit, or search for a placement.

Two tools, both per node (a pod fits one node or it does not):

- :func:`could_fit`, necessary conditions that are cheap to check: every role has, summed over
  its eligible nodes, room for the pods it needs *counted node by node* (how many of its pods
  fit on each node); and with several roles, the gang's total demand of each resource is at
  most what the nodes it may use have free in total, and every group of roles that request one
  resource fits, per node, no more pods than that resource divided by the group's smallest
  request of it. When one fails no placement exists, and the search is skipped. (The sums
  only prove impossibility; reasons people read still name one node's shortfall.)
- :func:`search`, a bounded depth-first search over pod -> node assignments. Interchangeable
  pods (same role) are placed in node order; of interchangeable nodes (same capacity now, same
  eligibility) only the first is tried. Per role, and per group of roles competing for a
  resource, it keeps how many pods the nodes left could still take, and backs off once that
  is too few. Failed states are remembered. On small instances it finishes, so placement is
  never weaker than exhaustive search there.

Pure and deterministic: nodes in name order, ties broken by name.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from extender.core.gang.capacity import CapacityView, classes_of
from extender.core.gang.charging import count_fitting, take
from extender.core.gang.nodecapacity import DEVICE, Demand, NodeCapacity
from extender.core.model.resources import CPU
from extender.core.model.values import NodeName

Assignment = dict[tuple[NodeName, str], int]

CLASSES_FROM = 256
"""From this many nodes on, count room by capacity class instead of node by node."""


def _split(cap_of: Mapping[NodeName, NodeCapacity]) -> tuple[
    Mapping[NodeName, NodeCapacity], Mapping[NodeName, NodeCapacity]
]:
    if isinstance(cap_of, CapacityView):
        return cap_of.base, cap_of.changes
    return cap_of, {}


def room_for(
    demand: Demand, nodes: Sequence[NodeName], *, cap_of: Mapping[NodeName, NodeCapacity],
    enough: int,
) -> int:
    """How many pods of ``demand`` fit on ``nodes``, counted per node and then added up; the
    count may stop early once it reaches ``enough``."""
    base, changed = _split(cap_of)
    if len(nodes) >= CLASSES_FROM and len(nodes) == len(base):
        # Every node: rank capacity classes, not 5,000 nodes.
        total = sum(count_fitting(cap, demand) * len(names)
                    for cap, names in classes_of(base).items())
        for name, cap in changed.items():
            if name in base:
                total += count_fitting(cap, demand) - count_fitting(base[name], demand)
        return total
    total = 0
    for name in nodes:
        total += count_fitting(cap_of[name], demand)
        if total >= enough:
            break
    return total


def _weighted(nodes: Sequence[NodeName], cap_of: Mapping[NodeName, NodeCapacity],
              ) -> list[tuple[NodeCapacity, int]]:
    """``nodes``' capacities with the number of times each counts: one per node, or, over
    every node of a large cluster, one per class of identical capacity (with the changed
    nodes counted in and their base taken out)."""
    base, changed = _split(cap_of)
    if len(nodes) >= CLASSES_FROM and len(nodes) == len(base):
        weighted = [(cap, len(names)) for cap, names in classes_of(base).items()]
        weighted += [(cap, 1) for name, cap in changed.items() if name in base]
        weighted += [(base[name], -1) for name in changed if name in base]
        return weighted
    return [(cap_of[name], 1) for name in nodes]


def free_whole(nodes: Sequence[NodeName], cap_of: Mapping[NodeName, NodeCapacity]) -> int:
    """Whole devices free on ``nodes``, added up (``free_totals(...)["gpu:whole"]``, alone)."""
    return sum(cap.whole_free * k for cap, k in _weighted(nodes, cap_of))


def free_totals(nodes: Sequence[NodeName], cap_of: Mapping[NodeName, NodeCapacity]) -> dict[
    str, int | None
]:
    """Free amounts of ``nodes`` added up: scalar resources, whole devices, GPU milli, pod
    slots (``None`` when some node has no pod limit)."""
    out: dict[str, int | None] = {"gpu:whole": 0, "gpu:milli": 0, "pods": 0}
    for cap, k in _weighted(nodes, cap_of):
        for name, amount in cap.free.items():
            out[name] = (out.get(name) or 0) + max(amount, 0) * k
        out["gpu:whole"] = (out["gpu:whole"] or 0) + cap.whole_free * k
        out["gpu:milli"] = (out["gpu:milli"] or 0) + cap.gpu_milli_free * k
        slots = out["pods"]
        out["pods"] = None if slots is None or cap.pods is None else slots + max(cap.pods, 0) * k
    return out


_Group = tuple[tuple[tuple[str, int], ...], int, int]
"""What a group of roles all request: ``(smallest scalar requests, smallest whole GPUs when
every role takes whole GPUs else 0, smallest GPU milli of one device otherwise else 0)``."""


def _group_of(group: Sequence[Demand]) -> _Group | None:
    """The resources every demand of ``group`` requests (``None``: none in common)."""
    common = set(group[0].scalar)
    for d in group[1:]:
        common &= set(d.scalar)
    smallest = tuple(sorted((k, min(d.scalar[k] for d in group)) for k in common))
    whole = min(d.whole for d in group) if all(d.whole for d in group) else 0
    unit = 0 if whole or not all(d.gpu_milli for d in group) else min(
        d.share or DEVICE for d in group)
    if not smallest and not whole and not unit:
        return None
    return smallest, whole, unit


def _group_room(cap: NodeCapacity, group: _Group) -> int:
    """At most how many pods of a group fit on a node together: for every resource each of
    them requests, what is free divided by the group's smallest request of it (a sharing pod
    takes at least that much of one device; a whole-GPU pod at least that many devices)."""
    smallest, whole, unit = group
    bound = cap.pods if cap.pods is not None else 1 << 30
    for name, amount in smallest:
        bound = min(bound, max(cap.free.get(name, 0), 0) // amount)
    if whole:
        bound = min(bound, max(cap.whole_free, 0) // whole)
    if unit:
        bound = min(bound, sum(max(dev, 0) // unit for dev in cap.devices))
    return max(bound, 0)


def _groups(demands: Sequence[tuple[str, int, Demand]]) -> list[tuple[tuple[str, ...], _Group]]:
    """Groups of two or more roles (of at most five) that compete for some resource."""
    needed = [(role, demand) for role, need, demand in demands if need]
    if len(needed) > 5:
        return []
    out = []
    for size in range(2, len(needed) + 1):
        for chosen in combinations(needed, size):
            group = _group_of([d for _, d in chosen])
            if group is not None:
                out.append((tuple(role for role, _ in chosen), group))
    return out


def _group_bound(
    group: _Group, nodes: Sequence[NodeName], *, cap_of: Mapping[NodeName, NodeCapacity],
) -> int:
    base, changed = _split(cap_of)
    if len(nodes) >= CLASSES_FROM and len(nodes) == len(base):
        weighted = [(cap, len(names)) for cap, names in classes_of(base).items()]
        weighted += [(cap, 1) for name, cap in changed.items() if name in base]
        weighted += [(base[name], -1) for name in changed if name in base]
    else:
        weighted = [(cap_of[name], 1) for name in nodes]
    return sum(_group_room(cap, group) * k for cap, k in weighted)


def could_fit(
    demands: Sequence[tuple[str, int, Demand]], eligible: Mapping[str, Sequence[NodeName]], *,
    cap_of: Mapping[NodeName, NodeCapacity],
) -> bool:
    """``False`` only if no placement of ``(role, pods needed, demand)`` can exist."""
    for role, need, demand in demands:
        if need and room_for(demand, eligible.get(role, ()), cap_of=cap_of,
                             enough=need) < need:
            return False
    if len([d for d in demands if d[1]]) < 2:
        return True
    union = sorted({n for role, need, _ in demands if need for n in eligible.get(role, ())})
    free = free_totals(union, cap_of)
    wanted: dict[str, int] = {}
    for _, need, demand in demands:
        for name, amount in demand.scalar.items():
            wanted[name] = wanted.get(name, 0) + amount * need
        wanted["gpu:whole"] = wanted.get("gpu:whole", 0) + demand.whole * need
        wanted["gpu:milli"] = wanted.get("gpu:milli", 0) + demand.gpu_milli * need
        wanted["pods"] = wanted.get("pods", 0) + need
    for name, amount in wanted.items():
        have = free.get(name, 0)
        if have is not None and amount > have:
            return False
    # Groups of roles competing for one resource: 12-CPU pods of two roles on 20-CPU nodes
    # fit one per node, however the totals add up.
    need_of = {role: need for role, need, _ in demands}
    for roles, group in _groups(demands):
        nodes = sorted({n for role in roles for n in eligible.get(role, ())})
        if _group_bound(group, nodes, cap_of=cap_of) < sum(need_of[r] for r in roles):
            return False
    return True


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
    groups = _groups(demands)
    group_memo: dict[tuple[int, int], int] = {}

    def group_fit(cid: int, g: int) -> int:
        n = group_memo.get((cid, g))
        if n is None:
            n = group_memo[(cid, g)] = _group_room(caps[cid], groups[g][1])
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
