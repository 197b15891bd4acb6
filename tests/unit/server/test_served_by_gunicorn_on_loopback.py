"""``muster serve --snapshot`` in a real gunicorn process on a free loopback port."""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from tests.unit.server.builders import (
    bind_body,
    filter_body,
    gpu_node,
    job_of,
    jobset,
    jobset_pod,
    plain_pod,
)
from tests.unit.server.served import ROOT, free_port, serving

LIMIT = 64 * 1024


def call(port: int, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    snapshot = tmp_path_factory.mktemp("snap") / "cluster.yaml"
    items: list[dict[str, Any]] = [gpu_node("n0"), gpu_node("n1"), jobset("train", workers=2,
                                   gpus=8), job_of("train")]
    items += [jobset_pod("train", i, gpus=8) for i in range(2)]
    snapshot.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    port = free_port()
    env = {**os.environ, "MUSTER_BIND_TIMEOUT": "2", "MUSTER_LOG_LEVEL": "warning",
           "MUSTER_MAX_REQUEST_BYTES": str(LIMIT)}
    with serving(["--snapshot", str(snapshot), "--port", str(port)], env,
                 lambda: call(port, "/readyz")[0] == 200):
        yield port


def test_a_gang_is_filtered_and_bound_through_gunicorn(server: int) -> None:
    nodes = ["n0", "n1"]
    sent: dict[int, str] = {}
    for i in range(2):
        status, data = call(server, "/filter", filter_body(jobset_pod("train", i, gpus=8), nodes))
        assert status == 200
        [sent[i]] = orjson.loads(data)["NodeNames"]
    assert sorted(sent.values()) == nodes  # one planned node each
    errors: dict[int, str] = {}

    def bind(i: int) -> None:
        status, data = call(server, "/bind", bind_body(jobset_pod("train", i, gpus=8), sent[i]))
        assert status == 200
        errors[i] = orjson.loads(data)["Error"]

    threads = [threading.Thread(target=bind, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert errors == {0: "", 1: ""}
    status, data = call(server, "/inspect/gangs")
    [gang] = orjson.loads(data)["gangs"]
    assert (gang["state"], gang["bound"]) == ("bound", 2)


def test_malformed_and_probe_requests_through_gunicorn(server: int) -> None:
    status, data = call(server, "/filter", b"{broken")
    assert status == 200 and "not valid JSON" in orjson.loads(data)["Error"]
    # A pod taking no GPU is answered as kube-scheduler alone would: every candidate passes.
    status, data = call(server, "/filter", filter_body(plain_pod("solo", gpus=0), ["n0", "zz"]))
    assert status == 200 and orjson.loads(data)["NodeNames"] == ["n0", "zz"]
    assert call(server, "/healthz")[0] == 200
    status, data = call(server, "/metrics")
    assert status == 200 and b'muster_request_seconds_count{verb="filter"}' in data


def test_bad_settings_fail_at_start_with_a_clear_message(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "extender.cli.main", "serve", "--snapshot", str(tmp_path / "x"),
         "--port", "0"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "MUSTER_PLAN_TTL": "soon"})
    assert result.returncode == 1
    assert "--port / MUSTER_PORT: must be between 1 and 65535" in result.stderr
    assert "MUSTER_PLAN_TTL='soon': invalid duration 'soon'" in result.stderr
    assert "Traceback" not in result.stderr


def _post(conn: http.client.HTTPConnection, path: str, body: object,
          **headers: str) -> dict[str, Any]:
    conn.request("POST", path, body, {"Content-Type": "application/json", **headers},  # type: ignore[arg-type]
                 encode_chunked=headers.get("Transfer-Encoding") == "chunked")
    response = conn.getresponse()
    assert response.status == 200
    result: dict[str, Any] = orjson.loads(response.read())
    return result


def _small_filter() -> bytes:
    return filter_body(plain_pod("solo", gpus=0), ["n0"])


@pytest.mark.parametrize("size", [LIMIT + 1, 20 * LIMIT], ids=["just-over", "twenty-times"])
def test_a_refused_body_leaves_the_keep_alive_connection_usable(server: int, size: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server, timeout=10)
    big = orjson.dumps({"Pod": {"metadata": {"name": "x", "annotations": {"a": "b" * size}}},
                        "NodeNames": ["n0"]})
    refused = _post(conn, "/filter", big)
    assert f"larger than the {LIMIT}-byte limit" in refused["Error"]
    # kube-scheduler (Go) reuses the connection and does not retry a POST that fails on it
    assert _post(conn, "/filter", _small_filter())["NodeNames"] == ["n0"]


def test_a_chunked_body_over_the_limit_is_refused_as_too_large_not_cut(server: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server, timeout=10)
    body = _small_filter()
    padding = b" " * 4096
    chunks = iter([body[:-1], *([padding] * (2 * LIMIT // len(padding))), body[-1:]])
    refused = _post(conn, "/filter", chunks, **{"Transfer-Encoding": "chunked"})
    assert f"larger than the {LIMIT}-byte limit" in refused["Error"]
    assert _post(conn, "/filter", iter([body[:10], body[10:]]),
                 **{"Transfer-Encoding": "chunked"})["NodeNames"] == ["n0"]


def test_preempt_refuses_a_pdb_violation_count_beyond_int64(server: int) -> None:
    pod = plain_pod("solo", gpus=0)
    victims = {"n0": {"Pods": [{"UID": "v1"}], "NumPDBViolations": 2**63}}
    status, data = call(server, "/preempt", orjson.dumps(
        {"Pod": pod, "NodeNameToMetaVictims": victims}))
    assert status == 200
    assert orjson.loads(data) == {"NodeNameToMetaVictims": {}}
