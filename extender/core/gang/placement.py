"""Place a whole gang, or say why it cannot be placed.

Every check is per node: a pod fits a node or it does not, and capacity is never summed across
nodes. The planner runs in two steps:

1. greedy: roles largest shape first; each role's pods go to candidate nodes in the scoring
   policy's order (best fit under binpack), as many per node as fit;
2. when greedy fails, cheap necessary conditions first
   (:func:`~extender.core.gang.search.could_fit`: a gang that cannot fit is answered at once),
   then a bounded depth-first search
   (:func:`~extender.core.gang.search.search`). On small instances it finishes, so the planner is
   never weaker than exhaustive search there.

With a topology constraint each domain (sorted) is tried alone and the best plan by the policy's
:func:`~extender.core.gang.scoring.domain_cost` wins; a preferred constraint falls back to all
nodes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from extender.core.gang.capacity import (
    CapacityView,
    Demand,
    NodeCapacity,
    classes_of,
    count_fitting,
    demand_of,
    index_of,
    take,
)
from extender.core.gang.constraints import (
    eligible_nodes,
    exclusive_fences,
    ineligibility_summary,
    topology_domains,
)
from extender.core.gang.scoring import Policy, domain_cost, node_order_key
from extender.core.gang.search import Assignment, could_fit, room_for, search
from extender.core.gang.subgroups import Fit, assign_domains, units_of
from extender.core.model.quantity import format_quantity
from extender.core.model.resources import GPU, MEMORY, UNCOUNTABLE_PREFIX, device_phrase
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import (
    Gang,
    GangKey,
    NodeName,
    PodShape,
    SubgroupTopology,
    TopologyConstraint,
)

SEARCH_BUDGET = 10_000
"""Placements the fallback search may try before giving up (greedy's answer stands). A step
costs a few microseconds, so a search that runs out takes tens of milliseconds; gangs that
cannot fit are usually proved so before any search
(:func:`~extender.core.gang.search.could_fit`)."""


@dataclass(frozen=True, slots=True)
class RoleDemand:
    """Pods of one role the gang still needs placed."""

    role: str
    shape: PodShape
    need: int
    """Pods that must be placed for the gang to reach its minimum."""
    extra: int = 0
    """Pods beyond the minimum, placed only where they fit after the minimum is placed."""


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



@dataclass
class _Attempt:
    assignment: Assignment
    working: dict[NodeName, NodeCapacity]
    placed: int
    failed: tuple[str, Demand, int] | None  # role, demand, pods left unplaced


def _order(demands: Sequence[RoleDemand], gpu: str) -> list[tuple[RoleDemand, Demand]]:
    pairs = [(d, demand_of(d.shape, gpu=gpu)) for d in demands]
    return sorted(pairs, key=lambda p: (p[1].sort_key(), p[0].role))


SMALL = 256
"""Below this many eligible nodes, rank nodes one by one; above it, rank capacity classes."""


def _fill(
    role: str, demand: Demand, count: int, nodes: Sequence[NodeName], *,
    cap_of: Mapping[NodeName, NodeCapacity], attempt: _Attempt, policy: Policy,
) -> int:
    """Put up to ``count`` pods on ``nodes`` in policy order; return how many did not fit."""
    if count <= 0:
        return 0
    ranked = (_rank_nodes if len(nodes) < SMALL else _rank_classes)(
        demand, nodes, cap_of=cap_of, working=attempt.working, policy=policy)
    left = count
    for name in ranked:
        cap = attempt.working.get(name) or cap_of[name]
        n = min(count_fitting(cap, demand), left)
        if n <= 0:
            continue
        attempt.working[name] = take(cap, demand, n)
        slot = (name, role)
        attempt.assignment[slot] = attempt.assignment.get(slot, 0) + n
        attempt.placed += n
        left -= n
        if left == 0:
            break
    return left


_UNRANKED: tuple[int, ...] = (-1,)
"""Not ranked yet in this call (a rank is a sort key; ``None``: the pod does not fit)."""


def _rank_nodes(
    demand: Demand, nodes: Sequence[NodeName], *, cap_of: Mapping[NodeName, NodeCapacity],
    working: Mapping[NodeName, NodeCapacity], policy: Policy,
) -> list[NodeName]:
    keyed = []
    # Nodes of a pool mostly share a few capacities: each is ranked once per call.
    ranks: dict[NodeCapacity, tuple[int, ...] | None] = {}
    for name in nodes:
        cap = working.get(name) or cap_of[name]
        rank = ranks.get(cap, _UNRANKED)
        if rank is _UNRANKED:
            rank = ranks[cap] = (node_order_key(policy, cap, demand)
                                 if count_fitting(cap, demand) > 0 else None)
        if rank is not None:
            keyed.append((rank, name))
    keyed.sort()
    return [name for _, name in keyed]


def _rank_classes(
    demand: Demand, nodes: Sequence[NodeName], *, cap_of: Mapping[NodeName, NodeCapacity],
    working: Mapping[NodeName, NodeCapacity], policy: Policy,
) -> Iterator[NodeName]:
    """Policy order over thousands of nodes without touching each: untouched nodes are ranked
    by their capacity class, changed nodes one by one; names break ties within a class."""
    if isinstance(cap_of, CapacityView):
        base, changed = cap_of.base, cap_of.changes
    else:
        base, changed = cap_of, {}
    touched = set(changed) | set(working)
    allowed = None if len(nodes) == len(base) else frozenset(nodes)
    # (key, first name, is a touched node, names)
    groups: list[tuple[tuple[int, ...], str, bool, Sequence[NodeName]]] = []
    for cap, names in classes_of(base).items():
        if count_fitting(cap, demand) > 0:
            groups.append((node_order_key(policy, cap, demand), names[0], False, names))
    for name in sorted(touched):
        if allowed is not None and name not in allowed:
            continue
        cap = working.get(name) or cap_of[name]
        if count_fitting(cap, demand) > 0:
            groups.append((node_order_key(policy, cap, demand), name, True, (name,)))
    groups.sort(key=lambda group: group[:3])  # a name is in one group: never a tie
    for _, _, is_touched, run in groups:
        for name in run:
            if is_touched or (name not in touched and (allowed is None or name in allowed)):
                yield name


def _greedy(
    ordered: list[tuple[RoleDemand, Demand]], eligible: Mapping[str, Sequence[NodeName]], *,
    cap_of: Mapping[NodeName, NodeCapacity], policy: Policy,
) -> _Attempt:
    attempt = _Attempt(assignment={}, working={}, placed=0, failed=None)
    for rd, demand in ordered:
        left = _fill(rd.role, demand, rd.need, eligible.get(rd.role, ()), cap_of=cap_of,
                     attempt=attempt, policy=policy)
        if left and attempt.failed is None:
            attempt.failed = (rd.role, demand, left)
    return attempt


def _search(
    ordered: list[tuple[RoleDemand, Demand]], eligible: Mapping[str, Sequence[NodeName]], *,
    cap_of: Mapping[NodeName, NodeCapacity], budget: int,
) -> _Attempt | None:
    """A placement of every required pod after greedy failed; ``None`` if none exists (proved
    by :func:`~extender.core.gang.search.could_fit` or by the search) or the budget ran out."""
    demands = [(rd.role, rd.need, demand) for rd, demand in ordered]
    if not could_fit(demands, eligible, cap_of=cap_of):
        return None
    found = search(demands, eligible, cap_of=cap_of, budget=budget)
    if found is None:
        return None
    assignment, working = found
    return _Attempt(assignment=assignment, working=working, placed=sum(assignment.values()),
                    failed=None)


def _shortage(
    role: str, demand: Demand, nodes: Sequence[NodeName], *,
    cap_of: Mapping[NodeName, NodeCapacity], gpu: str,
) -> str:
    """Why one more pod of ``role`` fits on none of ``nodes``, naming the largest free."""
    caps = [cap_of[n] for n in nodes]
    if caps and all(c.pods is not None and c.pods < 1 for c in caps):
        return (f"a {role} needs a pod slot on one node, and every eligible node has reached "
                f"its pods limit")
    if demand.whole:
        largest = max((c.whole_free for c in caps), default=0)
        if largest < demand.whole:
            return (f"a {role} needs {demand.whole} {gpu} on one node, "
                    f"the largest free is {largest}")
    if demand.share:
        largest = max((d for c in caps for d in c.devices), default=0)
        if largest < demand.share:
            return (f"a {role} needs {demand.share}m of one {gpu} device, "
                    f"the largest free device has {max(largest, 0)}m")
    # What cannot be counted at all first: its reason says why, not a shortfall.
    for name, amount in sorted(demand.scalar.items(),
                               key=lambda kv: not kv[0].startswith(UNCOUNTABLE_PREFIX)):
        largest = max((c.free.get(name, 0) for c in caps), default=0)
        if largest < amount:
            phrase = device_phrase(name, amount)
            if phrase is not None:
                if name.startswith(UNCOUNTABLE_PREFIX):
                    return f"a {role} waits: its {phrase}"
                return (f"a {role} needs {phrase} on one node, the most free is "
                        f"{max(largest, 0) // 1000}")
            binary = name == MEMORY
            return (f"a {role} needs {name}={format_quantity(amount, binary=binary)} on one "
                    f"node, the largest free is {format_quantity(max(largest, 0), binary=binary)}")
    return (f"no node has all of a {role}'s demand free at once "
            f"({len(nodes)} eligible node{'s' if len(nodes) != 1 else ''})")


def _plan_in(
    gang: GangKey, ordered: list[tuple[RoleDemand, Demand]],
    eligible: Mapping[str, Sequence[NodeName]], *, cap_of: Mapping[NodeName, NodeCapacity],
    policy: Policy, gpu: str, budget: int, domain: str | None,
) -> tuple[Plan | None, _Attempt]:
    attempt = _greedy(ordered, eligible, cap_of=cap_of, policy=policy)
    if attempt.failed is not None:
        found = _search(ordered, eligible, cap_of=cap_of, budget=budget)
        if found is None:
            return None, attempt
        attempt = found
    required = attempt.placed
    for rd, demand in ordered:  # elastic extras: best effort, never at the minimum's expense
        _fill(rd.role, demand, rd.extra, eligible.get(rd.role, ()), cap_of=cap_of,
              attempt=attempt, policy=policy)
    slots = tuple(sorted((n, r, c) for (n, r), c in attempt.assignment.items() if c > 0))
    shapes = tuple(sorted((rd.role, rd.shape) for rd, _ in ordered))
    return Plan(gang=gang, slots=slots, shapes=shapes, domain=domain, required=required), attempt


def place_gang(
    gang: GangKey,
    demands: Sequence[RoleDemand],
    *,
    capacity: Mapping[NodeName, NodeCapacity],
    eligible: Mapping[str, Sequence[NodeName]],
    domains: Mapping[str, tuple[NodeName, ...]] | None = None,
    topology: TopologyConstraint | None = None,
    policy: Policy = Policy.BINPACK,
    gpu: str = GPU,
    budget: int = SEARCH_BUDGET,
    within: str | None = None,
    taken: Mapping[str, str] | None = None,
) -> Plan | Infeasible:
    """Plan ``demands`` onto nodes, each pod wholly on one node.

    ``capacity`` gives each node's free capacity; ``eligible`` gives, per role, the nodes its
    shape may use (sorted). With ``topology``, ``domains`` maps each domain value to its nodes;
    ``within`` names the one domain to use, where the gang's placed members already run;
    ``taken`` names domains the gang may not use, with why (another gang is in the domain of
    an exclusive gang).
    """
    ordered = _order(demands, gpu)
    needed = sum(rd.need for rd in demands)
    cap_of: Mapping[NodeName, NodeCapacity] = capacity
    if topology is not None and domains is not None and within is not None:
        domains = {within: domains.get(within, ())}
        taken = None  # the gang holds this domain already; newcomers do not take it away
    if topology is not None and domains is not None:
        found = _by_domain(gang, ordered, eligible, domains, topology, cap_of=cap_of,
                           policy=policy, gpu=gpu, budget=budget, within=within,
                           taken=taken or {}, needed=needed)
        if found is not None:
            return found
    plan, attempt = _plan_in(gang, ordered, eligible, cap_of=cap_of, policy=policy, gpu=gpu,
                             budget=budget, domain=None)
    if plan is not None:
        return plan
    detail = _failure_detail(attempt, eligible, domain_nodes=None, cap_of=cap_of, gpu=gpu)
    return Infeasible(gang, f"gang {gang}: {attempt.placed} of {needed} pods fit; {detail}",
                      attempt.placed, needed)


SHOWN_DOMAINS = 8
"""Domains a failure names one by one (each with why); the rest are counted."""


def _by_domain(
    gang: GangKey, ordered: list[tuple[RoleDemand, Demand]],
    eligible: Mapping[str, Sequence[NodeName]], domains: Mapping[str, tuple[NodeName, ...]],
    topology: TopologyConstraint, *, cap_of: Mapping[NodeName, NodeCapacity], policy: Policy,
    gpu: str, budget: int, within: str | None, taken: Mapping[str, str], needed: int,
) -> Plan | Infeasible | None:
    """Each domain alone (sorted); the best plan by :func:`domain_cost`, else, when the
    constraint is required, why each domain failed. ``None``: no domain holds a preferred
    gang, plan it on every node."""
    allowed = {role: frozenset(nodes) for role, nodes in eligible.items()}
    counted = [(rd.role, rd.need, d) for rd, d in ordered]
    best: tuple[tuple[int, ...], str, Plan] | None = None
    failures: list[tuple[int, str, _Attempt | None]] = []  # (pods that fit, value, attempt)
    for value, members in sorted(domains.items()):
        if value in taken:
            continue
        scoped = {role: [n for n in members if n in allowed[role]] for role in eligible}
        attempt: _Attempt | None = None
        if could_fit(counted, scoped, cap_of=cap_of):
            plan, attempt = _plan_in(gang, ordered, scoped, cap_of=cap_of, policy=policy,
                                     gpu=gpu, budget=budget, domain=value)
            if plan is not None:
                after = CapacityView(cap_of, attempt.working)
                cost = domain_cost(policy, (after[n] for n in members))
                if best is None or (cost, value) < best[:2]:
                    best = (cost, value, plan)
                continue
            placed = attempt.placed
        else:
            # Cannot hold the gang: skip greedy, count how many pods it would take (exact
            # for one role, an upper bound for several).
            placed = sum(min(need, room_for(d, scoped.get(role, ()), cap_of=cap_of,
                                            enough=need)) for role, need, d in counted)
        failures.append((placed, value, attempt))
    if best is not None:
        return best[2]
    if not topology.required:
        return None
    if not failures:
        why = (f"every {topology.key} domain is taken: " + _list_taken(taken) if taken else
               f"no node carries the topology label {topology.key} and is eligible")
        return Infeasible(gang, f"gang {gang}: {why}", 0, needed)

    def explain(value: str, tried: _Attempt | None) -> tuple[int, str]:
        scoped = {role: [n for n in domains[value] if n in allowed[role]] for role in eligible}
        attempt = tried or _greedy(ordered, scoped, cap_of=cap_of, policy=policy)
        return attempt.placed, _failure_detail(attempt, eligible, domain_nodes=domains[value],
                                               cap_of=cap_of, gpu=gpu)

    # The domain that fits the most pods; failures are sorted, so ties go to the first.
    _, value, tried = max(failures, key=lambda f: f[0])
    placed, detail = explain(value, tried)
    if within is not None:
        where = (f"its placed members run in {topology.key} {value}, which fits {placed} "
                 f"of the {needed} pods it still needs")
        return Infeasible(gang, f"gang {gang}: {where}; {detail}", placed, needed)
    where = (f"no single {topology.key} domain holds it; the best, {value}, fits {placed} of "
             f"{needed} pods")
    shown = []
    for _, other, attempt in failures[:SHOWN_DOMAINS]:
        n, why = (placed, detail) if other == value else explain(other, attempt)
        shown.append(f"{other}: {n} of {needed} fit, {why}")
    more = len(failures) - len(shown)
    tried_text = "; ".join(shown) + (f"; and {more} more" if more > 0 else "")
    if taken:
        tried_text += "; taken: " + _list_taken(taken)
    return Infeasible(gang, f"gang {gang}: {where}; {detail}. Domains tried: {tried_text}",
                      placed, needed)


def _list_taken(taken: Mapping[str, str]) -> str:
    items = sorted(taken.items())
    shown = "; ".join(f"{v} ({why})" for v, why in items[:SHOWN_DOMAINS])
    more = len(items) - SHOWN_DOMAINS
    return shown + (f"; and {more} more" if more > 0 else "")


def _failure_detail(
    attempt: _Attempt, eligible: Mapping[str, Sequence[NodeName]], *,
    domain_nodes: Sequence[NodeName] | None, cap_of: Mapping[NodeName, NodeCapacity], gpu: str,
) -> str:
    assert attempt.failed is not None  # only called for a failed greedy attempt
    role, demand, _ = attempt.failed
    nodes = list(eligible.get(role, ()))
    if domain_nodes is not None:
        inside = set(domain_nodes)
        nodes = [n for n in nodes if n in inside]
    if not nodes:
        return f"no node accepts a {role} (see its nodeSelector, affinity and tolerations)"
    after = CapacityView(cap_of, attempt.working)
    return _shortage(role, demand, nodes, cap_of=after, gpu=gpu)


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


def eligible_for(shape: PodShape, snapshot: ClusterSnapshot, *, gpu: str = GPU) -> tuple[
    NodeName, ...
]:
    """Nodes ``shape`` may use, memoised per snapshot (5,000 nodes are checked once)."""
    memo = index_of(snapshot, gpu=gpu).eligible
    found = memo.get(shape)
    if found is None:
        found = memo[shape] = eligible_nodes(shape, snapshot.nodes.values())
    return found


def placed_domain(
    gang: Gang, snapshot: ClusterSnapshot, nodes: Mapping[NodeName, int],
) -> str | None:
    """The topology domain most of the gang's placed pods are in (``nodes``: node -> pods),
    ties to the smallest value; ``None`` without a topology constraint or a placed pod."""
    if gang.topology is None:
        return None
    seen: dict[str, int] = {}
    for node, n in nodes.items():
        info = snapshot.nodes.get(node)
        value = None if info is None else info.label(gang.topology.key)
        if value is not None and n > 0:
            seen[value] = seen.get(value, 0) + n
    return min(seen.items(), key=lambda kv: (-kv[1], kv[0]))[0] if seen else None


def plan_gang(
    gang: Gang,
    *,
    snapshot: ClusterSnapshot,
    capacity: Mapping[NodeName, NodeCapacity],
    placed: Mapping[str, int] | None = None,
    policy: Policy = Policy.BINPACK,
    gpu: str = GPU,
    budget: int = SEARCH_BUDGET,
    within: str | None = None,
    occupied: Mapping[NodeName, Collection[Gang]] | None = None,
    placed_at: Mapping[tuple[NodeName, str], int] | None = None,
    placed_in: Mapping[tuple[NodeName, str, str], int] | None = None,
) -> Plan | Infeasible:
    """Plan the rest of ``gang`` on ``snapshot``'s nodes with ``capacity`` free.

    ``placed`` counts, per role, the gang's pods already bound or in flight: they count toward
    the minimum and are not planned again. ``within`` is the topology domain those pods run in
    (:func:`placed_domain`): the rest keeps to it (a preferred constraint falls back to every
    node if it cannot). ``occupied`` (node -> gangs with pods or plans there) lets exclusive
    gangs' domains be kept to them (:func:`exclusive_fences`); without it none are.
    A gang whose subgroups each keep to a domain of their own is planned by
    :func:`_by_subgroups`; ``placed_at`` (``(node, role)`` -> pods bound or in flight) says
    where its placed pods run, and ``placed_in`` (``(node, role, subgroup)`` -> pods) which
    subgroup each is in when the pods say it (without them, the bound ones are read off
    ``snapshot``).
    """
    demands = gang_demands(gang, placed)
    eligible = {rd.role: eligible_for(rd.shape, snapshot, gpu=gpu) for rd in demands}
    for rd in demands:
        if rd.need and not eligible[rd.role]:
            summary = ineligibility_summary(rd.shape, snapshot.nodes.values())
            needed = sum(d.need for d in demands)
            return Infeasible(gang.key, f"gang {gang.key}: no node accepts a {rd.role}: "
                              f"{summary}", 0, needed)
    fenced, taken = exclusive_fences(gang, snapshot, occupied or {})
    if fenced:
        eligible = {role: tuple(n for n in nodes if n not in fenced)
                    for role, nodes in eligible.items()}
    if gang.subgroups is not None:
        at = placed_at if placed_at is not None else _bound_at(gang, snapshot, gpu=gpu)
        inside = (None if gang.subgroups.label is None else
                  placed_in if placed_in is not None else
                  _bound_in(gang, snapshot, gpu=gpu))
        return _around(_by_subgroups(gang, gang.subgroups, eligible, snapshot=snapshot,
                                     capacity=capacity, placed_at=at, placed_in=inside,
                                     taken=taken, policy=policy, gpu=gpu, budget=budget,
                                     fenced=len(fenced)), placed)
    domains = None
    if gang.topology is not None:
        union = sorted({n for nodes in eligible.values() for n in nodes})
        domains = topology_domains(gang.topology, snapshot.nodes, union)
    result = place_gang(gang.key, demands, capacity=capacity, eligible=eligible,
                        domains=domains, topology=gang.topology, policy=policy, gpu=gpu,
                        budget=budget, within=within, taken=taken)
    if isinstance(result, Infeasible) and fenced:
        why = (f"{result.reason} ({len(fenced)} node{'s are' if len(fenced) != 1 else ' is'} "
               f"in a domain an exclusive gang holds)")
        return Infeasible(result.gang, why, result.placed, result.needed)
    return _around(result, placed)


def _around(result: Plan | Infeasible, placed: Mapping[str, int] | None) -> Plan | Infeasible:
    """``result`` noting the members it was planned around (:attr:`Plan.placed`)."""
    before = tuple(sorted((r, n) for r, n in (placed or {}).items() if n > 0))
    if isinstance(result, Infeasible) or not before:
        return result
    return Plan(gang=result.gang, slots=result.slots, shapes=result.shapes,
                domain=result.domain, required=result.required,
                subgroup_domains=result.subgroup_domains, placed=before)


def _bound_at(gang: Gang, snapshot: ClusterSnapshot, *, gpu: str,
              ) -> dict[tuple[NodeName, str], int]:
    counts: dict[tuple[NodeName, str], int] = {}
    for uid in index_of(snapshot, gpu=gpu).gang_pods.get(gang.key, ()):
        pod = snapshot.pods[uid]
        if pod.node_name is not None and pod.holds_resources:
            key = (pod.node_name, snapshot.memberships[uid].role)
            counts[key] = counts.get(key, 0) + 1
    return counts


def _bound_in(gang: Gang, snapshot: ClusterSnapshot, *, gpu: str,
              ) -> dict[tuple[NodeName, str, str], int]:
    counts: dict[tuple[NodeName, str, str], int] = {}
    for uid in index_of(snapshot, gpu=gpu).gang_pods.get(gang.key, ()):
        pod, member = snapshot.pods[uid], snapshot.memberships[uid]
        if pod.node_name is not None and pod.holds_resources and member.subgroup is not None:
            key = (pod.node_name, member.role, member.subgroup)
            counts[key] = counts.get(key, 0) + 1
    return counts


def _by_subgroups(
    gang: Gang, sub: SubgroupTopology, eligible: Mapping[str, Sequence[NodeName]], *,
    snapshot: ClusterSnapshot, capacity: Mapping[NodeName, NodeCapacity],
    placed_at: Mapping[tuple[NodeName, str], int],
    placed_in: Mapping[tuple[NodeName, str, str], int] | None, taken: Mapping[str, str],
    policy: Policy, gpu: str, budget: int, fenced: int,
) -> Plan | Infeasible:
    """Each subgroup in a domain of its own (:func:`~extender.core.gang.subgroups.
    assign_domains`); the plan is their slots together, then the roles in no subgroup on what
    those leave free, anywhere. Nodes without the label take none of the subgroups' pods."""
    nodes = snapshot.nodes
    placed: dict[str, dict[str, int]] = {}
    for (node, role), n in sorted(placed_at.items()):
        info = nodes.get(node)
        value = None if info is None else info.label(sub.key)
        if value is not None and n > 0:
            by_role = placed.setdefault(value, {})
            by_role[role] = by_role.get(role, 0) + n
    by_value: dict[str, dict[str, dict[str, int]]] | None = None
    # Pods tie themselves to subgroups only if every placed pod says its subgroup; else the
    # placed pods are told apart by role and domain, as for subgroups without a label.
    if placed_in is not None and sum(placed_in.values()) == sum(placed_at.values()):
        by_value = {}
        for (node, role, value), n in sorted(placed_in.items()):
            info = nodes.get(node)
            domain = None if info is None else info.label(sub.key)
            if domain is not None and n > 0:
                by_role = by_value.setdefault(value, {}).setdefault(domain, {})
                by_role[role] = by_role.get(role, 0) + n
    needed = gang.min_member - sum(placed_at.values())
    # Roles in no subgroup (a JobSet's replicatedJobs that ask for no domain) go anywhere,
    # the subgroups' domains too: the exclusive leaders' anti-affinity selects only pods of
    # exclusive Jobs (JobSet's priority label), and they keep to no domain themselves.
    in_kinds = {r for kind in sub.kinds for r, _ in kind.pods}
    units, broken = units_of(sub, placed, by_value=by_value)
    if broken is not None:
        return Infeasible(gang.key, f"gang {gang.key}: {broken}", 0, needed)
    union = sorted({n for names in eligible.values() for n in names})
    domains = topology_domains(TopologyConstraint(sub.key), nodes, union)
    shapes = {m.role: m.shape for m in gang.members}
    allowed = {role: frozenset(names) for role, names in eligible.items()}
    share = max(1, budget // max(1, len({u.kind.name for u in units}) * max(1, len(domains))))

    def try_in(pods: tuple[tuple[str, int], ...], value: str) -> Fit:
        members = domains.get(value, ())
        demands = [RoleDemand(role, shapes[role], need=n) for role, n in pods if n > 0]
        ordered = _order(demands, gpu)
        scoped = {rd.role: [n for n in members if n in allowed.get(rd.role, ())]
                  for rd in demands}
        plan, attempt = _plan_in(gang.key, ordered, scoped, cap_of=capacity, policy=policy,
                                 gpu=gpu, budget=share, domain=value)
        if plan is None:
            detail = _failure_detail(attempt, scoped, domain_nodes=members, cap_of=capacity,
                                     gpu=gpu)
            return Fit(None, placed=attempt.placed, why=detail)
        after = CapacityView(capacity, attempt.working)
        return Fit(plan.slots, cost=domain_cost(policy, (after[n] for n in members)),
                   placed=attempt.placed)

    found = assign_domains(units, sorted(domains), key=sub.key, try_in=try_in, taken=taken,
                           shown=SHOWN_DOMAINS)
    if not found.ok:
        why = f"gang {gang.key}: {found.reason}"
        if fenced:
            why += (f" ({fenced} node{'s are' if fenced != 1 else ' is'} in a domain an "
                    "exclusive gang holds)")
        return Infeasible(gang.key, why, found.placed, needed)
    slots: dict[tuple[NodeName, str], int] = {}
    for _, _, fit in found.chosen:
        for node, role, n in fit.slots or ():
            slots[(node, role)] = slots.get((node, role), 0) + n
    by_role_placed: dict[str, int] = {}
    for (_, role), n in placed_at.items():
        by_role_placed[role] = by_role_placed.get(role, 0) + n
    loose = [d for d in gang_demands(gang, by_role_placed) if d.role not in in_kinds]
    if loose:
        # On what the subgroups' slots leave free.
        left: dict[NodeName, NodeCapacity] = {}
        for (node, role), n in slots.items():
            left[node] = take(left.get(node) or capacity[node],
                              demand_of(shapes[role], gpu=gpu), n, force=True)
        rest = place_gang(gang.key, loose, capacity=CapacityView(capacity, left),
                          eligible={rd.role: eligible.get(rd.role, ()) for rd in loose},
                          policy=policy, gpu=gpu, budget=share)
        if isinstance(rest, Infeasible):
            names = ", ".join(rd.role for rd in loose)
            return Infeasible(gang.key, (f"gang {gang.key}: its {sub.key} subgroups fit, but "
                                         f"then its roles kept to no domain ({names}) do not: "
                                         f"{rest.reason}"), found.placed + rest.placed, needed)
        for node, role, n in rest.slots:
            slots[(node, role)] = slots.get((node, role), 0) + n
    planned = tuple(sorted((n, r, c) for (n, r), c in slots.items() if c > 0))
    roles = sorted({r for _, r, _ in planned})
    return Plan(gang=gang.key, slots=planned,
                shapes=tuple((r, shapes[r]) for r in roles),
                required=sum(c for _, _, c in planned),
                subgroup_domains=tuple(sorted((u.name, d) for u, d, _ in found.chosen)))
