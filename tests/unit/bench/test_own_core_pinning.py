"""``--own-core``: every thread of Muster's processes (children included) goes to Muster's
CPUs, every thread of the rest and of the bench itself to the first CPU; a process is found by
its session, whatever its command name holds."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.bench import cpu_pinning

TWO_CPUS = len(os.sched_getaffinity(0)) >= 2

# A session leader with a thread and a child of its own, as gunicorn's master and worker are.
FAMILY = textwrap.dedent("""
    import subprocess, sys, threading, time
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    print(child.pid, flush=True)
    time.sleep(60)
""")


def _family() -> tuple[subprocess.Popen[str], int]:
    leader = subprocess.Popen([sys.executable, "-c", FAMILY], stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    assert leader.stdout is not None
    child = int(leader.stdout.readline())
    return leader, child


def _threads_on(pid: int) -> set[frozenset[int]]:
    return {frozenset(os.sched_getaffinity(int(t.name)))
            for t in Path(f"/proc/{pid}/task").iterdir()}


def test_the_first_cpu_is_for_the_rest_and_the_others_for_muster() -> None:
    assert cpu_pinning.split([3, 1, 2]) == ({1}, {2, 3})
    with pytest.raises(ValueError, match="two CPUs"):
        cpu_pinning.split([0])


def test_a_session_is_read_past_a_command_name_with_parentheses(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "stat").write_text("42 (odd ) name) S 1 40 41 0 -1 4194560 0\n")
    (tmp_path / "43").mkdir()
    (tmp_path / "43" / "stat").write_text("43 (other) S 1 43 43 0 -1 4194560 0\n")
    (tmp_path / "self").mkdir()
    assert cpu_pinning.session_of(42, tmp_path) == 41
    assert cpu_pinning.session_of(44, tmp_path) is None  # gone
    assert cpu_pinning.members({41: "muster"}, tmp_path) == {42: "muster"}


@pytest.mark.skipif(not TWO_CPUS, reason="pinning apart needs two CPUs")
def test_every_thread_of_every_process_in_a_session_is_pinned() -> None:
    rest, muster = cpu_pinning.split(os.sched_getaffinity(0))
    muster_leader, muster_child = _family()
    other_leader, other_child = _family()
    script = textwrap.dedent(f"""
        import os
        from tests.bench import cpu_pinning
        note = cpu_pinning.pin_sandbox({{"muster": {muster_leader.pid},
                                         "etcd": {other_leader.pid}}},
                                        rest={rest!r}, muster={muster!r})
        print(sorted(os.sched_getaffinity(0)), note)
    """)
    try:
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             check=True, cwd=Path(__file__).parents[3], timeout=60).stdout
        assert out.startswith(f"{sorted(rest)} threads pinned")  # the bench itself
        for pid in (muster_leader.pid, muster_child):
            assert _threads_on(pid) == {frozenset(muster)}
        for pid in (other_leader.pid, other_child):
            assert _threads_on(pid) == {frozenset(rest)}
        assert "muster 3" in out  # the leader's two threads and its child's one
    finally:
        for leader in (muster_leader, other_leader):
            os.killpg(leader.pid, 9)
            leader.wait()


def test_cpu_is_summed_over_a_session_and_spent_is_the_difference(tmp_path: Path) -> None:
    tick = os.sysconf("SC_CLK_TCK")
    for pid, sid, utime, stime in ((41, 41, 2 * tick, tick), (42, 41, tick, 0),
                                   (50, 50, 5 * tick, 0)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(
            f"{pid} (a (b) c) S 1 {pid} {sid} 0 -1 4194560 0 0 0 0 {utime} {stime} 0 0\n")
    before = cpu_pinning.cpu_by_name({"muster": 41, "etcd": 50}, tmp_path)
    assert before == {"bench": 0.0, "muster": 4.0, "etcd": 5.0}
    assert cpu_pinning.cpu_of(43, tmp_path) is None  # gone
    after = {**before, "muster": 10.0, "kwok": 1.0}
    assert cpu_pinning.cpu_spent(before, after) == (
        "muster 6.0, kwok 1.0, bench 0.0, etcd 0.0 (total 7.0 CPU-s)")
