"""Plans and held binds expire on the service's monotonic clock: stepping the wall clock (NTP,
a VM resumed, an operator's ``date -s``) by an hour neither expires nor extends them, while
what ``/inspect`` shows a person is still wall-clock time."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from extender.server.service import GangService, session_clock
from extender.server.settings import Settings
from extender.server.wire import ExtenderBindingResultJSON, parse_binding_args, parse_extender_args
from extender.state.memory import MemoryBinder
from extender.state.ports import MemoryEvents
from tests.unit.server import builders as b

HOUR = 3600.0
NODES = ["n0", "n1"]
W0, W1 = b.jobset_pod("train", 0, gpus=8), b.jobset_pod("train", 1, gpus=8)


class Rig:
    """A service over two 8-GPU nodes and a two-worker gang, with a wall clock and a
    monotonic clock the test moves apart."""

    def __init__(self) -> None:
        self.wall = b.Clock()
        self.wall.now = 1_800_000_000.0
        self.monotonic = b.Clock()
        self.store = b.store_of([*(b.gpu_node(n, gpus=8) for n in NODES),
                               b.jobset("train", workers=2, gpus=8), b.job_of("train"), W0, W1])
        self.svc = GangService(self.store, settings=Settings(bind_timeout=30.0, plan_ttl=60.0),
                               clock=self.wall, monotonic=self.monotonic,
                               binder=MemoryBinder(self.store), events=MemoryEvents())
        self.pool = ThreadPoolExecutor(max_workers=2)

    def plan(self) -> str:
        """Filter the first worker, which plans the gang; the node it is sent to."""
        answer = self.svc.filter(parse_extender_args(b.filter_body(W0, NODES)))
        [node] = answer["NodeNames"] or []
        return node

    def planned(self) -> bool:
        return bool(b.plan_nodes(self.svc.inspect_gangs(), "ml/train"))

    def hold(self, node: str) -> Future[ExtenderBindingResultJSON]:
        """Send the first worker's bind, which the barrier holds; return once it is held."""
        future = self.pool.submit(self.svc.bind, parse_binding_args(b.bind_body(W0, node)))
        deadline = time.monotonic() + 5
        while not self.held() and not future.done():
            assert time.monotonic() < deadline, "the bind was never held"
            time.sleep(0.005)
        return future

    def held(self) -> bool:
        """Whether the first worker's bind is held open with no answer yet."""
        with self.svc._cond:
            held = self.svc.session.held
            hold = held.by_pod.get(W0["metadata"]["uid"])
            return hold is not None and hold.ticket not in held.failed

    def step_wall(self, by: float) -> None:
        self.wall.now += by
        self.svc.housekeep()


@pytest.fixture
def rig() -> Iterator[Rig]:
    r = Rig()
    yield r
    r.monotonic.now += 10_000  # time out whatever is still held
    r.svc.housekeep()
    r.pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("step", [HOUR, -HOUR], ids=["forwards", "backwards"])
def test_a_wall_clock_stepped_an_hour_neither_expires_nor_extends_a_plan(
        rig: Rig, step: float) -> None:
    rig.plan()
    rig.monotonic.now += 1
    rig.step_wall(step)
    assert rig.planned()  # not expired by a wall clock stepped forwards
    rig.monotonic.now += 60
    rig.svc.housekeep()
    assert not rig.planned()  # nor kept by one stepped backwards: its TTL ran out


@pytest.mark.parametrize("step", [HOUR, -HOUR], ids=["forwards", "backwards"])
def test_a_wall_clock_stepped_an_hour_neither_expires_nor_extends_a_held_bind(
        rig: Rig, step: float) -> None:
    held = rig.hold(rig.plan())
    rig.monotonic.now += 1
    rig.step_wall(step)
    assert rig.held() and not held.done()
    rig.monotonic.now += 30
    rig.svc.housekeep()
    assert "did not reach bind in time" in held.result(timeout=5)["Error"]


def test_inspect_shows_a_plans_deadline_in_wall_clock_time(rig: Rig) -> None:
    made_at = rig.wall.now
    rig.plan()
    rig.step_wall(HOUR)  # what the wall clock says now is what a reader compares it with
    [gang] = [g for g in rig.svc.inspect_gangs() if g["gang"] == "ml/train"]
    assert gang["reservationDeadline"] == made_at + HOUR + 60.0


def test_muster_serves_wall_clock_leaves_the_deadlines_to_the_monotonic_clock() -> None:
    assert session_clock(time.time, None) is time.monotonic
    fake = b.Clock()
    assert session_clock(fake, None) is fake  # a test's clock drives both
