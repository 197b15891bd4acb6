"""Pack a gang's demands onto given nodes, each pod wholly on one node, or say why not.

Every check is per node: a pod fits a node or it does not, and capacity is never summed across
nodes. The packer runs in two steps:

1. greedy: roles largest shape first; each role's pods go to candidate nodes in the scoring
   policy's order (best fit under binpack), as many per node as fit;
2. when greedy fails, cheap necessary conditions first
   (:func:`~extender.core.gang.search.could_fit`: a gang that cannot fit is answered at once),
   then a bounded depth-first search
   (:func:`~extender.core.gang.search.search`). On small instances it finishes, so the packer is
   never weaker than exhaustive search there.

With a topology constraint each domain (sorted) is tried alone and the best plan by the policy's
:func:`~extender.core.gang.scoring.domain_cost` wins; a preferred constraint falls back to all
nodes.

It must not read a snapshot or a gang's members: :mod:`~extender.core.gang.placement` turns a
gang into demands and eligible nodes; the words of a failure are
:mod:`~extender.core.gang.shortage`'s.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from extender.core.gang.capacity import CapacityView, classes_of
from extender.core.gang.charging import count_fitting, take
from extender.core.gang.fit_conditions import could_fit, room_for
from extender.core.gang.nodecapacity import Demand, NodeCapacity, demand_of
from extender.core.gang.plans import Infeasible, Plan, RoleDemand
from extender.core.gang.scoring import Policy, domain_cost, node_order_key
from extender.core.gang.search import Assignment, search
from extender.core.gang.shortage import SHOWN_DOMAINS, failure_detail, list_taken
from extender.core.model.resources import GPU
from extender.core.model.values import GangKey, NodeName, TopologyConstraint

SEARCH_BUDGET = 10_000
"""Placements the fallback search may try before giving up (greedy's answer stands). A step
costs a few microseconds, so a search that runs out takes tens of milliseconds; gangs that
cannot fit are usually proved so before any search
(:func:`~extender.core.gang.search.could_fit`)."""


@dataclass
class Attempt:
    """One packing attempt: the pods it placed where, and the capacity it left."""

    assignment: Assignment
    working: dict[NodeName, NodeCapacity]
    placed: int
    failed: tuple[str, Demand, int] | None  # role, demand, pods left unplaced


def order_demands(demands: Sequence[RoleDemand], gpu: str) -> list[tuple[RoleDemand, Demand]]:
    """Each role with its demand, those packed :attr:`~RoleDemand.first` first, then largest
    shape first (then by role): the order packing takes."""
    pairs = [(d, demand_of(d.shape, gpu=gpu)) for d in demands]
    return sorted(pairs, key=lambda p: (not p[0].first, p[1].sort_key(), p[0].role))


SMALL = 256
"""Below this many eligible nodes, rank nodes one by one; above it, rank capacity classes."""


def _fill(
    role: str, demand: Demand, count: int, nodes: Sequence[NodeName], *,
    cap_of: Mapping[NodeName, NodeCapacity], attempt: Attempt, policy: Policy,
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


def greedy(
    ordered: list[tuple[RoleDemand, Demand]], eligible: Mapping[str, Sequence[NodeName]], *,
    cap_of: Mapping[NodeName, NodeCapacity], policy: Policy,
) -> Attempt:
    attempt = Attempt(assignment={}, working={}, placed=0, failed=None)
    for rd, demand in ordered:
        left = _fill(rd.role, demand, rd.need, eligible.get(rd.role, ()), cap_of=cap_of,
                     attempt=attempt, policy=policy)
        if left and attempt.failed is None:
            attempt.failed = (rd.role, demand, left)
    return attempt


def _search(
    ordered: list[tuple[RoleDemand, Demand]], eligible: Mapping[str, Sequence[NodeName]], *,
    cap_of: Mapping[NodeName, NodeCapacity], budget: int,
) -> Attempt | None:
    """A placement of every required pod after greedy failed; ``None`` if none exists (proved
    by :func:`~extender.core.gang.search.could_fit` or by the search) or the budget ran out."""
    demands = [(rd.role, rd.need, demand) for rd, demand in ordered]
    if not could_fit(demands, eligible, cap_of=cap_of):
        return None
    found = search(demands, eligible, cap_of=cap_of, budget=budget)
    if found is None:
        return None
    assignment, working = found
    return Attempt(assignment=assignment, working=working, placed=sum(assignment.values()),
                    failed=None)


def plan_in(
    gang: GangKey, ordered: list[tuple[RoleDemand, Demand]],
    eligible: Mapping[str, Sequence[NodeName]], *, cap_of: Mapping[NodeName, NodeCapacity],
    policy: Policy, gpu: str, budget: int, domain: str | None,
) -> tuple[Plan | None, Attempt]:
    attempt = greedy(ordered, eligible, cap_of=cap_of, policy=policy)
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
    ordered = order_demands(demands, gpu)
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
    plan, attempt = plan_in(gang, ordered, eligible, cap_of=cap_of, policy=policy, gpu=gpu,
                             budget=budget, domain=None)
    if plan is not None:
        return plan
    detail = failure_detail(attempt.failed, eligible, domain_nodes=None,
                            free=CapacityView(cap_of, attempt.working), gpu=gpu)
    return Infeasible(gang, f"gang {gang}: {attempt.placed} of {needed} pods fit; {detail}",
                      attempt.placed, needed)


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
    failures: list[tuple[int, str, Attempt | None]] = []  # (pods that fit, value, attempt)
    for value, members in sorted(domains.items()):
        if value in taken:
            continue
        scoped = {role: [n for n in members if n in allowed[role]] for role in eligible}
        attempt: Attempt | None = None
        if could_fit(counted, scoped, cap_of=cap_of):
            plan, attempt = plan_in(gang, ordered, scoped, cap_of=cap_of, policy=policy,
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
        why = (f"every {topology.key} domain is taken: " + list_taken(taken) if taken else
               f"no node carries the topology label {topology.key} and is eligible")
        return Infeasible(gang, f"gang {gang}: {why}", 0, needed)

    def explain(value: str, tried: Attempt | None) -> tuple[int, str]:
        scoped = {role: [n for n in domains[value] if n in allowed[role]] for role in eligible}
        attempt = tried or greedy(ordered, scoped, cap_of=cap_of, policy=policy)
        return attempt.placed, failure_detail(attempt.failed, eligible,
                                              domain_nodes=domains[value],
                                              free=CapacityView(cap_of, attempt.working),
                                              gpu=gpu)

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
        tried_text += "; taken: " + list_taken(taken)
    return Infeasible(gang, f"gang {gang}: {where}; {detail}. Domains tried: {tried_text}",
                      placed, needed)
