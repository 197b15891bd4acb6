"""Killing a sandbox component (a crash, for tests) returns only once nothing of its process
group runs: a child that holds the listening socket (a gunicorn worker) would otherwise keep
the port for a moment, and the next process on it fails to bind (seen in CI: the failover
test's forwarder, right after the sandbox's Muster was killed)."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

from extender.sandbox.processes import ProcessTable, _group_running

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


# A process whose main thread has ended (a zombie in /proc/PID/stat) while another thread
# still runs and holds the listening socket: the state a multi-threaded worker passes
# through while the kernel tears its threads down after SIGKILL.
HALF_GONE = """
import ctypes, socket, sys, threading, time
s = socket.create_server(("127.0.0.1", int(sys.argv[1])))
threading.Thread(target=time.sleep, args=(60,)).start()
ctypes.CDLL(None).pthread_exit(None)
"""


def test_a_process_whose_main_thread_ended_still_runs_while_another_thread_does(
        tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    table = ProcessTable(tmp_path)
    proc = table.start("half", [sys.executable, "-c", HALF_GONE, str(port)])
    stat = Path(f"/proc/{proc.pid}/stat")
    for _ in range(200):  # until its main thread has ended
        if stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the main thread never ended")
    assert _group_running(proc.pid)  # its other thread runs, and holds the port
    table.kill("half")
    assert not _group_running(proc.pid)
    with socket.create_server(("127.0.0.1", port)):  # would raise EADDRINUSE
        pass
