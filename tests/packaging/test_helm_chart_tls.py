"""tls.mode=generate: the chart's certificates carry the mutual TLS between kube-scheduler and
Muster as make-certs.sh's do. Checked by a real handshake over loopback with the rendered files,
each side configured as the Deployment configures it (Muster requires a client certificate
signed by ca.crt; kube-scheduler verifies Muster's name against the CA)."""

from __future__ import annotations

import base64
import socket
import ssl
import threading
from pathlib import Path
from typing import cast

import pytest

from tests.packaging.helmchart import NAMESPACE, Objects, Tools, pod_annotations

SERVICE_NAME = f"muster.{NAMESPACE}.svc"  # the host of the extender's urlPrefix


@pytest.fixture(scope="module")
def generated(tools: Tools) -> Objects:
    return tools.template("--set", "tls.mode=generate")


def secret_files(rendered: Objects, name: str, into: Path) -> dict[str, Path]:
    secret = rendered[("Secret", NAMESPACE, name)]
    assert secret["type"] == "kubernetes.io/tls"
    files = {}
    for key, value in secret["data"].items():
        path = into / f"{name}-{key}"
        path.write_bytes(base64.b64decode(value))
        files[key] = path
    return files


def handshake(server: dict[str, Path], client: dict[str, Path] | None, ca: Path,
              hostname: str = SERVICE_NAME) -> tuple[str, str]:
    """One TLS handshake on loopback: what the server saw (the client's subject CN, or
    "refused: ...") and the client's error ("" when it completed)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(server["tls.crt"], server["tls.key"])
    server_ctx.load_verify_locations(server["ca.crt"])
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    seen: list[str] = []

    def serve() -> None:
        conn, _ = listener.accept()
        try:
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                peer = tls.getpeercert() or {}
                subject = cast("tuple[tuple[tuple[str, str], ...], ...]", peer.get("subject", ()))
                names = [pair for rdn in subject for pair in rdn]
                seen.append(next(str(v) for k, v in names if k == "commonName"))
                tls.sendall(b"ok")
        except (ssl.SSLError, OSError) as err:
            seen.append(f"refused: {err}")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client_ctx = ssl.create_default_context(cafile=str(ca))
    if client is not None:
        client_ctx.load_cert_chain(client["tls.crt"], client["tls.key"])
    client_error = ""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                client_ctx.wrap_socket(raw, server_hostname=hostname) as tls:
            if tls.recv(2) != b"ok":
                client_error = "closed by the server"
    except (ssl.SSLError, OSError) as err:
        client_error = str(err)
    thread.join(timeout=10)
    listener.close()
    return seen[0], client_error


def test_generated_certificates_let_kube_scheduler_and_only_it_reach_muster(
        generated: Objects, tmp_path: Path) -> None:
    muster = secret_files(generated, "muster-extender-tls", tmp_path)
    scheduler = secret_files(generated, "muster-scheduler-tls", tmp_path)
    assert muster["ca.crt"].read_bytes() == scheduler["ca.crt"].read_bytes()
    assert handshake(muster, scheduler, scheduler["ca.crt"]) == ("muster-kube-scheduler", "")
    server_saw, client_error = handshake(muster, None, scheduler["ca.crt"])
    assert server_saw.startswith("refused") and "certificate" in server_saw.lower()
    assert client_error


@pytest.mark.parametrize("name", [
    "muster", f"muster.{NAMESPACE}", SERVICE_NAME, f"{SERVICE_NAME}.cluster.local"])
def test_musters_generated_certificate_names_every_dns_name_of_its_service(
        generated: Objects, tmp_path: Path, name: str) -> None:
    muster = secret_files(generated, "muster-extender-tls", tmp_path)
    scheduler = secret_files(generated, "muster-scheduler-tls", tmp_path)
    assert handshake(muster, scheduler, scheduler["ca.crt"], hostname=name) \
        == ("muster-kube-scheduler", "")


def test_a_name_outside_the_service_is_not_in_musters_certificate(
        generated: Objects, tmp_path: Path) -> None:
    muster = secret_files(generated, "muster-extender-tls", tmp_path)
    scheduler = secret_files(generated, "muster-scheduler-tls", tmp_path)
    _, client_error = handshake(muster, scheduler, scheduler["ca.crt"],
                               hostname="muster.other.svc")
    assert "hostname mismatch" in client_error.lower(), client_error


def test_generated_secrets_roll_both_deployments_and_existing_ones_render_no_secret(
        tools: Tools, generated: Objects) -> None:
    for name in ("muster", "muster-scheduler"):
        assert "checksum/tls" in pod_annotations(generated, name)
    assert not [key for key in tools.template() if key[0] == "Secret"]
