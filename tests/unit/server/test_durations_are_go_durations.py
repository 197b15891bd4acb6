"""Durations as Go's time.ParseDuration reads them (kube-scheduler's configuration and kubectl
take them), with a bare number meaning seconds; every setting and flag that is a duration."""

from __future__ import annotations

import pytest

from extender.cli.main import build_parser, main
from extender.cli.serve import settings_from
from extender.core.model.durations import (
    DurationError,
    format_seconds,
    parse_go_duration,
    parse_seconds,
)
from extender.server.service import core_settings
from extender.server.settings import SettingsError, build_settings

S = 1_000_000_000


@pytest.mark.parametrize(("text", "nanos"), [
    # The examples of Go's time.ParseDuration documentation and its test table.
    ("300ms", 300_000_000), ("-1.5h", -5400 * S), ("2h45m", 9900 * S),
    ("0", 0), ("+0", 0), ("-0", 0), ("5s", 5 * S), ("30s", 30 * S), ("1478s", 1478 * S),
    ("-5s", -5 * S), ("+5s", 5 * S), ("-0s", 0), ("5.0s", 5 * S), ("5.6s", 5_600_000_000),
    ("5.s", 5 * S), (".5s", S // 2), ("1.0s", S), ("1.00s", S), ("1.004s", 1_004_000_000),
    ("1.0040s", 1_004_000_000), ("100.00100s", 100_001_000_000),
    ("10ns", 10), ("11us", 11_000), ("12\u00b5s", 12_000), ("12\u03bcs", 12_000),
    ("13ms", 13_000_000), ("14s", 14 * S), ("15m", 900 * S), ("16h", 57600 * S),
    ("3h30m", 12600 * S), ("10.5s4m", 250_500_000_000), ("-2m3.4s", -123_400_000_000),
    ("1h2m3s4ms5us6ns", 3723 * S + 4_005_006), ("39h9m14.425s", 140954_425_000_000),
    ("52763797000ns", 52_763_797_000), ("0.3333333333333333333h", 1_200 * S),
    ("9007199254740993ns", 9007199254740993),
    ("9223372036854775807ns", (1 << 63) - 1), ("9223372036854775.807us", (1 << 63) - 1),
    ("9223372036s854ms775us807ns", (1 << 63) - 1),
    ("-9223372036854775808ns", -(1 << 63)), ("-2562047h47m16.854775808s", -(1 << 63)),
    ("0.100000000000000000000h", 360 * S), ("0.830103483285477580700h", 2988372539827),
])
def test_what_go_accepts_is_read_to_the_nanosecond(text: str, nanos: int) -> None:
    assert parse_go_duration(text) == nanos


@pytest.mark.parametrize(("text", "why"), [
    ("", "invalid duration"), ("3", "missing unit"), ("-", "invalid duration"),
    ("s", "invalid duration"), (".", "invalid duration"), ("-.", "invalid duration"),
    (".s", "invalid duration"), ("+.s", "invalid duration"), ("1d", "unknown unit 'd'"),
    ("1w", "unknown unit"), ("1.5y", "unknown unit"), ("3sec", "unknown unit 'sec'"),
    ("1..5s", "missing unit"), ("1s ", "unknown unit 's '"), (" 1s", "invalid duration"),
    ("3000000h", "out of range"), ("9223372036854775808ns", "out of range"),
    ("9223372036854775807ns1ns", "out of range"), ("2562047h47m16.854775808s", "out of range"),
    ("9" * 5000 + "s", "out of range"),
    ("\u0663s", "invalid duration"), ("1\u0660s", "unknown unit"),  # digits Go does not read
])
def test_what_go_refuses_is_refused_quoting_the_value(text: str, why: str) -> None:
    with pytest.raises(DurationError, match=why) as err:
        parse_go_duration(text)
    assert repr(text) in str(err.value)


def test_bare_numbers_stay_seconds_and_go_durations_are_seconds_too() -> None:
    assert parse_seconds("3") == 3.0
    assert parse_seconds("2.5") == 2.5
    assert parse_seconds(" 60 ") == 60.0
    assert parse_seconds("-1") == -1.0
    assert parse_seconds("500ms") == 0.5
    assert parse_seconds("1h30m") == 5400.0
    assert parse_seconds("2m") == 120.0


@pytest.mark.parametrize(("seconds", "text"), [
    (3, "3s"), (60, "1m0s"), (5400, "1h30m0s"), (0.5, "500ms"), (90.25, "1m30.25s"),
    (0.0005, "500\u00b5s"), (1e-9, "1ns"), (0, "0s"), (-3, "-3s"),
])
def test_durations_are_shown_as_go_prints_them(seconds: float, text: str) -> None:
    assert format_seconds(seconds) == text
    assert parse_seconds(text) == pytest.approx(seconds)


def test_serve_settings_take_go_durations_from_the_environment() -> None:
    s = build_settings({}, {"MUSTER_BIND_TIMEOUT": "5s", "MUSTER_PLAN_TTL": "2m"})
    assert (s.bind_timeout, s.plan_ttl) == (5.0, 120.0)
    s = build_settings({}, {"MUSTER_BIND_TIMEOUT": "1500ms", "MUSTER_PLAN_TTL": "1h30m"})
    assert (s.bind_timeout, s.plan_ttl) == (1.5, 5400.0)


def test_a_bad_duration_variable_is_one_line_naming_the_variable_and_value() -> None:
    with pytest.raises(SettingsError) as err:
        build_settings({}, {"MUSTER_BIND_TIMEOUT": "5 sec"})
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith("invalid setting MUSTER_BIND_TIMEOUT='5 sec': unknown unit")
    with pytest.raises(SettingsError, match=r"--plan-ttl / MUSTER_PLAN_TTL: must be a positive "
                                            r"duration, got -2m0s"):
        build_settings({}, {"MUSTER_PLAN_TTL": "-2m"})
    with pytest.raises(SettingsError, match=r"shorter than --plan-ttl \(1m0s\)"):
        build_settings({}, {"MUSTER_BIND_TIMEOUT": "90s"})


def test_serve_flags_take_go_durations_and_name_the_flag_when_wrong(capsys) -> None:
    args = build_parser().parse_args(["serve", "--bind-timeout", "3s", "--plan-ttl", "2m"])
    s = settings_from(args, {"MUSTER_BIND_TIMEOUT": "9s"})
    assert (s.bind_timeout, s.plan_ttl) == (3.0, 120.0)
    assert main(["serve", "--bind-timeout", "3 s"]) == 1
    first, hint = capsys.readouterr().err.splitlines()
    assert first.startswith("error: argument --bind-timeout: unknown unit ' s' in duration "
                            "'3 s'")
    assert hint == "See 'muster serve --help' for usage."
    assert main(["serve", "--plan-ttl", "0s"]) == 1
    assert "argument --plan-ttl: must be a positive duration, got '0s'" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "dest", "seconds"), [
    (["get", "jobsets", "--request-timeout", "5s"], "request_timeout", 5.0),
    (["describe", "x/y", "--request-timeout", "1m"], "request_timeout", 60.0),
    (["fit", "-f", "w.yaml", "--request-timeout", "500ms"], "request_timeout", 0.5),
    (["descriptors", "list", "--request-timeout", "7"], "request_timeout", 7.0),
    (["sandbox", "up", "--bind-timeout", "20s"], "bind_timeout", 20.0),
    (["simulate", "--synthetic", "nodes=2", "--horizon", "6h"], "horizon", 21600.0),
])
def test_every_duration_flag_takes_a_go_duration(argv: list[str], dest: str,
                                                  seconds: float) -> None:
    assert getattr(build_parser().parse_args(argv), dest) == seconds


def test_the_replacement_hold_is_set_by_flag_or_environment_and_reaches_the_session() -> None:
    args = build_parser().parse_args(["serve", "--replacement-ttl", "90s"])
    assert core_settings(settings_from(args, {})).replacement_ttl == 90.0
    bare = build_parser().parse_args(["serve"])
    assert core_settings(settings_from(bare, {"MUSTER_REPLACEMENT_TTL": "2m"})
                         ).replacement_ttl == 120.0
    with pytest.raises(SettingsError, match=r"--replacement-ttl / MUSTER_REPLACEMENT_TTL: must "
                                            r"be a positive duration"):
        build_settings({}, {"MUSTER_REPLACEMENT_TTL": "-1s"})
