"""The sandbox's readiness probe answers "not ready" while the API server is still writing the
certificate it serves (the file exists, empty or half-written), instead of raising out of the
wait: seen once in CI as `NO_CERTIFICATE_OR_CRL_FOUND` from a sandbox start."""

from __future__ import annotations

import socket
from pathlib import Path

from extender.sandbox.local import http_ok


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_certificate_file_not_written_yet_is_not_ready_rather_than_an_error(
        tmp_path: Path) -> None:
    url = f"https://127.0.0.1:{_closed_port()}/readyz"
    empty = tmp_path / "apiserver.crt"
    empty.write_bytes(b"")
    assert http_ok(url, cafile=empty) is False
    half = tmp_path / "half.crt"
    half.write_text("-----BEGIN CERTIFICATE-----\nMIIC")
    assert http_ok(url, cafile=half) is False
