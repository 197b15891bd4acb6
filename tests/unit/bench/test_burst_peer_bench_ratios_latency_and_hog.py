"""The burst peer bench's comparisons: ratios against the upstream plugin and kube-scheduler
alone of the same run, with and without the CPU hog; filter and bind p50/p99 read from
Muster's own histogram; and a hog that holds one core and never outlives its bound."""

from __future__ import annotations

import os
import time

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from extender.files.catalog import packaged_catalog
from extender.server.metrics import Metrics
from tests.bench import bench_peers
from tests.bench.peer_compare import (
    CpuHog,
    Figures,
    api_latency,
    api_requests,
    api_time,
    event_reasons,
    quantile,
    ratios,
    repeated_ratios,
    rounds,
    verb_latency,
)


def test_quantiles_interpolate_within_the_bucket_they_fall_in() -> None:
    # 100 observations: 50 at or under 1 ms, 40 more under 2 ms, 10 under 5 ms.
    buckets = [(0.001, 50), (0.002, 90), (0.005, 100), (float("inf"), 100)]
    assert quantile(0.5, buckets) == pytest.approx(0.001)
    assert quantile(0.7, buckets) == pytest.approx(0.0015)
    assert quantile(0.99, buckets) == pytest.approx(0.0047)
    assert quantile(0.5, [(0.001, 0), (float("inf"), 0)]) is None
    # Past the last finite bound the answer is that bound, as histogram_quantile says.
    assert quantile(0.99, [(0.001, 1), (float("inf"), 10)]) == pytest.approx(0.001)


def test_verb_latency_reads_musters_own_histogram() -> None:
    metrics = Metrics()
    for _ in range(98):
        metrics.latency.labels("filter").observe(0.0003)
    for _ in range(2):
        metrics.latency.labels("filter").observe(0.04)
    metrics.latency.labels("bind").observe(0.003)
    found = verb_latency(generate_latest(metrics.registry).decode())
    count, p50, p99 = found["filter"]
    assert count == 100
    assert p50 is not None and p50 <= 0.0005
    assert p99 is not None and 0.025 < p99 <= 0.05
    assert found["bind"][0] == 1
    assert verb_latency("")["filter"] == (0, None, None)


def test_ratios_compare_each_muster_mode_with_its_own_condition() -> None:
    runs = [Figures("default", 5.0, 100.0, 23, 76), Figures("gang", 8.0, 70.0, 64, 0),
            Figures("muster+gates", 6.0, 60.0, 65, 0),
            Figures("default (hog)", 6.0, 90.0, 23, 70), Figures("gang (hog)", 16.0, 35.0, 60, 0),
            Figures("muster+gates (hog)", 9.0, 40.0, 61, 0)]
    lines = ratios(runs)
    plain = next(line for line in lines if line.startswith("muster+gates:"))
    assert "settle x0.75 of the upstream plugin's" in plain
    assert "gangs whole 65 to its 64" in plain
    assert "pods/s 60% of kube-scheduler alone" in plain
    hogged = next(line for line in lines if line.startswith("muster+gates (hog):"))
    assert "settle x0.56" in hogged  # against the plugin under the hog, not without it
    slowdown = next(line for line in lines if line.startswith("muster+gates: under"))
    assert "x1.50 of its own" in slowdown
    assert "x0.75 of the upstream plugin's" in slowdown  # 1.5 against the plugin's 2.0
    assert "gang: under the CPU hog settle is x2.00 of its own without it" in lines
    assert not any(line.startswith(("gang", "default")) and "under the CPU hog" not in line
                   for line in lines)  # peers get their slowdown, not a comparison
    assert ratios([Figures("muster", 6.0, 60.0, 65, 0)]) == [
        "muster: partial at the end 0"]


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_the_hog_holds_one_core_while_it_runs_and_is_gone_after() -> None:
    with CpuHog(limit=30) as hog:
        assert hog._proc is not None
        pid = hog._proc.pid
        assert os.sched_getaffinity(pid) == {0}
        # Busy, not sleeping: 0.2 CPU-s within 10 s even on a machine others keep busy.
        deadline = time.monotonic() + 10
        while _cpu_seconds(pid) <= 0.2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _cpu_seconds(pid) > 0.2
    assert hog._proc.poll() is not None
    with CpuHog(limit=0.3) as short:  # the bound holds even if the bench never stops it
        assert short._proc is not None
        assert short._proc.wait(timeout=10) == 0


def api_metrics() -> str:
    """The API server's families, as its /metrics names and labels them."""
    registry = CollectorRegistry()
    requests = Histogram("apiserver_request_duration_seconds", "",
                         ["verb", "resource", "subresource", "scope"],
                         buckets=(0.01, 0.1), registry=registry)
    for seconds in [0.005] * 10 + [0.05] * 10:
        requests.labels("POST", "pods", "", "resource").observe(seconds)
    for _ in range(5):  # a binding is no creation
        requests.labels("POST", "pods", "binding", "resource").observe(0.001)
    requests.labels("LIST", "pods", "", "cluster").observe(2.0)  # a poller's read
    requests.labels("WATCH", "pods", "", "cluster").observe(100.0)  # as long as its client
    hooks = Histogram("apiserver_admission_webhook_admission_duration_seconds", "",
                      ["name", "operation", "rejected", "type"], buckets=(0.005, 0.025),
                      registry=registry)
    for seconds in [0.001] * 18 + [0.02] * 2:
        hooks.labels("gate.muster.dev", "CREATE", "false", "admit").observe(seconds)
    total = Counter("apiserver_request", "", ["verb", "resource", "subresource", "code"],
                    registry=registry)
    total.labels("POST", "pods", "", "201").inc(20)
    total.labels("POST", "events", "", "201").inc(30)
    total.labels("POST", "events", "", "409").inc(2)
    total.labels("WATCH", "pods", "", "200").inc(99)
    total.labels("PATCH", "pods", "status", "200").inc(7)
    return generate_latest(registry).decode()


