"""Free capacity that leaves one gang's reservation out is what the cluster would have if that
gang held nothing.

Every gang's look asks for free capacity without its own reservation (its members may use
it). :func:`free_capacity` works that out from the capacity with every reservation, charging
again only the nodes the gang holds. Random clusters with whole-GPU and shared-GPU gangs, some
members bound or in flight, plans and preemption holds (overlapping, oversubscribing), check it
against a ledger in which the gang never reserved anything.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.core.gang.ledger import Ledger, free_capacity
from extender.core.gang.plans import Plan
from extender.core.model.snapshot import ClusterSnapshot
from tests.unit.core.builders import make_gang, make_node, make_shape, make_snapshot, uid

NODES = [f"n{i}" for i in range(4)]


@st.composite
def cases(draw):  # type: ignore[no-untyped-def]
    gangs, plans, bound, flying = [], [], {}, []
    for g in range(draw(st.integers(1, 5))):
        shared = draw(st.booleans())
        shape = (make_shape(gpus=1, share=draw(st.sampled_from([25, 50])))
                 if shared else make_shape(gpus=draw(st.sampled_from([1, 2, 4]))))
        count = draw(st.integers(1, 4))
        gang = make_gang(f"g{g}", roles=[("w", count, shape)])
        gangs.append(gang)
        spots = sorted(draw(st.lists(st.sampled_from(NODES), min_size=1, max_size=count)))
        slots = tuple((n, "w", spots.count(n)) for n in sorted(set(spots)))
        plans.append((Plan(gang.key, slots, shapes=(("w", shape),)), draw(st.booleans())))
        for i in range(count):
            fate = draw(st.sampled_from(["pending", "bound", "flying"]))
            node = draw(st.sampled_from(NODES))
            if fate == "bound":
                bound[f"g{g}-w-{i}"] = node
            elif fate == "flying":
                flying.append((uid(gang, "w", i), node))
    nodes = [make_node(n, gpus=4) for n in NODES]
    return make_snapshot(nodes, gangs=gangs, bound=bound), plans, flying


def ledger_of(plans: list[tuple[Plan, bool]], flying: list[tuple[str, str]], *,
              without: str | None = None) -> Ledger:
    ledger = Ledger()
    for plan, held in plans:
        if plan.gang == without:
            continue
        if held:
            ledger.hold(plan, now=0, deadline=60)
        else:
            ledger.reserve(plan, now=0, ttl=60)
    for pod_uid, node in flying:
        ledger.mark_bind_requested(pod_uid, node, now=0)
    return ledger


def as_dict(snapshot: ClusterSnapshot, ledger: Ledger, exclude: str | None) -> dict[str, object]:
    return dict(free_capacity(snapshot, ledger, exclude=exclude).items())


@settings(max_examples=200, deadline=None)
@given(cases())
def test_capacity_without_a_gang_is_capacity_had_it_reserved_nothing(case) -> None:  # type: ignore[no-untyped-def]
    snapshot, plans, flying = case
    ledger = ledger_of(plans, flying)
    every = as_dict(snapshot, ledger, None)
    for plan, _ in plans:
        alone = ledger_of(plans, flying, without=plan.gang)
        assert as_dict(snapshot, ledger, plan.gang) == as_dict(snapshot, alone, None)
    # Asking for one gang's view leaves the others' (memoised) views as they were.
    assert as_dict(snapshot, ledger, None) == every
    assert as_dict(snapshot, ledger, "ml/nobody") == every
