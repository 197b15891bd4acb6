"""The gang graph (workload -> gangs -> roles, plus ordering) and the wait-for graph.

Ordering edges come from the descriptor (JobSet dependsOn, LWS leader-first): ``(a, b)`` means
role ``b`` starts once ``a`` has. A cycle there means the workload can never start, so it is
an error naming the cycle. The wait-for graph links gangs held at the bind barrier to the gangs
whose reservations or held members occupy the nodes they need; a cycle there is a deadlock,
broken by choosing one gang to yield: the lower priority, then the younger.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import networkx as nx

from extender.core.capacity import demand_of, fits
from extender.core.ledger import Ledger, free_capacity, placed_counts
from extender.core.model import Gang, GangKey, WorkloadTree
from extender.core.placement import eligible_for, gang_demands
from extender.core.resources import GPU
from extender.core.snapshot import ClusterSnapshot


class GangGraphError(ValueError):
    """A workload whose ordering cannot be satisfied."""


def gang_graph(tree: WorkloadTree) -> nx.DiGraph:
    """Nodes ``workload:<key>``, ``gang:<key>``, ``role:<name>``; edges carry ``kind``:
    ``contains`` (workload -> gang -> role) or ``order`` (role -> role)."""
    g = nx.DiGraph()
    root = f"workload:{tree.ref.key}"
    g.add_node(root, kind="workload")
    known = {r.name for r in tree.roles}
    for role in tree.roles:
        g.add_node(f"role:{role.name}", kind="role", pods=role.pods)
    for gang in tree.gangs:
        gnode = f"gang:{gang.key}"
        g.add_node(gnode, kind="gang", min_member=gang.min_member)
        g.add_edge(root, gnode, kind="contains")
        for member in gang.members:
            g.add_edge(gnode, f"role:{member.role}", kind="contains")
    for before, after in tree.edges:
        for name in (before, after):
            if name not in known:
                raise GangGraphError(
                    f"workload {tree.ref.key}: ordering names role {name!r}, which it does not "
                    f"have (roles: {', '.join(sorted(known)) or 'none'})")
        g.add_edge(f"role:{before}", f"role:{after}", kind="order")
    check_order(tree, g)
    return g


def _order_only(g: nx.DiGraph) -> nx.DiGraph:
    return g.edge_subgraph((u, v) for u, v, k in g.edges(data="kind") if k == "order")


def check_order(tree: WorkloadTree, g: nx.DiGraph) -> None:
    try:
        cycle = nx.find_cycle(_order_only(g))
    except nx.NetworkXNoCycle:
        return
    path = " -> ".join([str(u).removeprefix("role:") for u, _ in cycle]
                       + [str(cycle[0][0]).removeprefix("role:")])
    raise GangGraphError(f"workload {tree.ref.key}: role ordering has a cycle: {path}; "
                         "no role could ever start")


def role_stages(tree: WorkloadTree) -> list[list[str]]:
    """Roles in start order: each stage starts once every earlier stage has (sorted inside)."""
    g = gang_graph(tree)
    roles = nx.DiGraph()
    roles.add_nodes_from(r.name for r in tree.roles)
    roles.add_edges_from((str(u).removeprefix("role:"), str(v).removeprefix("role:"))
                         for u, v in _order_only(g).edges)
    return [sorted(stage) for stage in nx.topological_generations(roles)]


def wait_for_graph(
    snapshot: ClusterSnapshot, ledger: Ledger, *, gpu: str = GPU
) -> nx.DiGraph:
    """Edge ``A -> B`` when gang A has members held at the barrier, still lacks pods for its
    minimum, and some node A could use for them is occupied by B's reservation or held pods."""
    g = nx.DiGraph()
    holders: dict[str, set[GangKey]] = {}
    for key, res in ledger.reservations():
        for node, _, _ in res.plan.slots:
            holders.setdefault(node, set()).add(key)
    for key, _ in ledger.barriers():
        for _, node in ledger.waiting(key):
            holders.setdefault(node, set()).add(key)
    for key, _ in ledger.barriers():
        gang = snapshot.gangs.get(key)
        if gang is None:
            continue
        g.add_node(key)
        by_role: dict[str, int] = {}
        for (_, role), n in placed_counts(key, snapshot, ledger, gpu=gpu).items():
            by_role[role] = by_role.get(role, 0) + n
        free = free_capacity(snapshot, ledger, gpu=gpu, exclude=key)
        for rd in gang_demands(gang, by_role):
            if not rd.need:
                continue
            demand = demand_of(rd.shape, gpu=gpu)
            for node in eligible_for(rd.shape, snapshot, gpu=gpu):
                if fits(free[node], demand):
                    continue
                for other in sorted(holders.get(node, ())):
                    if other != key:
                        g.add_edge(key, other)
    return g


def deadlocks(g: nx.DiGraph) -> list[list[GangKey]]:
    """Every cycle of waiting gangs, each rotated to start at its smallest key, sorted."""
    out = []
    for cycle in nx.simple_cycles(g):
        start = cycle.index(min(cycle))
        out.append(cycle[start:] + cycle[:start])
    return sorted(out)


def yielder(cycle: Iterable[GangKey], gangs: Mapping[GangKey, Gang]) -> GangKey:
    """The gang that gives way: lowest priority, then youngest (latest created), then key."""
    def rank(key: GangKey) -> tuple[int, float, str]:
        gang = gangs.get(key)
        if gang is None:
            return (-(1 << 62), float("inf"), key)  # a vanished gang always yields
        return (gang.priority, -gang.created, key)
    return min(cycle, key=rank)
