"""The necessary condition ungating skips planning on is never wrong: when
:func:`~extender.core.gang.bounds.cannot_fit` says a gang cannot fit, the planner finds no plan.

Random clusters of 4- and 8-GPU nodes of two GPU types, partly taken by whole-GPU and
shared-GPU pods, and gangs of one or two roles (whole GPUs of 1 to 8, or shares of one; any
node, or one type's nodes only), some members bound, some with a smaller minimum than their
count.
"""

from __future__ import annotations

from hypothesis import event, given, settings
from hypothesis import strategies as st

from extender.core.gang.bounds import cannot_fit, shortfall
from extender.core.gang.charging import count_fitting
from extender.core.gang.fit_conditions import free_totals, free_whole, room_for
from extender.core.gang.ledger import Ledger, free_capacity, per_role, placed_counts
from extender.core.gang.nodecapacity import demand_of
from extender.core.gang.placement import plan_gang
from extender.core.gang.plans import Infeasible
from tests.unit.core.builders import make_gang, make_node, make_pod, make_shape, make_snapshot

TYPES = st.sampled_from(["a", "b"])


def shapes() -> st.SearchStrategy:  # type: ignore[type-arg]
    selector = st.one_of(st.none(), st.builds(lambda t: {"gpu": t}, TYPES))
    return st.one_of(
        st.builds(lambda g, s: make_shape(gpus=g, selector=s), st.sampled_from([1, 2, 4, 8]),
                  selector),
        st.builds(lambda s, sel: make_shape(gpus=1, share=s, selector=sel),
                  st.sampled_from([25, 50]), selector))


@st.composite
def cases(draw):  # type: ignore[no-untyped-def]
    nodes = [make_node(f"n{i}", gpus=draw(st.sampled_from([4, 8])), labels={"gpu": draw(TYPES)})
             for i in range(draw(st.integers(1, 5)))]
    taken = []
    for i in range(draw(st.integers(0, 8))):
        node = draw(st.sampled_from(nodes))
        gpus = draw(st.integers(1, 4))
        taken.append(make_pod(f"busy-{i}", shape=make_shape(gpus=gpus), node=node.name,
                              ns="other"))
    roles = [(f"r{r}", draw(st.integers(1, 4)), draw(shapes()))
             for r in range(draw(st.integers(1, 2)))]
    minimum = {r: draw(st.integers(1, c)) for r, c, _ in roles}
    gang = make_gang("g", roles=roles, minimum=minimum)
    bound = {}
    for r, c, _ in roles:
        for i in range(c):
            if draw(st.integers(0, 4)) == 0:
                bound[f"g-{r}-{i}"] = draw(st.sampled_from(nodes)).name
    return make_snapshot(nodes, gangs=[gang], pods=taken, bound=bound), gang


@settings(max_examples=400, deadline=None)
@given(cases())
def test_a_gang_the_bound_rules_out_has_no_plan(case) -> None:  # type: ignore[no-untyped-def]
    snapshot, gang = case
    ledger = Ledger()
    free = free_capacity(snapshot, ledger, exclude=gang.key)
    ruled_out = cannot_fit(gang, snapshot, ledger, free)
    why = shortfall(gang, snapshot, ledger, free)
    assert ruled_out == (why is not None)
    event("fits" if why is None else "ruled out on the nodes its pods may use"
          if "may use" in why else "ruled out on every node")
    plan = plan_gang(gang, snapshot=snapshot, capacity=free,
                     placed=per_role(placed_counts(gang.key, snapshot, ledger)))
    if ruled_out:
        assert isinstance(plan, Infeasible)
    # The counts the bound reads are what a pass over every node would add up.
    names = tuple(free)
    for member in gang.members:
        demand = demand_of(member.shape)
        assert room_for(demand, names, cap_of=free, enough=10**9) == sum(
            count_fitting(c, demand) for c in free.values())
    assert free_totals(names, free)["gpu:whole"] == free_whole(names, free) == sum(
        c.whole_free for c in free.values())
