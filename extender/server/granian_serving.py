"""Serve a WSGI app with granian (a Rust HTTP server), embedded through its ``MPServer``.

One worker process, forked from the one that starts it (the cluster state and the gang ledger
live in its memory), whose WSGI calls run on a pool of ``threads`` blocking threads: bind
requests wait at the gang barrier, each holding one, while filter calls keep being answered on
the others. HTTP/1.1 with keep-alive, as kube-scheduler's Go client speaks to an extender; on
TLS the server itself refuses a client without a certificate chaining to the client CA.
"""

from __future__ import annotations

import atexit
from collections.abc import Callable
from pathlib import Path
from typing import Any

from granian.constants import HTTPModes, Interfaces, SSLProtocols
from granian.log import LogLevels
from granian.server.mp import MPServer

WSGIApp = Callable[..., Any]

LOG_CONFIG: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"kv": {"format": "ts=%(asctime)s level=%(levelname)s logger=granian "
                                    "%(message)s"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "kv",
                            "stream": "ext://sys.stderr"}},
    "loggers": {"_granian": {"handlers": ["stderr"], "propagate": False},
                "granian.access": {"handlers": [], "propagate": False}},
}
"""granian's own lines on stderr in the form of Muster's; no access log."""

DRAIN_SECONDS = 10
"""How long a stopping worker may finish the requests in flight before it is killed."""


def _in_worker(serve_worker: Callable[..., None]) -> Callable[..., None]:
    """granian's worker entry, followed by the exit functions a forked child skips (it leaves
    through ``os._exit``): the elector gives its lease up there."""

    def run(*args: Any, **kwargs: Any) -> None:
        try:
            serve_worker(*args, **kwargs)
        finally:
            atexit._run_exitfuncs()

    return run


def serve_granian(load: Callable[[], WSGIApp], *, bind: tuple[str, int], threads: int,
                  log_level: str, tls: tuple[str, str, str] | None = None) -> None:
    """Run until SIGTERM/SIGINT; blocks. ``load`` builds the app inside the worker (after the
    fork: threads started before it would not survive); ``bind`` is (host, port), ``tls``
    (certificate, key, client CA)."""
    ssl: dict[str, Any] = {}
    if tls is not None:
        cert, key, client_ca = tls
        ssl = {"ssl_cert": Path(cert), "ssl_key": Path(key), "ssl_ca": Path(client_ca),
               "ssl_client_verify": True, "ssl_protocol_min": SSLProtocols.tls12}
    server = MPServer(
        "muster", address=bind[0], port=bind[1], interface=Interfaces.WSGI, workers=1,
        blocking_threads=threads, http=HTTPModes.http1, websockets=False,
        log_level=LogLevels(log_level.lower()), log_dictconfig=LOG_CONFIG,
        workers_kill_timeout=DRAIN_SECONDS, **ssl)
    server.serve(spawn_target=_in_worker(MPServer._spawn_wsgi_worker),
                 target_loader=load, wrap_loader=False)

