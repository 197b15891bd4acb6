"""``muster serve --server granian``: the same surface as gunicorn's (the verbs over TLS that
requires a client certificate, the probe port, bounded bodies on a connection kept alive) and
a request in flight answered when the server is told to stop."""

from __future__ import annotations

import http.client
import os
import signal
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from extender.cli.main import main
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

MAKE_CERTS = ROOT / "manifests" / "tls" / "make-certs.sh"
LIMIT = 64 * 1024
NODES = ["n0", "n1", "n2", "n3"]


@dataclass(frozen=True)
class Granian:
    proc: subprocess.Popen[bytes]
    verb_port: int
    probe_port: int
    certs: Path

    def connection(self, *, client_cert: bool = True) -> http.client.HTTPSConnection:
        context = ssl.create_default_context(cafile=str(self.certs / "ca.crt"))
        if client_cert:
            context.load_cert_chain(str(self.certs / "scheduler.crt"),
                                    str(self.certs / "scheduler.key"))
        return http.client.HTTPSConnection("127.0.0.1", self.verb_port, context=context,
                                           timeout=10)

    def probe(self, path: str) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", self.probe_port, timeout=10)
        conn.request("GET", path)
        return conn.getresponse().status


def post(conn: http.client.HTTPConnection, path: str, body: bytes) -> dict[str, Any]:
    conn.request("POST", path, body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    result: dict[str, Any] = orjson.loads(response.read())
    return result


def cluster(path: Path, *, gangs: int) -> Path:
    items: list[dict[str, Any]] = [gpu_node(f"n{i}") for i in range(2 * gangs)]
    for g in range(gangs):
        items += [jobset(f"train{g}", workers=2, gpus=8), job_of(f"train{g}")]
        items += [jobset_pod(f"train{g}", i, gpus=8) for i in range(2)]
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


@pytest.fixture
def granian(tmp_path: Path) -> Iterator[Granian]:
    certs = tmp_path / "certs"
    subprocess.run(["sh", str(MAKE_CERTS), str(certs), "IP:127.0.0.1"], check=True,
                   capture_output=True, timeout=60)
    verb_port, probe_port = free_port(), free_port()
    env = {**os.environ, "MUSTER_SERVER": "granian", "MUSTER_BIND_TIMEOUT": "5s",
           "MUSTER_LOG_LEVEL": "warning", "MUSTER_MAX_REQUEST_BYTES": str(LIMIT),
           "MUSTER_PROBE_PORT": str(probe_port), "MUSTER_PROBE_HOST": "127.0.0.1",
           "MUSTER_TLS_CERT": str(certs / "muster.crt"),
           "MUSTER_TLS_KEY": str(certs / "muster.key"),
           "MUSTER_TLS_CLIENT_CA": str(certs / "ca.crt")}
    snapshot = cluster(tmp_path / "cluster.yaml", gangs=2)
    with serving(["--snapshot", str(snapshot), "--port", str(verb_port)], env,
                 lambda: Granian(None, 0, probe_port, certs).probe("/readyz") == 200  # type: ignore[arg-type]
                 ) as proc:
        yield Granian(proc, verb_port, probe_port, certs)


def test_a_gang_is_filtered_and_bound_over_tls_by_the_client_holding_the_certificate(
        granian: Granian) -> None:
    conn = granian.connection()
    sent = [post(conn, "/filter", filter_body(jobset_pod("train0", i, gpus=8), ["n0", "n1"]))
            ["NodeNames"][0] for i in range(2)]
    assert sorted(sent) == ["n0", "n1"]
    errors: dict[int, str] = {}

    def bind(i: int) -> None:  # each on its own connection, held at the barrier together
        body = bind_body(jobset_pod("train0", i, gpus=8), sent[i])
        errors[i] = post(granian.connection(), "/bind", body)["Error"]

    threads = [threading.Thread(target=bind, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert errors == {0: "", 1: ""}
    conn.request("GET", "/inspect/gangs")  # the same connection, kept alive
    gangs = orjson.loads(conn.getresponse().read())["gangs"]
    assert [(g["gang"], g["state"]) for g in gangs if g["bound"]] == [
        ("ml/train0", "bound")]


def test_a_client_without_a_certificate_is_refused_and_the_probes_answer(
        granian: Granian) -> None:
    conn = granian.connection(client_cert=False)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        post(conn, "/filter", filter_body(plain_pod("solo", gpus=0), ["n0"]))
    assert granian.probe("/healthz") == 200
    assert granian.probe("/bind") == 404


def test_a_refused_body_leaves_the_keep_alive_connection_usable(granian: Granian) -> None:
    conn = granian.connection()
    big = orjson.dumps({"Pod": {"metadata": {"name": "x", "annotations": {"a": "b" * 20 * LIMIT}}},
                        "NodeNames": ["n0"]})
    assert f"larger than the {LIMIT}-byte limit" in post(conn, "/filter", big)["Error"]
    small = filter_body(plain_pod("solo", gpus=0), ["n0"])
    assert post(conn, "/filter", small)["NodeNames"] == ["n0"]


def test_a_bind_held_at_the_barrier_when_the_server_stops_is_still_answered(
        granian: Granian) -> None:
    conn = granian.connection()
    result = post(conn, "/filter", filter_body(jobset_pod("train1", 0, gpus=8), NODES))
    assert len(result["NodeNames"]) == 1, result
    [node] = result["NodeNames"]
    answer: dict[str, Any] = {}

    def bind() -> None:  # its gang's other member never comes: held until the bind timeout
        try:
            answer.update(post(granian.connection(), "/bind",
                               bind_body(jobset_pod("train1", 0, gpus=8), node)))
        except (OSError, http.client.HTTPException) as err:
            answer["failed"] = repr(err)

    held = threading.Thread(target=bind)
    held.start()
    time.sleep(1.0)
    granian.proc.send_signal(signal.SIGTERM)
    held.join(20)
    assert "failed" not in answer, answer
    assert "the minimum did not reach bind in time" in answer["Error"], answer
    assert granian.proc.wait(timeout=20) == 0


def test_an_unknown_server_is_refused_at_start_naming_the_choices(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MUSTER_SERVER", "uvicorn")
    assert main(["serve", "--port", str(free_port())]) == 1
    assert "MUSTER_SERVER='uvicorn': expected one of gunicorn, granian" in capsys.readouterr().err
