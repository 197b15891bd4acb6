"""The streamed peer benchmark's pure half: a seeded Poisson schedule of workloads that finish,
and the figures (time-to-start, utilisation, partial gangs) a sequence of polls gives."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from extender.core.workloads.workload import resolve_workload
from extender.files.catalog import packaged_catalog
from extender.sandbox.components import RUNTIME_ANNOTATION
from extender.sandbox.controllers import children
from tests.bench.peer_stream import (
    Poll,
    StreamFigures,
    StreamSpec,
    Tracked,
    arrival_times,
    configuration,
    demand,
    measure,
    percentile,
    ratios,
    schedule,
)


def _fingerprint(spec: StreamSpec) -> list[tuple[float, str, int, int, int]]:
    return [(a.t, a.name, a.runtime_s, a.pods, a.gpus) for a in schedule(spec)]


# -- the schedule ---------------------------------------------------------------------------------
def test_the_same_seed_gives_the_same_schedule_and_another_seed_another() -> None:
    spec = StreamSpec(seed=11)
    first, again = schedule(spec), schedule(spec)
    assert [(a.t, a.obj, a.runtime_s) for a in first] == \
        [(a.t, a.obj, a.runtime_s) for a in again]
    assert _fingerprint(spec) != _fingerprint(StreamSpec(seed=12))


def test_arrivals_are_a_poisson_stream_inside_the_window() -> None:
    times = arrival_times(60.0, 6000.0, random.Random(3))  # one a second on average
    assert times == sorted(times)
    assert times[0] >= 0.0
    assert times[-1] < 6000.0
    assert 5700 <= len(times) <= 6300
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert statistics.mean(gaps) == pytest.approx(1.0, rel=0.05)
    # Exponential gaps: the standard deviation equals the mean (evenly spaced would be 0).
    assert statistics.stdev(gaps) == pytest.approx(1.0, rel=0.1)


def test_the_nth_workload_is_the_same_whatever_the_rate() -> None:
    slow = schedule(StreamSpec(arrival_rate=20.0, duration=300.0))
    fast = schedule(StreamSpec(arrival_rate=60.0, duration=300.0))
    assert len(fast) > len(slow)
    n = len(slow)
    assert [(a.name, a.obj, a.runtime_s) for a in slow] == \
        [(a.name, a.obj, a.runtime_s) for a in fast[:n]]
    assert [a.t for a in slow] != [a.t for a in fast[:n]]


def test_every_pod_the_stand_ins_make_runs_for_its_workloads_runtime_and_may_finish() -> None:
    spec = StreamSpec(runtime_min=25, runtime_max=35, single_fraction=0.5)
    catalog = packaged_catalog()
    arrivals = schedule(spec)
    assert {a.single for a in arrivals} == {True, False}
    for a in arrivals:
        assert 25 <= a.runtime_s <= 35
        obj = {**a.obj, "metadata": {**a.obj["metadata"], "uid": "u"}}
        if a.single:
            pods = [obj]
        else:
            descriptor = catalog.require(obj)
            _, pods = children(obj, resolve_workload(obj, descriptor), descriptor)
        assert len(pods) == a.pods
        for pod in pods:
            assert pod["metadata"]["annotations"][RUNTIME_ANNOTATION] == f"{a.runtime_s}s"
            # KWOK's finish Stage only ends pods whose restartPolicy lets them finish.
            assert pod["spec"]["restartPolicy"] == "Never"


def test_demand_agrees_with_the_resolved_workload() -> None:
    catalog = packaged_catalog()
    for a in schedule(StreamSpec(arrival_rate=80.0, single_fraction=0.2)):
        obj = {**a.obj, "metadata": {**a.obj["metadata"], "uid": "u"}}
        tree = resolve_workload(obj, catalog.require(obj))
        assert demand(a.obj) == (tree.pods, tree.gpus)
        if not a.single:
            assert 2 <= a.pods <= 8


def test_the_offered_load_is_demanded_gpu_seconds_over_the_windows_capacity() -> None:
    spec = StreamSpec(nodes=10, gpus_per_node=8, duration=100.0)
    arrivals = schedule(spec)
    held = sum(a.gpus * a.runtime_s for a in arrivals)
    config = configuration(spec, arrivals)
    assert config["offered_load"] == round(held / (80 * 100.0), 2)
    assert config["gangs"] + config["singles"] == len(arrivals)


def test_a_spec_with_a_one_pod_gang_or_no_arrivals_is_refused() -> None:
    with pytest.raises(ValueError, match="gang sizes"):
        StreamSpec(min_gang=1)
    with pytest.raises(ValueError, match="positive"):
        StreamSpec(arrival_rate=0.0)


# -- the figures ----------------------------------------------------------------------------------
def _gang(key: str, created: float, *, pods: int, gpus: int, minimum: int | None = None,
          single: bool = False) -> Tracked:
    return Tracked(key=key, created=created, min_member=pods if minimum is None else minimum,
                   gpus_per_pod={f"{key}-{i}": gpus for i in range(pods)}, single=single)


def _polls(*states: tuple[float, set[str]]) -> list[Poll]:
    return [Poll(t, frozenset(live)) for t, live in states]


def test_time_to_start_runs_from_the_first_pod_to_the_poll_that_sees_the_minimum_live() -> None:
    a = _gang("a", 1.0, pods=2, gpus=4)
    polls = _polls((0.0, set()), (2.0, {"a-0"}), (3.0, {"a-0", "a-1"}), (4.0, {"a-0", "a-1"}))
    f = measure("m", polls, [a], capacity=16, window=4.0)
    assert f.tts == {"a": 2.0}
    assert (f.started, f.not_started, f.tts_p50, f.tts_max) == (1, 0, 2.0, 2.0)
    # Seen partial from 2 s to 3 s, holding 4 GPUs: 4 GPU-s, the gang counted once.
    assert (f.partial_seen, f.partial_max_s, f.partial_gpu_s) == (1, 1.0, 4.0)
    # Bound: 4 GPUs for 1 s, then 8 for 1 s, out of 16 GPUs x 4 s.
    assert f.util == pytest.approx(12 / 64)
    assert f.util_whole == pytest.approx(8 / 64)


def test_a_gang_never_whole_at_once_never_starts_and_counts_as_infinitely_late() -> None:
    # kube-scheduler alone: one member runs and finishes before the other is bound.
    a = _gang("a", 0.0, pods=2, gpus=1)
    b = _gang("b", 0.0, pods=1, gpus=1)
    polls = _polls((0.0, {"b-0", "a-0"}), (5.0, {"a-1"}), (10.0, set()))
    f = measure("default", polls, [a, b], capacity=4, window=10.0)
    assert f.tts == {"a": None, "b": 0.0}
    assert (f.started, f.not_started) == (1, 1)
    assert f.tts_p95 == math.inf and f.tts_max == math.inf
    assert f.tts_p50 == 0.0
    assert f.partial_gpu_s == pytest.approx(10.0)  # a-0 for 5 s, then a-1 for 5 s
    assert f.util == pytest.approx(15 / 40)
    assert f.util_whole == pytest.approx(5 / 40)


def test_a_started_gang_whose_members_finish_unevenly_is_not_partial() -> None:
    a = _gang("a", 0.0, pods=2, gpus=2)
    polls = _polls((1.0, {"a-0", "a-1"}), (3.0, {"a-1"}), (4.0, set()))
    f = measure("default", polls, [a], capacity=4, window=4.0)
    assert f.tts == {"a": 1.0}
    assert (f.partial_seen, f.partial_gpu_s) == (0, 0.0)
    assert f.util == f.util_whole == pytest.approx((4 * 2 + 2 * 1) / 16)


def test_utilisation_stops_at_the_window_and_finished_pods_free_their_gpus() -> None:
    a = _gang("a", 0.0, pods=1, gpus=8)
    b = _gang("b", 6.0, pods=1, gpus=8)
    # a bound from 2 s and finished (no longer live) at 6 s; b bound at 7 s, live past the
    # 8 s window: 4 s of a and 1 s of b count.
    polls = _polls((0.0, set()), (2.0, {"a-0"}), (6.0, set()), (7.0, {"b-0"}),
                   (12.0, {"b-0"}))
    f = measure("m", polls, [a, b], capacity=8, window=8.0)
    assert f.util == pytest.approx((4 + 1) * 8 / (8 * 8.0))
    assert f.tts == {"a": 2.0, "b": 1.0}
    # Pods the bench did not make add nothing.
    other = _polls((0.0, {"stranger"}), (8.0, set()))
    assert measure("m", other, [a], capacity=8, window=8.0).util == 0.0


def test_singles_have_their_own_time_to_bind_and_are_not_gangs() -> None:
    s1 = _gang("s1", 0.0, pods=1, gpus=1, single=True)
    s2 = _gang("s2", 1.0, pods=1, gpus=1, single=True)
    polls = _polls((0.5, {"s1-0"}), (4.0, {"s1-0", "s2-0"}))
    f = measure("m", polls, [s1, s2], capacity=2, window=4.0)
    assert (f.gangs, f.singles, f.tts_p50) == (0, 2, None)
    assert (f.single_p50, f.single_p95) == (0.5, 3.0)


@pytest.mark.parametrize(("q", "expected"), [(50, 3.0), (95, 5.0), (1, 1.0), (100, 5.0)])
def test_percentiles_are_nearest_rank(q: float, expected: float) -> None:
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], q) == expected


def test_percentile_of_nothing_is_none_and_infinity_sorts_last() -> None:
    assert percentile([], 50) is None
    assert percentile([math.inf, 1.0], 95) == math.inf


def _figures(mode: str, *, p50: float, util: float, partial: int) -> StreamFigures:
    return StreamFigures(mode=mode, gangs=10, started=8, not_started=2, tts_p50=p50,
                         tts_p95=math.inf, tts_max=math.inf, singles=0, single_p50=None,
                         single_p95=None, partial_seen=partial, partial_max_s=0.0,
                         partial_gpu_s=0.0, util=util, util_whole=util)


def test_muster_modes_are_compared_with_the_upstream_plugin_when_both_figures_are_finite() -> None:
    figures = [_figures("default", p50=1.0, util=0.9, partial=5),
               _figures("gang", p50=2.0, util=0.5, partial=0),
               _figures("muster", p50=3.0, util=0.6, partial=1),
               _figures("muster+gates", p50=1.0, util=0.4, partial=0)]
    out = ratios(figures)
    assert set(out) == {"muster", "muster+gates"}
    assert out["muster"]["tts_p50"] == pytest.approx(1.5)
    assert out["muster+gates"]["util"] == pytest.approx(0.8)
    assert out["muster"]["started"] == pytest.approx(1.0)
    assert out["muster"]["tts_p95"] is None  # never reached in both
    assert out["muster"]["partial_seen"] is None  # the plugin's is 0
    assert ratios([f for f in figures if f.mode != "gang"]) == {}
