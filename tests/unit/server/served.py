"""``muster serve`` as a real process for tests: started, waited for, stopped with SIGTERM."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(args: Sequence[str], env: Mapping[str, str],
            ready: Callable[[], bool]) -> Iterator[subprocess.Popen[bytes]]:
    """``muster serve ARGS`` until the block ends; waits (30 s at most) until ``ready()``, an
    OSError from it counting as not yet."""
    proc = subprocess.Popen([sys.executable, "-m", "extender.cli.main", "serve", *args],
                            cwd=ROOT, env=dict(env), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if ready():
                    break
            except OSError:
                time.sleep(0.1)
        else:
            proc.kill()
            raise AssertionError(proc.communicate(timeout=10)[0].decode())
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
