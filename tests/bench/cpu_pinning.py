"""``--own-core``: the burst bench with Muster on a core of its own, as on a real cluster.

On this machine Muster's extender shares two cores with the API server, etcd, kube-scheduler,
kwok and the bench's own pod creators, so every CPU second it spends slows pod creation in
its mode and in no other. On a cluster it runs as a Deployment with its own CPU. Pinning
gives every mode the same CPUs for everything else (the bench and the control plane share
the first core) and gives Muster's processes (its server, workers and webhook) the others,
which stay idle in the modes without Muster. The ratios then say what Muster's protocol and
its extra API traffic cost, apart from its CPU; the shared-core run says what a machine this
small costs on top.

Linux only: each thread is pinned with ``sched_setaffinity`` (threads started later inherit
their creator's CPUs), and a sandbox process is found by its session (each is started in a
session of its own, so a process's children share its session id).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

MUSTER = frozenset({"muster"})
"""Sandbox process names that are Muster's (each with everything in its session)."""


def split(cpus: Iterable[int]) -> tuple[set[int], set[int]]:
    """(the CPUs for everything else, Muster's): the lowest CPU, and the rest."""
    ordered = sorted(cpus)
    if len(ordered) < 2:
        raise ValueError(f"--own-core needs two CPUs or more; this process may use {ordered}")
    return {ordered[0]}, set(ordered[1:])


def _stat(pid: int, proc: Path) -> list[str] | None:
    """``/proc/PID/stat`` from field 3 on (index 0 is field 3), or ``None`` if it is gone."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces and parentheses.
    return stat[stat.rindex(")") + 2:].split()


def session_of(pid: int, proc: Path = Path("/proc")) -> int | None:
    """A process's session id (``/proc/PID/stat`` field 6), or ``None`` if it is gone."""
    fields = _stat(pid, proc)
    return None if fields is None else int(fields[3])


def members(sessions: Mapping[int, str], proc: Path = Path("/proc")) -> dict[int, str]:
    """Every live process in one of ``sessions`` (session id -> name) -> that name."""
    found = {}
    for entry in proc.iterdir():
        if entry.name.isdigit():
            sid = session_of(int(entry.name), proc)
            if sid is not None and sid in sessions:
                found[int(entry.name)] = sessions[sid]
    return found


def pin_threads(pid: int, cpus: set[int], proc: Path = Path("/proc")) -> int:
    """Pin every thread of ``pid``; returns how many were pinned (threads that ended
    meanwhile are skipped)."""
    pinned = 0
    try:
        tids = [int(t.name) for t in (proc / str(pid) / "task").iterdir()]
    except OSError:
        return 0
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
            pinned += 1
        except OSError:
            continue
    return pinned


def pin_sandbox(running: Mapping[str, int], *, rest: set[int], muster: set[int]) -> str:
    """Pin this process and the sandbox's (``name -> pid``, each its session's leader):
    Muster's to ``muster``, the rest to ``rest``. Returns what was pinned, for the report."""
    counts = {"bench": pin_threads(os.getpid(), rest)}
    for pid, name in sorted(members({p: n for n, p in running.items()}).items()):
        cpus = muster if name in MUSTER else rest
        counts[name] = counts.get(name, 0) + pin_threads(pid, cpus)
    shown = ", ".join(f"{n} {c}" for n, c in sorted(counts.items()))
    return (f"threads pinned: Muster's to CPU {sorted(muster)}, the rest to CPU "
            f"{sorted(rest)} ({shown})")


def cpu_of(pid: int, proc: Path = Path("/proc")) -> float | None:
    """CPU seconds a live process has used, its threads included (``utime`` + ``stime``,
    fields 14 and 15 of ``/proc/PID/stat``); ``None`` if it is gone."""
    fields = _stat(pid, proc)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_by_name(running: Mapping[str, int], proc: Path = Path("/proc")) -> dict[str, float]:
    """CPU seconds used so far by each sandbox process (``name -> pid``, each its session's
    leader) with everything in its session, and by this process as ``bench``. A process
    that ended is not counted: take two readings and subtract (:func:`cpu_spent`)."""
    used = {"bench": cpu_of(os.getpid(), proc) or 0.0}
    for pid, name in members({p: n for n, p in running.items()}, proc).items():
        used[name] = used.get(name, 0.0) + (cpu_of(pid, proc) or 0.0)
    return used


def cpu_spent(before: Mapping[str, float], after: Mapping[str, float]) -> str:
    """``"kube-apiserver 9.1, muster 4.2, ... (total 21.0 CPU-s)"``, most first."""
    spent = {n: max(0.0, after[n] - before.get(n, 0.0)) for n in after}
    shown = ", ".join(f"{n} {s:.1f}" for n, s in sorted(spent.items(), key=lambda i: -i[1]))
    return f"{shown} (total {sum(spent.values()):.1f} CPU-s)"
