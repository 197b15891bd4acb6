"""``muster describe --muster-url https://...`` reaches Muster's ``/inspect/gangs`` on its
mutual-TLS port with ``--certificate-authority``, ``--client-certificate`` and
``--client-key`` (certificates made by ``manifests/tls/make-certs.sh``, as the install makes
them); without them the answer is a warning naming why, never a traceback."""

from __future__ import annotations

import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import orjson
import pytest
import yaml

from extender.cli.errors import CliError
from extender.cli.gangstate import muster_tls, read_inspect
from tests.unit.cli.helpers import DATA, REPO, muster
from tests.unit.kube.fakeapi import fake_api

MAKE_CERTS = REPO / "manifests" / "tls" / "make-certs.sh"
INSPECTED = {"gangs": [{"gang": "ml/story", "state": "planned", "lastReason": "planned on n1",
                        "heldBy": []}]}


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs")
    subprocess.run(["sh", str(MAKE_CERTS), str(out), "IP:127.0.0.1"], check=True,
                   capture_output=True, timeout=60)
    return out


@pytest.fixture(scope="module")
def muster_tls_url(certs: Path) -> Iterator[str]:
    """An ``/inspect/gangs`` that asks every client for a certificate its CA signed."""
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            body = orjson.dumps(INSPECTED)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(certs / "muster.crt"), str(certs / "muster.key"))
    context.load_verify_locations(str(certs / "ca.crt"))
    context.verify_mode = ssl.CERT_REQUIRED
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_the_ca_and_a_client_certificate_reach_musters_mutual_tls_port(
        muster_tls_url: str, certs: Path) -> None:
    tls = muster_tls(ca=str(certs / "ca.crt"), cert=str(certs / "scheduler.crt"),
                     key=str(certs / "scheduler.key"))
    assert read_inspect(muster_tls_url, tls=tls) == (INSPECTED["gangs"], "")


def test_without_the_ca_or_the_client_certificate_a_warning_says_why(
        muster_tls_url: str, certs: Path) -> None:
    gangs, why = read_inspect(muster_tls_url)
    assert gangs is None and "CERTIFICATE_VERIFY_FAILED" in why
    gangs, why = read_inspect(muster_tls_url, tls=muster_tls(ca=str(certs / "ca.crt"),
                                                             cert=None, key=None))
    assert gangs is None and why.startswith(f"Muster at {muster_tls_url} did not answer")


def test_a_client_certificate_needs_its_key_and_files_must_load(certs: Path) -> None:
    with pytest.raises(CliError, match="--client-certificate and --client-key together"):
        muster_tls(ca=None, cert=str(certs / "scheduler.crt"), key=None)
    with pytest.raises(CliError, match="cannot load the TLS files for --muster-url"):
        muster_tls(ca=str(certs / "missing.crt"), cert=None, key=None)
    assert muster_tls(ca=None, cert=None, key=None) is None


def test_describe_takes_the_tls_flags_for_its_muster_url(capsys, tmp_path: Path,
                                                         muster_tls_url: str,
                                                         certs: Path) -> None:
    with fake_api() as api:
        api.cluster.extra_groups["jobset.x-k8s.io/v1alpha2"] = [
            {"name": "jobsets", "kind": "JobSet", "namespaced": True}]
        api.cluster.put("/apis/jobset.x-k8s.io/v1alpha2/jobsets",
                        yaml.safe_load((DATA / "story-jobset.yaml").read_text()))
        ran = muster(capsys, "describe", "jobsets", "-A", "-o", "json",
                     "--kubeconfig", api.kubeconfig(tmp_path), "--muster-url", muster_tls_url,
                     "--certificate-authority", certs / "ca.crt",
                     "--client-certificate", certs / "scheduler.crt",
                     "--client-key", certs / "scheduler.key")
    assert ran.code == 0, ran.err
    [gang] = ran.json()["gangs"]
    assert (gang["state"], gang["source"], gang["reason"]) == ("Planned", "muster",
                                                               "planned on n1")
