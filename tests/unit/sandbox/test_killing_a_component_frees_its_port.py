"""Killing a sandbox component (a crash, for tests) returns only once nothing of its process
group runs: a child that holds the listening socket (a gunicorn worker) would otherwise keep
the port for a moment, and the next process on it fails to bind (seen in CI: the failover
test's forwarder, right after the sandbox's Muster was killed)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from extender.sandbox.processes import ProcessTable

# A parent that hands its listening socket to a child, as gunicorn's master does its workers.
# The child holds a lot of memory, as a worker with its informers does: killed, it takes the
# kernel a while to tear down, and the socket is closed only at the end of that.
SERVER = """
import os, socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))  # listening only once the child holds its memory
if os.fork() == 0:
    held = bytearray(3 << 30)  # 3 GiB, every page touched
    s.listen()
    time.sleep(60)
time.sleep(60)
"""


def test_after_kill_the_port_its_children_held_can_be_bound_at_once(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    table = ProcessTable(tmp_path)
    table.start("server", [sys.executable, "-c", SERVER, str(port)])
    for _ in range(200):  # until the child holds its memory and listens
        with socket.socket() as c:
            if c.connect_ex(("127.0.0.1", port)) == 0:
                break
        __import__("time").sleep(0.05)
    table.kill("server")
    with socket.create_server(("127.0.0.1", port)):  # would raise EADDRINUSE
        pass
    assert table.load() == []
