"""The admission webhook's own process: started by the worker on the webhook's socket, its
reviews counted in the worker's metrics, started again when it exits, gone with the worker."""

from __future__ import annotations

import os
import socket
import ssl
import threading
import time
from pathlib import Path

import orjson
import yaml

from extender.cli.webhook_process import WebhookProcess, _Report, settings_json, settings_of
from extender.sandbox.operators import make_certs
from extender.server.settings import Settings
from extender.server.surface import bind_probe_socket
from tests.unit.server.test_admission_webhook_gates_new_gang_pods import new_pod, review


def test_the_settings_reach_the_process_unchanged() -> None:
    settings = Settings(port=9000, descriptors=("a", "b"), scheduler_names=("muster", "x"),
                        switch_interval=0.0005, webhook_port=9443, webhook_cert="c",
                        webhook_key="k", plan_ttl=90.0)
    assert settings_of(settings_json(settings)) == settings


def test_a_report_never_blocks_the_review_even_when_the_worker_reads_none() -> None:
    read, write = os.pipe()
    try:
        report = _Report(write)
        started = time.monotonic()
        for _ in range(5000):  # far more than a pipe holds
            report.count("admission", "gated")
        assert time.monotonic() - started < 5
        assert os.read(read, 100).startswith(b"count admission gated\n")
    finally:
        os.close(read)
        os.close(write)


def unreachable_kubeconfig(tmp_path: Path) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1",
                                               "insecure-skip-tls-verify": True}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    return str(path)


def ask(port: int, context: ssl.SSLContext, body: bytes) -> dict[str, object]:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(b"POST /admission/gate HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(body), body))
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
    head, _, rest = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    decoded: dict[str, object] = orjson.loads(rest)
    return decoded


def answered(port: int, context: ssl.SSLContext, body: bytes, timeout: float = 90,
             ) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return ask(port, context, body)
        except (OSError, ssl.SSLError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_the_process_answers_on_the_workers_socket_reports_each_review_and_comes_back(
        tmp_path: Path) -> None:
    certs = make_certs(tmp_path)
    sock = bind_probe_socket("127.0.0.1", 0, what="the webhook port")
    port = sock.getsockname()[1]
    settings = Settings(kubeconfig=unreachable_kubeconfig(tmp_path), webhook_port=port,
                        webhook_cert=str(certs / "tls.crt"), webhook_key=str(certs / "tls.key"))
    counted: list[tuple[str, str]] = []
    observed: list[tuple[str, float]] = []
    seen = threading.Event()

    def count(verb: str, outcome: str) -> None:
        counted.append((verb, outcome))
        seen.set()

    process = WebhookProcess(settings, sock, count=count,
                             observe=lambda verb, s: observed.append((verb, s))).start()
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    try:
        # With the API server unreachable the pod's owner is unknown: it may be a member, and
        # is gated (Muster ungates it later if it is in no gang).
        answer = answered(port, context, review(new_pod("train", 0), uid="first"))
        response = answer["response"]
        assert isinstance(response, dict)
        assert response["uid"] == "first" and response["allowed"] is True
        assert seen.wait(30)
        # (A retry after a slow answer on a loaded machine counts twice, never otherwise.)
        assert set(counted) == {("admission", "gated")}
        assert {verb for verb, _ in observed} == {"admission"}
        # Killed, it is started again on the same socket, and answers again.
        first = process._proc
        assert first is not None
        first.kill()
        first.wait()
        answer = answered(port, context, review(new_pod("train", 1), uid="again"))
        assert isinstance(answer["response"], dict) and answer["response"]["uid"] == "again"
        assert process.starts == 2
    finally:
        process.stop()
    latest = process._proc
    assert latest is not None and latest.poll() is not None  # stopped with the worker


def test_a_process_that_cannot_be_started_is_tried_again(tmp_path: Path) -> None:
    certs = make_certs(tmp_path)
    sock = bind_probe_socket("127.0.0.1", 0, what="the webhook port")
    port = sock.getsockname()[1]
    settings = Settings(kubeconfig=unreachable_kubeconfig(tmp_path), webhook_port=port,
                        webhook_cert=str(certs / "tls.crt"), webhook_key=str(certs / "tls.key"))
    process = WebhookProcess(settings, sock, count=lambda *_: None, observe=lambda *_: None)
    argv = process._argv
    process._argv = [str(tmp_path / "no-such-python"), *argv[1:]]  # exec fails: OSError
    process.start()
    try:
        time.sleep(0.5)
        assert process.starts == 0 and process._thread.is_alive()
        process._argv = argv  # the cause is gone: the next try starts it
        context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        answer = answered(port, context, review(new_pod("train", 0), uid="late"))
        assert isinstance(answer["response"], dict) and answer["response"]["uid"] == "late"
        assert process.starts == 1
    finally:
        process.stop()
