"""The gang state machine: each ledger transition from each state, and the state the ledger
reports after it (the diagram in :mod:`extender.core.gang.ledger`'s docstring)."""

from __future__ import annotations

import re
from pathlib import Path

from extender.core.gang import lifecycle
from extender.core.gang.capacity import index_of
from extender.core.gang.ledger import GangState, Ledger, Transition
from extender.core.gang.lifecycle import VIEW_STATES, GangRecord, observed_state
from extender.core.gang.placement import plan_gang
from extender.core.gang.plans import Plan
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, NodeName
from tests.unit.core.builders import make_gang, make_node, make_shape, make_snapshot, uid

NODES = [make_node("n1", gpus=8), make_node("n2", gpus=8)]
GANG = make_gang("g", roles=[("worker", 2, make_shape(gpus=8))])
STAGED = make_gang("s", roles=[("head", 1, make_shape(gpus=4)),
                               ("worker", 1, make_shape(gpus=4))], stages={"worker": 1})
KEY = GANG.key
N1 = NodeName("n1")


def _snapshot(gang: Gang = GANG, *, bound: dict[str, str] | None = None) -> ClusterSnapshot:
    return make_snapshot(NODES, gangs=[gang], bound=bound)


def _plan(gang: Gang = GANG) -> Plan:
    snap = _snapshot(gang)
    plan = plan_gang(gang, snapshot=snap, capacity=index_of(snap).base)
    assert isinstance(plan, Plan)
    return plan


def _planned() -> Ledger:
    ledger = Ledger()
    ledger.reserve(_plan(), now=0, ttl=30)
    return ledger


def _preempting() -> Ledger:
    ledger = Ledger()
    ledger.hold(_plan(), now=0, deadline=20)
    return ledger


def _at_barrier() -> Ledger:
    ledger = _planned()
    ledger.arrive(KEY, uid(GANG, "worker", 0), N1, now=1)
    return ledger


def _admitted() -> Ledger:
    ledger = _at_barrier()
    ledger.arrive(KEY, uid(GANG, "worker", 1), NodeName("n2"), now=2)
    ledger.admit(KEY, now=2)
    return ledger


# from no record -----------------------------------------------------------------------------
def test_a_gang_the_ledger_promises_nothing_has_no_state_and_no_record() -> None:
    ledger = Ledger()
    assert ledger.state(KEY) is None and ledger.record(KEY) is None and ledger.records() == []


def test_reserving_a_plan_for_a_gang_makes_it_planned_and_says_so() -> None:
    ledger = Ledger()
    assert ledger.reserve(_plan(), now=0, ttl=30) == Transition(KEY, None, GangState.PLANNED,
                                                                "reserve")
    assert ledger.state(KEY) is GangState.PLANNED


def test_holding_a_preemption_plan_makes_a_gang_preempting() -> None:
    ledger = Ledger()
    assert ledger.hold(_plan(), now=0, deadline=20) == Transition(
        KEY, None, GangState.PREEMPTING, "hold")
    assert ledger.state(KEY) is GangState.PREEMPTING


def test_a_member_reaching_bind_without_a_plan_puts_its_gang_at_the_barrier() -> None:
    ledger = Ledger()
    moved = ledger.arrive(KEY, uid(GANG, "worker", 0), N1, now=1)
    assert moved == Transition(KEY, None, GangState.AT_BARRIER, "arrive")


# from preempting ----------------------------------------------------------------------------
def test_a_preemptor_planned_gives_up_its_hold_and_is_planned() -> None:
    ledger = _preempting()
    ledger.reserve(_plan(), now=5, ttl=30)
    assert ledger.state(KEY) is GangState.PLANNED and ledger.holds() == []


def test_a_preemptors_hold_dropped_leaves_it_nothing() -> None:
    ledger = _preempting()
    assert ledger.unhold(KEY) == Transition(KEY, GangState.PREEMPTING, None, "unhold")
    assert ledger.state(KEY) is None and ledger.records() == []


def test_a_preemptors_hold_lapses_at_its_deadline() -> None:
    ledger = _preempting()
    ledger.expire(19.9)
    assert ledger.state(KEY) is GangState.PREEMPTING
    ledger.expire(20)
    assert ledger.state(KEY) is None


# from planned -------------------------------------------------------------------------------
def test_a_plan_expires_at_its_deadline_and_the_gang_has_no_state() -> None:
    ledger = _planned()
    assert ledger.expire(30) == [KEY]
    assert ledger.state(KEY) is None and ledger.holding() == frozenset()


