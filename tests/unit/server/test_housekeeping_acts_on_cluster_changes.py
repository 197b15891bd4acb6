"""Housekeeping runs soon after the cluster changes, not only on its tick: the creation of a
gated gang's last member ungates the gang within a moment (the tick here is a minute), and a
burst of changes is taken in one round, not one round per event."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from extender.server.app import create_app
from extender.server.housekeeping import (
    GAP,
    LONGEST,
    SHARE,
    Housekeeper,
    may_unblock,
    spacing,
)
from extender.server.settings import Settings
from extender.state.ports import MemoryUngater
from extender.state.store import PODS
from tests.unit.server.builders import Clock, gpu_node, job_of, jobset, jobset_pod, store_of

GATE = "muster.dev/gang"
TICK = 60.0
"""The housekeeper's interval in these tests: no round here comes from it."""


def gated(index: int) -> dict[str, Any]:
    pod = jobset_pod("train", index, gpus=4)
    pod["spec"]["schedulingGates"] = [{"name": GATE}]
    return pod


def wait_for(check: Any, within: float = 5.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.01)
    return bool(check())


def test_the_last_member_of_a_gated_gang_arriving_ungates_it_without_waiting_for_the_tick(
) -> None:
    store = store_of([gpu_node("n0"), gpu_node("n1"), jobset("train", workers=3, gpus=4),
                      job_of("train"), gated(0), gated(1)])
    ungater = MemoryUngater()
    create_app(Settings(bind_timeout=2.0, plan_ttl=30.0), store, Clock(), ungater=ungater,
               housekeeping=TICK)
    store.apply(PODS, "MODIFIED", gated(0))  # a change while the gang is short a member
    time.sleep(0.3)
    assert ungater.ungated() == []  # two of three exist: it gathers, gated
    store.apply(PODS, "ADDED", gated(2))
    assert wait_for(lambda: len(ungater.ungated()) == 3)
    assert sorted(ref.name for ref, _ in ungater.ungated()) == [
        f"train-worker-0-{i}" for i in range(3)]


class Blocking:
    """A service whose first round waits until released, counting rounds."""

    def __init__(self) -> None:
        self.rounds = 0
        self.entered = threading.Event()
        self.release = threading.Event()

    def housekeep(self) -> int:
        self.rounds += 1
        self.entered.set()
        self.release.wait(5)
        return 0


def test_a_burst_of_changes_is_one_round_and_a_change_during_a_round_brings_one_more() -> None:
    service = Blocking()
    keeper = Housekeeper(service, interval=TICK).start()
    try:
        keeper.nudge()
        assert service.entered.wait(5)  # a nudge runs a round long before the tick
        for _ in range(500):  # a burst of pod events while that round runs
            keeper.nudge()
        service.release.set()
        assert wait_for(lambda: service.rounds == 2)
        time.sleep(0.5)
        assert service.rounds == 2  # the burst was one more round, then it waits for more
        keeper.nudge()
        assert wait_for(lambda: service.rounds == 3)
    finally:
        keeper.stop()


def test_the_store_tells_its_watchers_of_pod_and_node_changes_only() -> None:
    store = store_of([gpu_node("n0"), jobset("train", workers=1, gpus=4)])
    told: list[tuple[str, str, str | None]] = []
    store.on_cluster_changed(
        lambda source, kind, obj: told.append(
            (source, kind, None if obj is None else obj["metadata"]["name"])))
    store.apply(PODS, "ADDED", jobset_pod("train", 0, gpus=4))
    store.apply("v1/Node", "MODIFIED", gpu_node("n0", gpus=4))
    store.apply("jobset.x-k8s.io/v1alpha2/JobSet", "MODIFIED",
                jobset("train", workers=2, gpus=4))
    store.replace(PODS, [])
    assert told == [(PODS, "ADDED", "train-worker-0-0"), ("v1/Node", "MODIFIED", "n0"),
                    (PODS, "RELIST", None)]


def running(index: int) -> dict[str, Any]:
    pod = jobset_pod("train", index, gpus=4)
    pod["spec"]["nodeName"] = "n0"
    pod["status"] = {"phase": "Running"}
    return pod


def test_only_changes_that_may_let_a_waiting_pod_go_nudge() -> None:
    assert may_unblock(PODS, "ADDED", gated(0))  # a gang's member arriving
    assert not may_unblock(PODS, "MODIFIED", running(1))  # a running pod's status update
    assert may_unblock(PODS, "DELETED", running(1))  # its room is free
    ended = running(1)
    ended["status"]["phase"] = "Succeeded"
    assert may_unblock(PODS, "MODIFIED", ended)
    assert may_unblock("v1/Node", "MODIFIED", gpu_node("n0"))
    assert may_unblock(PODS, "RELIST", None)


def test_status_updates_of_running_pods_bring_no_round_and_deletions_only_while_pods_wait(
) -> None:
    store = store_of([gpu_node("n0"), gpu_node("n1"), jobset("train", workers=3, gpus=4),
                      job_of("train"), running(0)])
    app = create_app(Settings(bind_timeout=2.0, plan_ttl=30.0), store, Clock(),
                     ungater=MemoryUngater(), housekeeping=TICK)
    service = app.extensions["muster.decider"]
    rounds: list[int] = []
    real = service.housekeep

    def counted() -> int:
        rounds.append(1)
        return int(real())
    service.housekeep = counted
    for _ in range(20):
        store.apply(PODS, "MODIFIED", running(0))
    store.apply(PODS, "DELETED", running(0))  # nothing waits: no round either
    time.sleep(0.4)
    assert rounds == []
    store.apply(PODS, "ADDED", gated(1))  # a gated member: a round, and now pods wait
    assert wait_for(lambda: len(rounds) == 1)
    assert service.waits_on_cluster()
    store.apply(PODS, "ADDED", running(0))
    store.apply(PODS, "DELETED", running(0))
    assert wait_for(lambda: len(rounds) == 2)


def test_rounds_brought_on_by_changes_take_at_most_their_share_of_the_time() -> None:
    assert spacing(0.001, GAP) == GAP  # a cheap round: the next may come a gap later
    assert spacing(0.1, GAP) == pytest.approx(0.1 * (1 - SHARE) / SHARE)
    assert spacing(5.0, GAP) == LONGEST  # a round that waited long for the lock


class Slow:
    """A service whose every round takes 0.1 s (a large cluster, or a busy machine)."""

    def __init__(self) -> None:
        self.rounds = 0

    def housekeep(self) -> int:
        self.rounds += 1
        time.sleep(0.1)
        return 0


def test_slow_rounds_under_a_stream_of_changes_leave_most_of_the_time_to_the_rest() -> None:
    service = Slow()
    keeper = Housekeeper(service, interval=TICK).start()
    try:
        end = time.monotonic() + 1.5
        while time.monotonic() < end:  # a change every 10 ms, as in a burst of pods
            keeper.nudge()
            time.sleep(0.01)
    finally:
        keeper.stop()
    # Each round is followed by 0.3 s without one (a share of 1/4): at most 4 or 5 rounds
    # in 1.5 s. Spaced by the gap alone (0.05 s) there would be about 10.
    assert 2 <= service.rounds <= 5
