"""Start and stop the sandbox's processes; every PID is written down so ``down`` finds it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

STATE_FILE = "processes.json"


@dataclass(frozen=True)
class Proc:
    name: str
    pid: int
    log: str
    argv: tuple[str, ...] = ()
    """How it was started, so it can be started again the same way."""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours counts as gone.
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return True


class ProcessTable:
    """The processes of one sandbox, persisted in ``<dir>/processes.json``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / STATE_FILE

    def load(self) -> list[Proc]:
        if not self.path.exists():
            return []
        return [Proc(**{**p, "argv": tuple(p.get("argv", ()))})
                for p in json.loads(self.path.read_text())]

    def _save(self, procs: Sequence[Proc]) -> None:
        self.path.write_text(json.dumps([{**p.__dict__, "argv": list(p.argv)} for p in procs],
                                        indent=2))

    def start(self, name: str, argv: Sequence[str], *, env: dict[str, str] | None = None) -> Proc:
        log = self.directory / f"{name}.log"
        with open(log, "ab") as out:
            child = subprocess.Popen(  # argv is built by us, never through a shell
                list(argv), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})}, start_new_session=True,
            )
        proc = Proc(name=name, pid=child.pid, log=str(log), argv=tuple(argv))
        self._save([*self.load(), proc])
        return proc

    def killed_argv(self, name: str) -> tuple[str, ...]:
        """Kill ``name`` (see :meth:`kill`) and return how to start it again."""
        argv = next((p.argv for p in self.load() if p.name == name), ())
        if not argv:
            raise KeyError(f"no running process called {name!r}")
        self.kill(name)
        return argv

    def kill(self, name: str) -> None:
        """SIGKILL the process called ``name`` and forget it."""
        keep = []
        for proc in self.load():
            if proc.name == name:
                _signal_group(proc.pid, signal.SIGKILL)
                deadline = time.monotonic() + 10
                # The whole group: a gunicorn worker outliving its master for a moment still
                # holds the listening port (the next process on it would fail to bind).
                while (alive(proc.pid) or _group_running(proc.pid)) and \
                        time.monotonic() < deadline:
                    time.sleep(0.05)
            else:
                keep.append(proc)
        self._save(keep)

    def stop_all(self, *, grace: float = 10.0) -> list[Proc]:
        """SIGTERM in reverse start order, SIGKILL after ``grace``; returns what was stopped."""
        procs = self.load()
        for proc in reversed(procs):
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in reversed(procs):
            while alive(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if alive(proc.pid):
                _signal_group(proc.pid, signal.SIGKILL)
        for proc in procs:
            while alive(proc.pid) and time.monotonic() < deadline + 5:
                time.sleep(0.05)
        if self.path.exists():
            self.path.unlink()
        return procs


def _stat(path: Path) -> list[str]:
    # pid (comm) state ppid pgrp ...: comm may hold spaces, so split after its ')'
    return path.read_text().rsplit(")", 1)[1].split()


def _group_running(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies waiting to be reaped do not
    count); read from /proc, so False where there is none. A process whose main thread is a
    zombie still runs while any other of its threads does: they share its open files (a
    gunicorn worker's threads, the listening socket among them), closed only when the last
    thread is gone."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = _stat(stat)
            if int(fields[2]) != pgid:
                continue
            if fields[0] not in ("Z", "X"):
                return True
            for task in (stat.parent / "task").glob("[0-9]*/stat"):
                with contextlib.suppress(OSError, ValueError, IndexError):
                    if _stat(task)[0] not in ("Z", "X"):
                        return True
    return False


def _signal_group(pid: int, sig: signal.Signals) -> None:
    # Each child leads its own session, so the group holds anything it spawned (gunicorn workers).
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