def test_a_planned_gangs_first_member_at_bind_puts_it_at_the_barrier() -> None:
    ledger = _planned()
    moved = ledger.arrive(KEY, uid(GANG, "worker", 0), N1, now=1)
    assert moved == Transition(KEY, GangState.PLANNED, GangState.AT_BARRIER, "arrive")
    assert ledger.barriers() == [(KEY, 1)]


def test_a_planned_gang_released_or_its_plan_dropped_has_no_state() -> None:
    for end in (Ledger.release, Ledger.drop_plan, Ledger.forget_gang):
        ledger = _planned()
        moved = end(ledger, KEY)
        assert moved is not None and (moved.before, moved.after) == (GangState.PLANNED, None)
        assert ledger.state(KEY) is None and ledger.reservations() == []


def test_a_plan_filled_by_bound_members_settles_and_the_gang_has_no_state() -> None:
    ledger = _planned()
    plan = ledger.plan_for(KEY)
    assert plan is not None
    bound = {f"g-worker-{i}": node for i, (node, _, _) in enumerate(plan.slots)}
    assert ledger.settle(_snapshot(bound=bound)) == [KEY]
    assert ledger.state(KEY) is None


# from at the barrier ------------------------------------------------------------------------
def test_a_new_member_at_the_barrier_restarts_its_clock_and_a_retry_does_not() -> None:
    ledger = _at_barrier()
    assert ledger.arrive(KEY, uid(GANG, "worker", 0), N1, now=5) is None  # a retry
    assert ledger.barrier_started(KEY) == 1
    ledger.arrive(KEY, uid(GANG, "worker", 1), NodeName("n2"), now=6)
    assert ledger.state(KEY) is GangState.AT_BARRIER and ledger.barrier_started(KEY) == 6


def test_a_gang_whose_minimum_arrived_is_admitted_and_its_members_released() -> None:
    ledger = _at_barrier()
    released = ledger.admit(KEY, now=3)
    assert released == ((uid(GANG, "worker", 0), N1),)
    assert ledger.state(KEY) is GangState.ADMITTED and ledger.barriers() == []


def test_a_staged_gang_admitted_with_later_members_kept_stays_at_the_barrier() -> None:
    ledger = Ledger()
    head, worker = uid(STAGED, "head", 0), uid(STAGED, "worker", 0)
    ledger.arrive(STAGED.key, head, N1, now=1)
    ledger.arrive(STAGED.key, worker, N1, now=2)
    assert ledger.admit(STAGED.key, now=3, keep=frozenset({worker})) == ((head, N1),)
    assert ledger.state(STAGED.key) is GangState.AT_BARRIER
    assert ledger.is_admitted(STAGED.key) and ledger.barrier_started(STAGED.key) == 3


def test_a_gang_withdrawn_at_the_barrier_has_no_state_and_its_members_go() -> None:
    ledger = _at_barrier()
    ledger.mark_bind_requested(uid(GANG, "worker", 0), N1, now=1)
    assert ledger.withdraw(KEY) == ((uid(GANG, "worker", 0), N1),)
    assert ledger.state(KEY) is None and ledger.in_flight() == {}


def test_the_last_member_at_the_barrier_forgotten_ends_the_barrier_and_keeps_the_plan() -> None:
    ledger = _at_barrier()
    ledger.forget_pod(uid(GANG, "worker", 0))
    assert ledger.state(KEY) is GangState.PLANNED and ledger.barriers() == []


def test_a_barrier_whose_plan_is_dropped_stays_with_its_members() -> None:
    ledger = _at_barrier()
    ledger.drop_plan(KEY)
    assert ledger.state(KEY) is GangState.AT_BARRIER and ledger.plan_for(KEY) is None
    assert ledger.held(KEY) == {uid(GANG, "worker", 0): N1}


def test_a_member_at_the_barrier_observed_bound_leaves_it_and_the_barrier_stays() -> None:
    ledger = _at_barrier()
    ledger.confirm_bound(uid(GANG, "worker", 0), N1)
    assert ledger.held(KEY) == {} and ledger.state(KEY) is GangState.AT_BARRIER


# from admitted ------------------------------------------------------------------------------
def test_an_admitted_gang_with_nothing_placed_starts_over() -> None:
    ledger = _admitted()
    ledger.drop_plan(KEY)
    moved = ledger.recheck_admitted(KEY, _snapshot())
    assert moved == Transition(KEY, GangState.ADMITTED, None, "recheck_admitted")
    assert ledger.admitted_stage(KEY) == -1


