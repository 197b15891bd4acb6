"""The admission webhook in a process of its own, next to ``muster serve``'s worker.

The API server waits for the webhook's answer before it creates a pod. In the worker, that
answer shared one interpreter lock with the informers, ungating, the writers and the verbs, and
on a busy machine a thread holding the lock is often not even running: in a burst of pods
created from 16 connections the webhook became what limited creation (docs/benchmarks.md).
Here it has a process, and a lock, to itself.

Whether a new pod may join a gang depends only on its owners and the descriptors, so this
process watches the descriptors and every workload and owner kind they name, never pods or
nodes, and answers each review with the same decision (:class:`Admission`). It reports each
review to the worker on its standard output, one line each (``count admission gated``,
``seconds admission 0.0004``), and the worker counts them in ``/metrics`` as before. The worker
starts it with the webhook's listening socket (bound before anything starts, so a busy port
fails ``muster serve`` at once), starts it again if it exits, and it exits when the worker is
gone.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import IO, Any

from flask import Flask

from extender.cli.errors import CliError
from extender.cli.serve import base_catalog, configure_logging
from extender.kube.client import KubeError
from extender.kube.live import start_owner_watches
from extender.server.admission import Admission, admission_bp
from extender.server.service import core_settings
from extender.server.settings import Settings
from extender.server.surface import CertFiles, serve_webhook
from extender.state.build import CatalogSnapshots
from extender.state.store import DESCRIPTORS, KARTAS, StateStore

log = logging.getLogger("muster.webhook")

RESTART_AFTER = (1.0, 30.0)
"""Seconds before the worker starts an exited webhook process again: the first, and the most
(doubling in between, back to the first after a minute of running)."""


def settings_json(settings: Settings) -> str:
    return json.dumps({f.name: getattr(settings, f.name) for f in fields(Settings)
                       if f.name != "extra"})


def settings_of(text: str) -> Settings:
    raw = json.loads(text)
    defaults = Settings()
    values: dict[str, Any] = {k: tuple(v) if isinstance(getattr(defaults, k), tuple) else v
                              for k, v in raw.items()}
    return Settings(**values)


class _Report:
    """Each review, told to the worker as a line on standard output. Never blocks: a worker
    that does not read (stuck, gone) loses counts, never delays a pod's creation."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        os.set_blocking(fd, False)
        self._lock = threading.Lock()
        self._lost = 0

    def _say(self, line: str) -> None:
        data = line.encode()  # well under PIPE_BUF: written whole or not at all
        with self._lock:
            try:
                os.write(self._fd, data)
            except (BlockingIOError, BrokenPipeError):
                self._lost += 1
                if self._lost == 1 or self._lost % 1000 == 0:
                    log.warning("event=webhook-report-lost lost=%d reason='the worker does "
                                "not read its reports'", self._lost)

    def count(self, verb: str, outcome: str) -> None:
        self._say(f"count {verb} {outcome}\n")

    # ``admission.gate`` observes ``metrics.latency.labels(verb=...).observe(seconds)``.
    @property
    def latency(self) -> _Report:
        return self

    def labels(self, *, verb: str) -> _Latency:
        return _Latency(self, verb)


