"""The secured surface, through a real gunicorn: the verbs over TLS that requires a client
certificate (made by ``manifests/tls/make-certs.sh``, as the install does), and a probe port
that answers the probes and ``/metrics`` but never a verb."""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import ssl
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from extender.cli.main import main
from extender.server.settings import SettingsError, build_settings
from tests.unit.server.builders import (
    bind_body,
    filter_body,
    gpu_node,
    job_of,
    jobset,
    jobset_pod,
)
from tests.unit.server.served import ROOT, free_port, serving

MAKE_CERTS = ROOT / "manifests" / "tls" / "make-certs.sh"


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """CA, server and client certificates, made once per session with openssl."""
    out = tmp_path_factory.mktemp("certs")
    subprocess.run(["sh", str(MAKE_CERTS), str(out), "IP:127.0.0.1", "DNS:localhost"],
                   check=True, capture_output=True, timeout=60)
    return out


@dataclass(frozen=True)
class Served:
    verb_port: int
    probe_port: int
    certs: Path

    def context(self, *, client_cert: bool) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.certs / "ca.crt"))
        if client_cert:
            context.load_cert_chain(str(self.certs / "scheduler.crt"),
                                    str(self.certs / "scheduler.key"))
        return context

    def verb(self, path: str, body: bytes | None = None, *,
             client_cert: bool = True) -> tuple[int, bytes]:
        return _call(f"https://127.0.0.1:{self.verb_port}{path}", body,
                     self.context(client_cert=client_cert))

    def probe(self, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        return _call(f"http://127.0.0.1:{self.probe_port}{path}", body, None)


def _call(url: str, body: bytes | None, context: ssl.SSLContext | None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _snapshot(path: Path) -> Path:
    items: list[dict[str, Any]] = [gpu_node("n0"), gpu_node("n1"),
                                   jobset("train", workers=2, gpus=8), job_of("train")]
    items += [jobset_pod("train", i, gpus=8) for i in range(2)]
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, certs: Path) -> Iterator[Served]:
    snapshot = _snapshot(tmp_path_factory.mktemp("snap") / "cluster.yaml")
    verb_port, probe_port = free_port(), free_port()
    env = {**os.environ, "MUSTER_BIND_TIMEOUT": "2s", "MUSTER_LOG_LEVEL": "warning",
           "MUSTER_PROBE_PORT": str(probe_port), "MUSTER_PROBE_HOST": "127.0.0.1",
           "MUSTER_TLS_CERT": str(certs / "muster.crt"),
           "MUSTER_TLS_KEY": str(certs / "muster.key"),
           "MUSTER_TLS_CLIENT_CA": str(certs / "ca.crt")}
    target = Served(verb_port, probe_port, certs)
    with serving(["--snapshot", str(snapshot), "--port", str(verb_port)], env,
                 lambda: target.probe("/readyz")[0] == 200):
        yield target


def test_bind_on_the_probe_port_is_refused_while_probes_and_metrics_answer(
        served: Served) -> None:
    pod = jobset_pod("train", 0, gpus=8)
    for path, body in (("/bind", bind_body(pod, "n0")), ("/filter", filter_body(pod, ["n0"])),
                       ("/inspect/gangs", None)):
        status, data = served.probe(path, body)
        assert status == 404, path
        assert f"answer on port {served.verb_port} only" in orjson.loads(data)["error"]
    assert served.probe("/healthz") == (200, b'{"status":"ok"}')
    assert served.probe("/readyz")[0] == 200
    status, metrics = served.probe("/metrics")
    assert status == 200 and b"muster_ready 1.0" in metrics


def test_a_client_without_a_certificate_is_refused_in_the_handshake(served: Served) -> None:
    with pytest.raises((ssl.SSLError, ConnectionResetError, urllib.error.URLError)) as err:
        served.verb("/filter", filter_body(jobset_pod("train", 0, gpus=8), ["n0"]),
                    client_cert=False)
    # TLS 1.3: the server's alert may arrive as the reset of a connection already written to
    assert "CERTIFICATE_REQUIRED" in str(err.value) or isinstance(err.value, ConnectionError)
    # Plain HTTP to the TLS port is no way round it either.
    with pytest.raises((ConnectionError, urllib.error.URLError, http.client.HTTPException)):
        _call(f"http://127.0.0.1:{served.verb_port}/inspect/gangs", None, None)


def test_a_gang_is_filtered_and_bound_by_the_client_holding_the_certificate(
        served: Served) -> None:
    nodes = ["n0", "n1"]
    sent: dict[int, str] = {}
    for i in range(2):
        status, data = served.verb("/filter", filter_body(jobset_pod("train", i, gpus=8), nodes))
        assert status == 200
        [sent[i]] = orjson.loads(data)["NodeNames"]
    assert sorted(sent.values()) == nodes  # one planned node each
    errors: dict[int, str] = {}

    def bind(i: int) -> None:
        _, data = served.verb("/bind", bind_body(jobset_pod("train", i, gpus=8), sent[i]))
        errors[i] = orjson.loads(data)["Error"]

    threads = [threading.Thread(target=bind, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert errors == {0: "", 1: ""}
    [gang] = orjson.loads(served.verb("/inspect/gangs")[1])["gangs"]
    assert (gang["state"], gang["bound"]) == ("bound", 2)
    # The probe port's /metrics is the same process's: it counted those binds.
    metrics = served.probe("/metrics")[1].decode()
    assert 'muster_request_seconds_count{verb="bind"} 2.0' in metrics
    assert "muster_gang_wait_seconds_count 1.0" in metrics


def test_live_verbs_off_loopback_without_tls_are_refused_at_start(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--host", "0.0.0.0", "--port", "8888"]) == 1
    err = capsys.readouterr().err
    assert "--host / MUSTER_HOST: '0.0.0.0' would serve /bind to anyone" in err
    assert "Traceback" not in err


def test_tls_without_a_client_ca_is_refused_naming_what_is_missing(
        capsys: pytest.CaptureFixture[str], certs: Path) -> None:
    code = main(["serve", "--host", "0.0.0.0", "--tls-cert", str(certs / "muster.crt"),
                 "--tls-key", str(certs / "muster.key")])
    err = capsys.readouterr().err
    assert code == 1
    assert "TLS needs --tls-cert, --tls-key and --tls-client-ca together (missing " \
           "--tls-client-ca)" in err


def test_a_key_that_does_not_match_the_certificate_fails_at_start_naming_both(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], certs: Path) -> None:
    snapshot = _snapshot(tmp_path / "cluster.yaml")
    code = main(["serve", "--snapshot", str(snapshot), "--tls-cert", str(certs / "muster.crt"),
                 "--tls-key", str(certs / "scheduler.key"),
                 "--tls-client-ca", str(certs / "ca.crt")])
    err = capsys.readouterr().err
    assert code == 1
    assert f"cannot use --tls-cert {certs / 'muster.crt'} with --tls-key " \
           f"{certs / 'scheduler.key'}: KEY_VALUES_MISMATCH" in err


def test_a_busy_probe_port_fails_at_start_naming_it(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    snapshot = _snapshot(tmp_path / "cluster.yaml")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code = main(["serve", "--snapshot", str(snapshot), "--port", str(free_port()),
                     "--probe-host", "127.0.0.1", "--probe-port", str(port)])
    err = capsys.readouterr().err
    assert code == 1
    assert f"cannot listen on the probe port 127.0.0.1:{port}: Address already in use" in err


def test_the_probe_port_must_differ_from_the_verb_port() -> None:
    with pytest.raises(SettingsError, match="the probe port must not serve the verbs"):
        build_settings({"port": 8888, "probe_port": 8888}, {})


def test_replaced_certificates_are_used_from_the_next_connection_without_a_restart(
        tmp_path: Path, certs: Path) -> None:
    """A rotated Secret (files replaced in place) takes effect for Muster without a restart:
    gunicorn builds its TLS context for each new connection."""
    live = tmp_path / "live"
    live.mkdir()
    for name in ("muster.crt", "muster.key", "ca.crt"):
        shutil.copy(certs / name, live / name)
    rotated = tmp_path / "rotated"
    subprocess.run(["sh", str(MAKE_CERTS), str(rotated), "IP:127.0.0.1"], check=True,
                   capture_output=True, timeout=60)
    snapshot = _snapshot(tmp_path / "cluster.yaml")
    port, probe = free_port(), free_port()
    args = ["--snapshot", str(snapshot), "--port", str(port), "--probe-host", "127.0.0.1",
            "--probe-port", str(probe), "--tls-cert", str(live / "muster.crt"),
            "--tls-key", str(live / "muster.key"), "--tls-client-ca", str(live / "ca.crt")]
    old, new = Served(port, probe, certs), Served(port, probe, rotated)
    with serving(args, {**os.environ, "MUSTER_LOG_LEVEL": "warning"},
                 lambda: old.probe("/readyz")[0] == 200):
        assert old.verb("/readyz")[0] == 200
        for name in ("muster.crt", "muster.key", "ca.crt"):
            shutil.copy(rotated / name, live / name)
        assert new.verb("/readyz")[0] == 200
        with pytest.raises((ssl.SSLError, ConnectionResetError, urllib.error.URLError)):
            old.verb("/readyz")  # the old CA no longer verifies Muster, nor Muster the old