def test_the_api_servers_own_figures_name_pod_creation_the_webhook_and_who_wrote_what(
) -> None:
    text = api_metrics()
    found = api_latency(text)
    assert set(found) == {"pod create", "webhook gate.muster.dev"}  # bindings are not creations
    count, p50, _ = found["pod create"]
    assert count == 20 and p50 == pytest.approx(0.01)
    assert found["webhook gate.muster.dev"][0] == 20
    assert found["webhook gate.muster.dev"][1] == pytest.approx(0.005 * 10 / 18)
    assert api_requests(text) == "POST events 32, POST pods 20, PATCH pods/status 7"
    # Time serving requests: reads count, watches do not (they last as long as their client).
    assert api_time(text) == "LIST pods 2.0, POST pods 0.5, POST pods/binding 0.0"  # 0.55 s


def test_repeated_rounds_give_each_ratio_per_round_and_its_median() -> None:
    def round_(k: int, gang: float, muster: float, gang_hog: float, muster_hog: float,
               ) -> list[Figures]:
        return [Figures(f"default #{k}", 5.0, 100.0, 23, 76),
                Figures(f"gang #{k}", gang, 70.0, 64, 0),
                Figures(f"muster+gates #{k}", muster, 40.0 + k, 65, 0),
                Figures(f"default (hog) #{k}", 6.0, 90.0, 23, 70),
                Figures(f"gang (hog) #{k}", gang_hog, 35.0, 60, 0),
                Figures(f"muster+gates (hog) #{k}", muster_hog, 30.0, 61, 0)]

    # The machine slows between rounds; within a round the ratios stay near each other.
    runs = round_(1, 8.0, 10.0, 12.0, 15.0) + round_(2, 12.0, 12.0, 18.0, 18.0) \
        + round_(3, 6.0, 9.0, 9.0, 13.5)
    grouped = rounds(runs)
    assert [len(one) for one in grouped] == [6, 6, 6]
    assert {f.mode for f in grouped[1]} == {"default", "gang", "muster+gates", "default (hog)",
                                            "gang (hog)", "muster+gates (hog)"}
    assert "muster+gates: settle x1.00 of the upstream plugin's" in ratios(grouped[1])[0]
    lines = repeated_ratios(runs)
    assert ("muster+gates: settle over the upstream plugin's, median of 3 rounds x1.25 "
            "(target <= 1.0; rounds x1.25, x1.00, x1.50)") in lines
    assert ("muster+gates: pods/s as a share of kube-scheduler alone's, median 42% "
            "(target >= 50%; rounds 41%, 42%, 43%)") in lines
    # Slowdowns: x1.50/x1.50, x1.50/x1.50, x1.50/x1.50 of the plugin's own.
    assert ("muster+gates: hog slowdown over the upstream plugin's, median x1.00 "
            "(target <= 1.0; rounds x1.00, x1.00, x1.00)") in lines
    assert repeated_ratios(grouped[0]) == []  # one round: nothing over rounds


def test_events_are_counted_by_who_wrote_them_and_why() -> None:
    events = [
        *[{"reason": "GangWaiting", "source": {"component": "muster"},
           "reportingComponent": "muster"}] * 3,
        *[{"reason": "Scheduled", "reportingController": "default-scheduler"}] * 2,
        {"reason": "FailedScheduling", "source": {"component": "default-scheduler"}},
        {"message": "no reason, no writer"},
    ]
    assert event_reasons(events) == ("muster GangWaiting 3, default-scheduler Scheduled 2, "
                                     "? ? 1, default-scheduler FailedScheduling 1")
    assert event_reasons(events, top=1) == "muster GangWaiting 3"


def test_the_claims_mix_asks_the_same_gpus_through_claim_templates() -> None:
    """``--gpu-model dra-claims``: the seeded mix, every GPU request turned into a claim from
    the template of its size, demanding the same GPUs (as Muster counts them)."""
    plain = bench_peers.MixSpec(gangs=20, singles=10)
    claims = bench_peers.MixSpec(gangs=20, singles=10, gpu_model="dra-claims")
    catalog = packaged_catalog()
    before = bench_peers.configuration(plain, bench_peers.generate(plain), catalog)
    mix = bench_peers.generate(claims)
    after = bench_peers.configuration(claims, mix, catalog)
    assert after["gpus_demanded"] == before["gpus_demanded"] > 0
    text = str(mix)
    assert "nvidia.com/gpu" not in text and "resourceClaimTemplateName': 'gpu-" in text