class _Latency:
    def __init__(self, report: _Report, verb: str) -> None:
        self._report, self._verb = report, verb

    def observe(self, seconds: float) -> None:
        self._report._say(f"seconds {self._verb} {seconds:.6f}\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="muster-webhook", description=__doc__)
    parser.add_argument("settings", help="muster serve's settings, as JSON")
    parser.add_argument("fd", type=int, help="the webhook's listening socket")
    args = parser.parse_args(argv)
    settings = settings_of(args.settings)
    configure_logging(settings.log_level)
    sys.setswitchinterval(settings.switch_interval)
    sock = socket.socket(fileno=args.fd)
    assert settings.webhook_cert is not None and settings.webhook_key is not None
    try:
        catalog = base_catalog(settings)
        snapshots = CatalogSnapshots(catalog, settings.workload_limits)
        store = StateStore(snapshots, expected=[DESCRIPTORS, KARTAS])
        start_owner_watches(store, snapshots, kubeconfig=settings.kubeconfig,
                            context=settings.context)
    except (CliError, KubeError) as err:
        log.error("event=webhook-process-failed problem=%r", str(err))
        return 1
    report = _Report(sys.stdout.fileno())
    admission = Admission(store, catalog=snapshots.current, settings=settings,
                          gate=core_settings(settings).gate, count=report.count)
    app = Flask("muster-webhook")
    app.register_blueprint(admission_bp)
    app.extensions["muster.admission"] = admission
    app.extensions["muster.metrics"] = report
    serve_webhook(app, sock, CertFiles(settings.webhook_cert, settings.webhook_key))
    log.info("event=webhook-process-serving port=%d", sock.getsockname()[1])
    parent = os.getppid()
    try:
        while os.getppid() == parent:  # the worker is gone (even killed): so is its webhook
            time.sleep(1.0)
    except KeyboardInterrupt:  # Ctrl-C on `muster serve` reaches its whole process group
        pass
    return 0


class WebhookProcess:
    """The worker's side: start the webhook's process, read its reports, start it again when
    it exits, stop it when the worker exits."""

    def __init__(self, settings: Settings, sock: socket.socket, *,
                 count: Callable[[str, str], None],
                 observe: Callable[[str, float], None]) -> None:
        self._argv = [sys.executable, "-m", "extender.cli.webhook_process",
                      settings_json(settings), str(sock.fileno())]
        self._fd = sock.fileno()
        self._count, self._observe = count, observe
        self._stopping = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread = threading.Thread(target=self._run, name="webhook-process", daemon=True)
        self.starts = 0

    def start(self) -> WebhookProcess:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()

    def _run(self) -> None:
        delay = RESTART_AFTER[0]
        while not self._stopping.is_set():
            started = time.monotonic()
            try:
                self._proc = proc = subprocess.Popen(self._argv, pass_fds=(self._fd,),
                                                     stdout=subprocess.PIPE)
            except OSError as err:  # no process now (out of memory, pids): try again later
                log.error("event=webhook-process-failed problem=%r restart_in=%gs", str(err),
                          delay)
                if self._stopping.wait(delay):
                    return
                delay = min(delay * 2, RESTART_AFTER[1])
                continue
            self.starts += 1
            log.info("event=webhook-process-started pid=%d", proc.pid)
            assert proc.stdout is not None
            self._read(proc.stdout)
            code = proc.wait()
            if self._stopping.is_set():
                return
            if time.monotonic() - started > 60:  # it ran a while: not a crash loop
                delay = RESTART_AFTER[0]
            log.warning("event=webhook-process-exited code=%d restart_in=%gs", code, delay)
            if self._stopping.wait(delay):
                return
            delay = min(delay * 2, RESTART_AFTER[1])

    def _read(self, out: IO[bytes]) -> None:
        for raw in out:
            parts = raw.decode(errors="replace").split()
            try:
                if len(parts) == 3 and parts[0] == "count":
                    self._count(parts[1], parts[2])
                elif len(parts) == 3 and parts[0] == "seconds":
                    self._observe(parts[1], float(parts[2]))
            except (ValueError, KeyError):
                log.warning("event=webhook-report-unreadable line=%r", raw[:200])


def spawn(settings: Settings, sock: socket.socket, metrics: Any) -> WebhookProcess:
    """Start the webhook's process for the worker's app, counting into its ``metrics``."""
    import atexit  # noqa: PLC0415

    process = WebhookProcess(
        settings, sock, count=metrics.count,
        observe=lambda verb, seconds: metrics.latency.labels(verb=verb).observe(seconds))
    atexit.register(process.stop)
    return process.start()


if __name__ == "__main__":
    sys.exit(main())