def test_an_admitted_gang_with_members_bound_stays_admitted() -> None:
    ledger = _admitted()
    ledger.drop_plan(KEY)
    snap = _snapshot(bound={"g-worker-0": "n1"})
    assert ledger.recheck_admitted(KEY, snap) is None
    assert ledger.state(KEY) is GangState.ADMITTED


def test_an_admitted_gangs_next_stage_at_bind_puts_it_at_the_barrier_again() -> None:
    ledger = _admitted()
    ledger.arrive(KEY, "uid-ml-g-worker-2", N1, now=9)
    assert ledger.state(KEY) is GangState.AT_BARRIER and ledger.is_admitted(KEY)


def test_an_admitted_gang_whose_workload_is_gone_is_forgotten() -> None:
    ledger = _admitted()
    moved = ledger.forget_gang(KEY)
    assert moved == Transition(KEY, GangState.ADMITTED, None, "forget_gang")
    assert ledger.records() == []


def test_admitted_gangs_whose_workloads_are_gone_are_forgotten_once_they_pile_up() -> None:
    ledger = Ledger()
    gone = [make_gang(f"old{i}").key for i in range(300)]
    for key in gone:
        ledger.admit(key, now=0)
    ledger.settle(_snapshot())
    assert all(ledger.state(key) is None for key in gone)


# after a restart ----------------------------------------------------------------------------
def test_rebuild_admits_gangs_with_bound_members_and_forgets_the_rest() -> None:
    ledger = _preempting()
    other = make_gang("o", roles=[("worker", 1, make_shape(gpus=8))])
    snap = make_snapshot(NODES, gangs=[GANG, other], bound={"o-worker-0": "n1"})
    ledger.rebuild(snap, now=100, ttl=30)
    assert ledger.state(KEY) is None and ledger.state(other.key) is GangState.ADMITTED


# what the views show ------------------------------------------------------------------------
def test_views_show_bound_and_finished_from_the_cluster_over_the_ledgers_state() -> None:
    planned = GangRecord(plan=_planned().reservation(KEY))
    assert observed_state(planned, min_member=2, bound=2, finished=0,
                          held_at_bind=0) is GangState.BOUND
    assert observed_state(None, min_member=2, bound=1, finished=1,
                          held_at_bind=0) is GangState.FINISHED
    assert observed_state(planned, min_member=2, bound=0, finished=0,
                          held_at_bind=0) is GangState.PLANNED
    assert observed_state(planned, min_member=2, bound=0, finished=0,
                          held_at_bind=1) is GangState.WAITING
    assert observed_state(None, min_member=2, bound=0, finished=0,
                          held_at_bind=0) is GangState.WAITING


# copies ---------------------------------------------------------------------------------------
def test_a_clone_and_its_ledger_change_apart_whichever_is_written_first() -> None:
    ledger = _at_barrier()
    twin = ledger.clone()
    twin.admit(KEY, now=5)
    ledger.arrive(KEY, uid(GANG, "worker", 1), NodeName("n2"), now=6)
    assert twin.state(KEY) is GangState.ADMITTED and twin.held(KEY) == {}
    assert ledger.state(KEY) is GangState.AT_BARRIER and len(ledger.held(KEY)) == 2
    again = ledger.clone()
    ledger.forget_pod(uid(GANG, "worker", 0))
    ledger.drop_plan(KEY)
    assert len(again.held(KEY)) == 2 and again.plan_for(KEY) is not None
    assert again.barriers() == [(KEY, 6)] and again.holding() == {KEY}


# the drawing ---------------------------------------------------------------------------------
def _drawing(text: str) -> str:
    start, last = text.index("  (none) ──hold"), "──forget_gang (the workload is gone)──▶ (none)"
    return text[start:text.index(last, start) + len(last)]


def test_the_drawn_state_machine_names_every_ledger_state_and_transition_and_docs_show_it(
) -> None:
    drawn = _drawing(lifecycle.__doc__ or "")
    ledger_states = set(GangState) - set(VIEW_STATES)
    assert {s for s in ledger_states if s.name not in drawn} == set()
    returning = {name for name, f in vars(Ledger).items() if callable(f)
                 and "Transition" in str(f.__annotations__.get("return", ""))}
    changing = {"admit", "withdraw", "expire", "settle", "forget_pod"}
    assert {m for m in returning | changing if not re.search(rf"\b{m}\b", drawn)} == set()
    docs = (Path(__file__).resolve().parents[4] / "docs" / "architecture.md").read_text()
    assert _drawing(docs) == drawn
