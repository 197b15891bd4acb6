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
import errno
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path


def ready(probe_port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{probe_port}/readyz",
                                    timeout=0.5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


_TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1",
               "05": "FIN_WAIT2", "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT",
               "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING"}


def sockets_on(port: int) -> list[str]:
    """The kernel's TCP sockets whose local port is ``port`` (state, remote), for a message."""
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, state = fields[1], fields[2], fields[3]
            if int(local.split(":")[1], 16) == port:
                found.append(f"{_TCP_STATES.get(state, state)} to port "
                             f"{int(remote.split(':')[1], 16)} (inode {fields[9]})")
    return found


def listen(port: int, *, timeout: float = 15.0) -> socket.socket:
    """Listen on the loopback ``port`` the sandbox's Muster has just left, waiting up to
    ``timeout`` for it to be free; the error names every socket still on it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.create_server(("127.0.0.1", port), reuse_port=False)
        except OSError as err:
            if err.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                raise OSError(err.errno, f"{err.strerror}: 127.0.0.1:{port}, which holds "
                                         f"{sockets_on(port) or 'no TCP socket'}") from err
            time.sleep(0.2)


class ReadinessForwarder:
    def __init__(self, listen_port: int, backends: Sequence[tuple[int, int]]) -> None:
        """``backends``: (verb port, probe port) of each replica."""
        self.backends = list(backends)
        self.chosen: list[int] = []
        """The verb port each accepted connection went to (0: refused, none ready)."""
        self._ready: int | None = None
        self._stop = threading.Event()
        self._server = listen(listen_port)
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
