"""Random clusters of low-priority gangs and lone pods, and one high-priority gang.

What a plan guarantees: it names only whole units (every bound pod of a victim gang), none of
the preemptor's priority or more, none when the preemptor may not preempt; and removing
exactly its victims lets :func:`plan_gang` place the gang whole. What an empty plan
guarantees: not even evicting every eligible unit would let the gang fit (the greedy is
not asked to find the fewest units beyond that; dropping is checked one unit at a time).
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.core.decide.preemption import candidates, give_back, plan_preemption
from extender.core.decide.session import GangSession
from extender.core.decide.settings import CoreSettings
from extender.core.gang.ledger import Ledger, free_capacity
from extender.core.gang.placement import plan_gang
from extender.core.gang.plans import Infeasible
from tests.unit.core.builders import make_gang, make_node, make_pod, make_shape, make_snapshot

SETTINGS = CoreSettings(plan_ttl=30, bind_timeout=30)


@st.composite
def clusters(draw):  # type: ignore[no-untyped-def]
    nodes = [make_node(f"n{i}", gpus=8) for i in range(draw(st.integers(2, 6)))]
    free = {n.name: 8 for n in nodes}
    gangs, bound, pods = [], {}, []
    for g in range(draw(st.integers(0, 6))):
        gpus, count = draw(st.sampled_from([2, 4, 8])), draw(st.integers(1, 3))
        prio = draw(st.integers(0, 12))
        gang = make_gang(f"g{g}", roles=[("w", count, make_shape(gpus=gpus, priority=prio))],
                         priority=prio)
        spots = [draw(st.sampled_from(sorted(free))) for _ in range(count)]
        if all(free[s] >= gpus * spots.count(s) for s in spots):
            gangs.append(gang)
            for i, s in enumerate(spots):
                free[s] -= gpus
                bound[f"g{g}-w-{i}"] = s
    for p in range(draw(st.integers(0, 4))):
        node, gpus = draw(st.sampled_from(sorted(free))), draw(st.sampled_from([1, 2, 4]))
        if free[node] >= gpus:
            free[node] -= gpus
            pods.append(make_pod(f"lone{p}", node=node,
                                 shape=make_shape(gpus=gpus, priority=draw(st.integers(0, 12)))))
    shape = replace(make_shape(gpus=draw(st.sampled_from([4, 8])), priority=10),
                    preempts=draw(st.booleans()) or draw(st.booleans()))
    high = make_gang("high", roles=[("w", draw(st.integers(1, 6)), shape)], priority=10)
    return make_snapshot(nodes, gangs=[*gangs, high], pods=pods, bound=bound), high


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_a_plan_evicts_whole_lower_priority_units_that_let_the_gang_fit_or_nothing(case) -> None:  # type: ignore[no-untyped-def]
    snap, high = case
    ledger = Ledger()
    plan = plan_preemption(high, snapshot=snap, ledger=ledger, settings=SETTINGS, now=0)
    free = free_capacity(snap, ledger, exclude=high.key)
    eligible = candidates(high, snap, ledger, gpu=SETTINGS.gpu_resource)

    def fits(victims) -> bool:  # type: ignore[no-untyped-def]
        return not isinstance(plan_gang(high, snapshot=snap, capacity=give_back(
            snap, free, victims, gpu=SETTINGS.gpu_resource)), Infeasible)

    if plan is None:
        assert not high.members[0].shape.preempts or not eligible or not fits(eligible)
        return
    assert high.members[0].shape.preempts
    for victim in plan.victims:
        assert victim.priority < high.priority
        uids = {u for u, _ in victim.pods}
        if victim.gang is not None:  # every bound pod of the gang, nothing less
            assert uids == {u for u in snap.pods if snap.gang_of(u) is not None
                            and snap.gang_of(u).key == victim.gang  # type: ignore[union-attr]
                            and snap.pods[u].holds_resources}
        for u in uids:
            assert snap.pods[u].shape.priority < high.priority
    assert fits(plan.victims)
    assert plan.placement.pods == high.pods


@settings(max_examples=100, deadline=None)
@given(clusters(), st.integers(1, 6), st.sampled_from([1, 2, 4, 8]), st.integers(0, 9))
def test_what_a_plan_frees_stays_the_preemptors_whatever_gang_asks_first(  # type: ignore[no-untyped-def]
        case, rival_pods, rival_gpus, rival_priority) -> None:
    """Once a plan is made and its victims are gone, a lower-priority rival that filters
    first (and is planned wherever room is left) never takes what the preemptor needs: the
    preemptor's next filter plans it whole."""
    snap, high = case
    session = GangSession(SETTINGS)
    member = next(u for u in snap.pods if snap.gang_of(u) is not None
                  and snap.gang_of(u).key == high.key)  # type: ignore[union-attr]
    session.preempt(snap.pods[member], {}, snapshot=snap, now=0)
    plan = session.preemptions.get(high.key)
    if plan is None:
        return
    rival = make_gang("rival", roles=[("w", rival_pods, make_shape(gpus=rival_gpus,
                                                                   priority=rival_priority))],
                      priority=rival_priority)
    gone = plan.pods()
    kept = [g for g in snap.gangs.values() if g.key != high.key and not any(
        u in gone for u in snap.pods if snap.gang_of(u) is not None
        and snap.gang_of(u).key == g.key)]  # type: ignore[union-attr]
    bound = {p.name: p.node_name for p in snap.pods.values()
             if p.node_name is not None and p.uid not in gone}
    lone = [p for p in snap.pods.values() if snap.gang_of(p.uid) is None and p.uid not in gone]
    after = make_snapshot(list(snap.nodes.values()), gangs=[*kept, high, rival], pods=lone,
                          bound={k: v for k, v in bound.items() if not k.startswith("lone")})
    nodes = list(after.nodes)
    for uid in sorted(u for u in after.pods if u.startswith("uid-ml-rival-")):
        session.filter(after.pods[uid], nodes, snapshot=after, now=1)
    step = session.filter(after.pods[member], nodes, snapshot=after, now=2)
    assert step.decision.passed, step.decision.reason
