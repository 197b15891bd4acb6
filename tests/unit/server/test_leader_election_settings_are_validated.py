"""Leader election settings: Go durations like kube-scheduler's ``leaderElection``, and
timings that could let a standby start while the leader still decides are refused at start."""

from __future__ import annotations

import argparse

import pytest

from extender.cli.serve import register, settings_from
from extender.server.settings import SettingsError, build_settings


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["serve", *argv])


def test_flags_take_go_durations_and_the_environment_turns_it_on() -> None:
    s = settings_from(parsed("--lease-duration", "20s", "--renew-deadline", "12s",
                             "--retry-period", "1500ms", "--lease-name", "gpu"),
                      {"MUSTER_LEADER_ELECT": "true", "MUSTER_LEASE_NAMESPACE": "ops"})
    assert (s.leader_elect, s.lease_name, s.lease_namespace) == (True, "gpu", "ops")
    assert (s.lease_duration, s.renew_deadline, s.retry_period) == (20.0, 12.0, 1.5)


def test_kube_schedulers_defaults_are_the_defaults() -> None:
    s = settings_from(parsed("--leader-elect"), {})
    assert (s.lease_duration, s.renew_deadline, s.retry_period) == (15.0, 10.0, 2.0)
    assert not settings_from(parsed(), {}).leader_elect


@pytest.mark.parametrize(("env", "words"), [
    ({"MUSTER_RENEW_DEADLINE": "15s"}, "lease-duration must be longer than renew-deadline"),
    ({"MUSTER_RETRY_PERIOD": "9s"}, "1.2 x retry-period"),
    ({"MUSTER_LEASE_NAME": " "}, "--lease-name / MUSTER_LEASE_NAME: must not be empty"),
    ({"MUSTER_SNAPSHOT": "x.yaml"}, "needs an API server"),
])
def test_timings_giving_two_leaders_fail_at_start(env: dict[str, str], words: str) -> None:
    with pytest.raises(SettingsError) as err:
        build_settings({"leader_elect": True}, env)
    assert words in str(err.value)
    assert "--leader-elect / MUSTER_LEADER_ELECT" in str(err.value) or "lease" in str(err.value)


def test_the_timings_are_not_checked_without_leader_election() -> None:
    assert not build_settings({}, {"MUSTER_RENEW_DEADLINE": "30s"}).leader_elect
