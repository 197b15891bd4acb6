"""The extender under gunicorn, fuzzed over real HTTP: every body answered, nothing wedged.

The normal suite sends 300 seeded bodies (a few seconds); the full run is opt-in, as the long
Hypothesis profile is: ``MUSTER_FUZZ_BODIES=10000 pytest tests/reliability``. Pods asking for a
billion GPUs are among the bodies, and
:func:`test_a_pod_asking_for_a_billion_gpus_is_answered_in_time` sends them on their own too.
"""

from __future__ import annotations

import http.client
import os
import time
from pathlib import Path

import orjson
import pytest

from tests.reliability.bodies import HUGE_QUANTITIES, NODES
from tests.reliability.fuzz import Report, run, serving

BODIES = int(os.environ.get("MUSTER_FUZZ_BODIES", "300"))
SEED = int(os.environ.get("MUSTER_FUZZ_SEED", "16"))

CONNECTION = ("the reply said keep-alive", "no reply on a fresh connection",
              "dropped with no reply", "unreadable reply")
TOO_LARGE = "not refused as too large"
INT64 = "beyond int64"
STALL = ("the server stalled", "server: ")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    done = run(tmp_path_factory.mktemp("fuzz"), seed=SEED, count=BODIES, wedges=True)
    print("\n" + done.figures())
    return done


def _only(report: Report, *markers: str) -> list[str]:
    return [f for f in report.failures if any(m in f for m in markers)]


def test_every_body_is_sent_and_answered(report: Report) -> None:
    assert report.bodies == BODIES, report.figures()


def test_every_reply_is_http_200_with_a_well_formed_result_of_its_verb(report: Report) -> None:
    others = [f for f in report.failures
              if not any(m in f for m in (*CONNECTION, TOO_LARGE, INT64, *STALL))]
    assert others == []


def test_every_request_gets_its_reply_and_a_keep_alive_reply_leaves_the_connection_usable(
        report: Report) -> None:
    assert _only(report, *CONNECTION) == []


def test_a_body_over_the_limit_is_refused_as_too_large_chunked_or_not(report: Report) -> None:
    assert _only(report, TOO_LARGE) == []


def test_no_reply_echoes_an_integer_beyond_int64(report: Report) -> None:
    assert _only(report, INT64) == []


def test_the_server_never_stalls_crashes_or_keeps_a_thread(report: Report) -> None:
    assert _only(report, *STALL) == []


@pytest.mark.parametrize("verb", ["filter", "prioritize", "preempt"])
def test_a_pod_asking_for_a_billion_gpus_is_answered_in_time(verb: str, tmp_path: Path) -> None:
    with serving(tmp_path) as server:
        for gpus in HUGE_QUANTITIES:
            pod = {"metadata": {"name": "greedy", "namespace": "default", "uid": "u-greedy"},
                   "spec": {"containers": [{"name": "main", "resources": {
                       "limits": {"nvidia.com/gpu": gpus}}}]}}
            body = {"Pod": pod, "Nodes": None, "NodeNames": NODES}
            if verb == "preempt":
                body = {"Pod": pod, "NodeNameToMetaVictims": {
                    "n5": {"Pods": [{"UID": "uid-victim"}], "NumPDBViolations": 0}}}
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
            started = time.monotonic()
            try:
                conn.request("POST", f"/{verb}", body=orjson.dumps(body))
                reply = conn.getresponse()
            except TimeoutError:
                pytest.fail(f"{verb} of a pod asking for {gpus} GPUs: no reply within 5 s")
            assert reply.status == 200
            assert time.monotonic() - started < 2, f"{verb} of {gpus} GPUs is slow"
            conn.close()
