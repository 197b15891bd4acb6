"""One frozen Settings from flags over MUSTER_* variables over defaults, validated at once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from extender.cli.main import main
from extender.server.runner import EmbeddedGunicorn
from extender.server.settings import Settings, SettingsError, build_settings


def test_flags_win_over_environment_which_wins_over_defaults() -> None:
    s = build_settings({"port": 9000, "bind_timeout": None},
                       {"MUSTER_PORT": "7000", "MUSTER_BIND_TIMEOUT": "2.5",
                        "MUSTER_DESCRIPTORS": "a,b"})
    assert (s.port, s.bind_timeout, s.descriptors, s.host) == (9000, 2.5, ("a", "b"),
                                                                "127.0.0.1")


def test_every_problem_is_reported_naming_flag_and_variable() -> None:
    with pytest.raises(SettingsError) as err:
        build_settings({"scoring": "best"}, {"MUSTER_PORT": "eighty", "MUSTER_PLAN_TTL": "-1"})
    text = str(err.value)
    assert "MUSTER_PORT='eighty': expected an integer" in text
    assert "--plan-ttl / MUSTER_PLAN_TTL: must be a positive duration, got -1s" in text
    assert ("--scoring / MUSTER_SCORING: must be one of binpack, spread, topology, "
            "fragmentation") in text


def test_bind_timeout_must_stay_below_the_plan_ttl() -> None:
    with pytest.raises(SettingsError, match="shorter than --plan-ttl"):
        build_settings({"bind_timeout": 30.0, "plan_ttl": 10.0}, {})


def test_snapshot_mode_rejects_cluster_flags() -> None:
    with pytest.raises(SettingsError, match="serves without an API server"):
        build_settings({"snapshot": "c.yaml", "kubeconfig": "k"}, {})
    assert build_settings({"snapshot": "c.yaml"}, {}).live is False
    assert Settings().live is True


def test_serve_with_a_missing_kubeconfig_exits_1_naming_it(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str],
                                                           ) -> None:
    missing = tmp_path / "nope.yaml"
    code = main(["serve", "--kubeconfig", str(missing), "--port", "1"])
    err = capsys.readouterr().err
    assert code == 1
    assert str(missing) in err and "Traceback" not in err


def test_serve_with_an_unknown_context_exits_1_naming_it(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str],
                                                         ) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "a",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "a", "context": {"cluster": "c", "user": "u"}}]}))
    code = main(["serve", "--kubeconfig", str(kubeconfig), "--context", "elsewhere"])
    err = capsys.readouterr().err
    assert code == 1
    assert "elsewhere" in err and "Traceback" not in err


def test_workload_limits_come_from_flags_or_environment_and_must_be_positive() -> None:
    limits = build_settings({"max_workload_gangs": 7},
                            {"MUSTER_MAX_WORKLOAD_PODS": "40"}).workload_limits
    assert (limits.pods, limits.gangs) == (40, 7)
    with pytest.raises(SettingsError, match="--max-workload-pods / MUSTER_MAX_WORKLOAD_PODS: "
                                            "must be at least 1, got 0"):
        build_settings({"max_workload_pods": 0}, {})


@pytest.mark.parametrize(("given", "problem"), [
    ({"webhook_port": 8443}, "give --webhook-cert and --webhook-key"),
    ({"webhook_port": 8443, "webhook_cert": "c"}, "give --webhook-cert and --webhook-key"),
    ({"webhook_port": 8888, "webhook_cert": "c", "webhook_key": "k"}, "must differ"),
    ({"webhook_port": 70000}, "between 0 (none) and 65535"),
    ({"gate_bound": 0.0}, "--gate-bound / MUSTER_GATE_BOUND: must be a positive duration"),
], ids=["no-certificate", "no-key", "the-verb-port", "out-of-range", "no-bound"])
def test_the_webhook_needs_its_own_port_and_a_certificate(given: dict[str, object],
                                                          problem: str) -> None:
    with pytest.raises(SettingsError, match=r"webhook|gate") as err:
        build_settings(given, {})
    assert problem in str(err.value)


def test_the_webhook_settings_come_from_the_environment() -> None:
    s = build_settings({}, {"MUSTER_WEBHOOK_PORT": "8443", "MUSTER_WEBHOOK_CERT": "/c",
                            "MUSTER_WEBHOOK_KEY": "/k", "MUSTER_GATE_BOUND": "90s"})
    assert (s.webhook, s.webhook_port, s.webhook_cert, s.webhook_key, s.gate_bound) == (
        True, 8443, "/c", "/k", 90.0)
    assert not Settings().webhook


def test_the_switch_interval_is_a_short_duration_and_the_worker_applies_it() -> None:
    assert Settings().switch_interval == 0.001  # Python's own 5ms made each lock wait long
    assert build_settings({}, {"MUSTER_SWITCH_INTERVAL": "500us"}).switch_interval == 0.0005
    for bad in ("0", "1s"):
        with pytest.raises(SettingsError, match="--switch-interval / MUSTER_SWITCH_INTERVAL"):
            build_settings({}, {"MUSTER_SWITCH_INTERVAL": bad})
    before = sys.getswitchinterval()
    try:
        served = EmbeddedGunicorn(lambda: "the app", {}, switch_interval=0.0005)
        assert served.load() == "the app"
        assert sys.getswitchinterval() == pytest.approx(0.0005)
    finally:
        sys.setswitchinterval(before)
