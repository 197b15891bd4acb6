"""A stand-in for a Service and its endpoints' readiness routing, on loopback.

In a cluster kube-scheduler reaches Muster through a Service whose endpoints are only the
pods whose readiness probe passes, so new connections go to the leader (a standby answers
``/readyz`` 503). Here a small TCP forwarder does the same: each new connection goes to the
backend whose probe port answers ``/readyz`` 200 at that moment (checked every 100 ms, as
endpoints follow probes, only faster), and is refused when none does. An established
connection stays with its backend, as conntrack keeps it, until either side closes it; a
backend killed with SIGKILL resets it and kube-scheduler dials again.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Sequence


def ready(probe_port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{probe_port}/readyz",
                                    timeout=0.5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


class ReadinessForwarder:
    def __init__(self, listen_port: int, backends: Sequence[tuple[int, int]]) -> None:
        """``backends``: (verb port, probe port) of each replica."""
        self.backends = list(backends)
        self.chosen: list[int] = []
        """The verb port each accepted connection went to (0: refused, none ready)."""
        self._ready: int | None = None
        self._stop = threading.Event()
        self._server = socket.create_server(("127.0.0.1", listen_port), reuse_port=False)
        self._server.settimeout(0.2)
        self._threads = [threading.Thread(target=self._probe, daemon=True),
                         threading.Thread(target=self._accept, daemon=True)]

    def __enter__(self) -> ReadinessForwarder:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(2)
        self._server.close()

    def _probe(self) -> None:
        while not self._stop.wait(0.1):
            self._ready = next((verb for verb, probe in self.backends if ready(probe)), None)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            target = self._ready
            self.chosen.append(target or 0)
            if target is None:
                client.close()  # no ready endpoint: the connection is refused
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", target), timeout=2)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()
