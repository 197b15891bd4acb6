"""The bounds that let placement give up early are sound, and the search is fast about it.

Clusters here are built around a placement known to exist (every pod's demand is put on its
node, plus some slack), larger than exhaustive search could check: the necessary conditions
must never call such a gang impossible, and the planner must find a plan.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from extender.core.gang.fit_conditions import could_fit
from extender.core.gang.nodecapacity import DEVICE, NodeCapacity, demand_of
from extender.core.gang.packing import place_gang
from extender.core.gang.plans import Plan, RoleDemand
from extender.core.gang.search import search
from extender.core.model.resources import CPU, MEMORY, Resources
from extender.core.model.values import NodeName
from tests.unit.core.builders import make_shape

_roles = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 6), st.integers(0, 2),
                            st.sampled_from([0, 0, 0, 250, 500])),
                  min_size=1, max_size=4)


@given(roles=_roles, nodes=st.integers(1, 8), data=st.data())
def test_a_gang_built_to_fit_is_never_declared_impossible(
    roles: list[tuple[int, int, int, int]], nodes: int, data: st.DataObject,
) -> None:
    shapes = [make_shape(gpus=0 if share else gpus, cpu=cpu, memory_gi=mem, share=share)
              for gpus, cpu, mem, share in roles]
    counts = [data.draw(st.integers(1, 5)) for _ in shapes]
    names = [NodeName(f"n{i}") for i in range(nodes)]
    # Where each pod goes: the placement the cluster is built around.
    where = [[data.draw(st.sampled_from(names)) for _ in range(c)] for c in counts]
    scalar = {n: Resources() for n in names}
    whole = dict.fromkeys(names, 0)
    shares: dict[NodeName, list[int]] = {n: [] for n in names}
    pods = dict.fromkeys(names, 0)
    for shape, targets in zip(shapes, where, strict=True):
        demand = demand_of(shape)
        for n in targets:
            scalar[n] = scalar[n] + demand.scalar
            whole[n] += demand.whole
            if demand.share:
                shares[n].append(demand.share)
            pods[n] += 1
    caps = {}
    for n in names:
        slack = data.draw(st.integers(0, 2))
        # Shares packed first-fit, largest first, onto devices with exactly that much free
        # (250 and 500 divide 1000, so any largest-first packing is as good).
        packed: list[int] = []
        for share in sorted(shares[n], reverse=True):
            for i, used in enumerate(packed):
                if used + share <= DEVICE:
                    packed[i] += share
                    break
            else:
                packed.append(share)
        devices = [DEVICE] * (whole[n] + slack) + packed
        extra = Resources({CPU: slack * 1000, MEMORY: slack * 2**30 * 1000})
        caps[n] = NodeCapacity(free=scalar[n] + extra, devices=tuple(devices),
                               pods=pods[n] + slack if data.draw(st.booleans()) else None)
    demands = [RoleDemand(f"r{i}", shape, need=c)
               for i, (shape, c) in enumerate(zip(shapes, counts, strict=True))]
    eligible = {rd.role: tuple(names) for rd in demands}
    assert could_fit([(rd.role, rd.need, demand_of(rd.shape)) for rd in demands], eligible,
                     cap_of=caps)
    result = place_gang("ns/g", demands, capacity=caps, eligible=eligible,  # type: ignore[arg-type]
                        budget=1_000_000)
    assert isinstance(result, Plan), result


def test_the_search_places_a_gang_of_thousands_without_running_out_of_stack() -> None:
    """2,000 pods placed one search level each: deeper than Python's recursion limit."""
    names = [NodeName(f"n{i:03d}") for i in range(250)]
    caps = {n: NodeCapacity(free=Resources({CPU: 64_000}), devices=(DEVICE,) * 8, pods=None)
            for n in names}
    demand = demand_of(make_shape(gpus=1, cpu=8))
    found = search([("w", 2000, demand)], {"w": names}, cap_of=caps, budget=100_000)
    assert found is not None
    assignment, changed = found
    assert sum(assignment.values()) == 2000
    assert all(count == 8 for count in assignment.values()) and len(assignment) == 250
    assert all(cap.whole_free == 0 for cap in changed.values())
