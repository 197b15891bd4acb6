"""Serve a WSGI app with gunicorn (embedded through ``BaseApplication``) or granian
(:mod:`extender.server.granian_serving`), the app built in the one worker process.

One worker (the cluster state and the gang ledger live in its memory) answering on threads:
bind requests wait at the gang barrier on a condition variable, each holding one thread, while
filter calls keep being answered on the others. gunicorn's worker is ``gthread``.

gunicorn is the default: it builds its TLS context for each new connection, so a rotated
certificate (a Secret cert-manager renews) is used without a restart; granian reads its
certificate once, at start. granian spends less CPU per request (``docs/benchmarks.md``).
"""

from __future__ import annotations

import gc
import os
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gunicorn.app.base import BaseApplication

from extender.server.surface import (
    CertFiles,
    bind_probe_socket,
    serve_probes,
    serve_webhook,
    tls_options,
)

WSGIApp = Callable[..., Any]

GC_THRESHOLDS = (10_000, 20, 20)
"""The worker's ``gc.set_threshold``: Python's default (700, 10, 10) runs the youngest
generation's collection every 700 net allocations of containers, and a full collection, a walk
over every object the worker keeps (its whole cluster snapshot), every 100 of those. Muster
allocates a burst of short-lived dicts for every watch event and request, almost none of them
in cycles: at the defaults a burst of 838 pods took 0.33 CPU-s of collection in the worker
(2 full collections, 0.21 s of it), and 0.05 CPU-s at these; see docs/benchmarks.md."""


def tune_gc() -> None:
    """In the worker, once its app is built: move what start-up made (modules, descriptors,
    the first lists) out of the collector's reach with ``gc.freeze``, and collect less
    often (:data:`GC_THRESHOLDS`)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


class EmbeddedGunicorn(BaseApplication):  # type: ignore[misc]
    """gunicorn with our app; the worker's start runs inside the worker process, after the
    fork.

    Threads do not survive ``fork``: informers and event writers must start in the process
    that serves, so the app (and everything it starts) is built there, never preloaded.
    """

    def __init__(self, factory: Callable[[], WSGIApp], options: Mapping[str, Any], *,
                 probe: socket.socket | None = None, verb_port: int = 0,
                 webhook: tuple[socket.socket, CertFiles] | None = None,
                 switch_interval: float | None = None,
                 webhook_process: Callable[[WSGIApp, socket.socket], object] | None = None,
                 ) -> None:
        self._worker = WorkerStart(factory, probe=probe, verb_port=verb_port, webhook=webhook,
                                   switch_interval=switch_interval,
                                   webhook_process=webhook_process)
        self._options = dict(options)
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._options.items():
            if key in self.cfg.settings and value is not None:
                self.cfg.set(key, value)

    def load(self) -> WSGIApp:
        return self._worker.load()


@dataclass(frozen=True)
class WorkerStart:
    """What the worker does once forked, whichever server runs it: the app built there (its
    threads, informers and writers with it), the side ports served from its state."""

    factory: Callable[[], WSGIApp]
    probe: socket.socket | None = None
    verb_port: int = 0
    webhook: tuple[socket.socket, CertFiles] | None = None
    switch_interval: float | None = None
    webhook_process: Callable[[WSGIApp, socket.socket], object] | None = None

    def load(self) -> WSGIApp:
        if self.switch_interval is not None:  # in the worker, before any of its threads
            sys.setswitchinterval(self.switch_interval)
        app = self.factory()
        if self.probe is not None:  # in the worker: the probes must see its state
            serve_probes(app, self.probe, verb_port=self.verb_port)
        if self.webhook is not None and self.webhook_process is not None:
            self.webhook_process(app, self.webhook[0])  # its own process, on this socket
        elif self.webhook is not None:
            serve_webhook(app, *self.webhook)
        tune_gc()
        return app


def gunicorn_options(*, host: str, port: int, threads: int, log_level: str) -> dict[str, Any]:
    return {
        "bind": f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
        "workers": 1,  # state is in memory: never more than one process
        "worker_class": "gthread",
        "threads": threads,
        "timeout": 60,
        "graceful_timeout": 10,
        "keepalive": 75,  # kube-scheduler reuses connections (Go keep-alive)
        "loglevel": log_level,
        "accesslog": None,
        "preload_app": False,
        # The worker's heartbeat file: in memory where possible, so a read-only root
        # filesystem (or a slow disk) never stalls or kills the worker.
        "worker_tmp_dir": "/dev/shm" if os.path.isdir("/dev/shm") else None,
        # gunicorn >= 25.1 opens a control socket (for gunicornc) at one fixed path,
        # $XDG_RUNTIME_DIR/gunicorn.ctl or ~/.gunicorn/gunicorn.ctl: a second `muster serve`
        # unlinks the first one's socket and takes it over, the first to stop deletes the
        # other's, and a read-only root filesystem (the Deployment's) makes it fail with an
        # error line at every start. Muster is managed by signals and its HTTP endpoints, never
        # gunicornc, so no control socket is opened at all.
        "control_socket_disable": True,
    }


SERVERS = ("gunicorn", "granian")
"""The HTTP servers ``muster serve`` runs the app on; the first is the default."""


def serve(factory: Callable[[], WSGIApp], *, host: str, port: int, threads: int,
          log_level: str, tls: tuple[str, str, str] | None = None,
          probe: tuple[str, int] | None = None,
          webhook: tuple[str, int, CertFiles] | None = None,
          switch_interval: float | None = None,
          webhook_process: Callable[[WSGIApp, socket.socket], object] | None = None,
          server: str = SERVERS[0]) -> None:
    """Run until SIGTERM/SIGINT; blocks. ``tls`` (certificate, key, client CA) puts the verb
    port on TLS that requires client certificates; ``probe`` (host, port) adds the probe
    port; ``webhook`` (host, port, certificate files) the admission webhook's TLS port;
    ``switch_interval`` the worker's ``sys.setswitchinterval`` (Python's default if None);
    ``webhook_process``, given the worker's app and the webhook's bound socket, serves the
    webhook from another process (else a thread of the worker serves it); ``server`` one of
    :data:`SERVERS`.
    Raises :class:`~extender.server.surface.SurfaceError` before serving when a side port
    cannot be bound or the webhook's certificate cannot be used."""
    sock = bind_probe_socket(*probe) if probe is not None else None
    hook = None
    if webhook is not None:
        host_, port_, certs = webhook
        certs.context()  # a certificate that cannot be used fails here, not at the first pod
        hook = (bind_probe_socket(host_, port_, what="the webhook port"), certs)
    worker = WorkerStart(factory, probe=sock, verb_port=port, webhook=hook,
                         switch_interval=switch_interval, webhook_process=webhook_process)
    if server == "granian":
        from extender.server.granian_serving import serve_granian  # noqa: PLC0415

        serve_granian(worker.load, bind=(host, port), threads=threads, log_level=log_level,
                      tls=tls)
        return
    options = gunicorn_options(host=host, port=port, threads=threads, log_level=log_level)
    if tls is not None:
        options.update(tls_options(*tls))
    EmbeddedGunicorn(factory, options, probe=sock, verb_port=port, webhook=hook,
                     switch_interval=switch_interval, webhook_process=webhook_process).run()
