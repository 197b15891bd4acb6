"""Fuzz the extender over real HTTP: ``muster serve --snapshot`` under gunicorn, seeded bodies.

Every body goes over a kept-alive connection (one per client thread, as Go's transport does);
each reply is checked (:mod:`tests.reliability.checks`), and so is the connection after it: a
reply that does not say ``Connection: close`` promises the next request on it an answer. After
the run the server must still be alive with one worker, hold no bind, and answer a request on
every thread at once.

    python -m tests.reliability.fuzz --bodies 10000 --seed 16       # the full run (a few min)
    python -m tests.reliability.fuzz --seed 16 --only 4242          # replay one body
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import yaml

from tests.reliability.bodies import LIMIT, NODES, Body, body, cluster
from tests.reliability.checks import check_reply

ROOT = Path(__file__).resolve().parents[2]
BIND_TIMEOUT = 0.5
THREADS = 8
REPLY_TIMEOUT = 10.0
"""A reply slower than this is a stall (the longest legitimate wait is one bind barrier)."""


@dataclass(frozen=True)
class Server:
    port: int
    log: Path
    proc: subprocess.Popen[bytes]
    workers: tuple[int, ...] = ()
    """The gunicorn worker's PID when the run began: a different one later means a crash."""


def _workers(server: Server) -> tuple[int, ...]:
    path = Path(f"/proc/{server.proc.pid}/task/{server.proc.pid}/children")
    return tuple(sorted(int(p) for p in path.read_text().split())) if path.exists() else ()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


@contextlib.contextmanager
def serving(directory: Path) -> Iterator[Server]:
    """``muster serve`` exactly as deployed (gunicorn, gthread), from a snapshot file."""
    snapshot = directory / "cluster.yaml"
    snapshot.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": cluster()}))
    port, log = _free_port(), directory / "muster.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "extender.cli.main", "serve", "--snapshot", str(snapshot),
             "--port", str(port), "--bind-timeout", str(BIND_TIMEOUT), "--threads",
             str(THREADS), "--max-request-bytes", str(LIMIT), "--log-level", "warning"],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError):
                if _get(port, "/readyz")[0] == 200:
                    break
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"muster serve did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)
        started = Server(port, log, proc)
        yield Server(port, log, proc, _workers(started))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # a wedged worker ignores gunicorn: end its group
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the worker, if the master left it behind


@dataclass
class Report:
    seed: int
    bodies: int = 0
    seconds: float = 0.0
    kinds: Counter[str] = field(default_factory=Counter)
    latency: dict[str, list[float]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    in_flight: dict[int, Body] = field(default_factory=dict)
    stalled: threading.Event = field(default_factory=threading.Event, repr=False)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def fail(self, b: Body | None, problem: str) -> None:
        where = f"body #{b.index} ({b.verb}, {b.kind}, {len(b.data)} bytes)" if b else "server"
        with self.lock:
            self.failures.append(f"{where}: {problem}")

    def record(self, b: Body, seconds: float) -> None:
        with self.lock:
            self.bodies += 1
            self.kinds[b.kind] += 1
            self.latency.setdefault(b.verb, []).append(seconds)

    def figures(self) -> str:
        lines = [f"seed {self.seed}: {self.bodies} bodies in {self.seconds:.1f} s "
                 f"({self.bodies / max(self.seconds, 1e-9):.0f}/s), "
                 f"{len(self.failures)} failure(s)",
                 "kinds: " + ", ".join(f"{k} {n}" for k, n in sorted(self.kinds.items()))]
        for verb, times in sorted(self.latency.items()):
            t = sorted(times)
            lines.append(f"  {verb:<10} n={len(t):>5}  p50 {_ms(t, 0.5)}  p99 {_ms(t, 0.99)}  "
                         f"max {t[-1] * 1000:.1f} ms")
        grouped = Counter(_shape(f) for f in self.failures)
        for shape, n in grouped.most_common():
            first = next(f for f in self.failures if _shape(f) == shape)
            lines.append(f"  FAIL x{n}: {first[:400]}")
        return "\n".join(lines)


def _ms(sorted_times: list[float], q: float) -> str:
    return f"{sorted_times[min(len(sorted_times) - 1, int(q * len(sorted_times)))] * 1000:.1f} ms"


def _shape(failure: str) -> str:
    """A failure without its body number and sizes, to group equal failures."""
    return re.sub(r"#\d+|\d+ bytes|\d{3,}|\(char \d+\)|in flight then: .*", "N", failure)


def _send(conn: http.client.HTTPConnection, b: Body) -> tuple[int, bool, bytes]:
    headers = {"Content-Type": "application/json"}
    if b.chunks:
        conn.request("POST", f"/{b.verb}", body=b.pieces(), headers=headers, encode_chunked=True)
    else:
        conn.request("POST", f"/{b.verb}", body=b.data, headers=headers)
    reply = conn.getresponse()
    return reply.status, reply.will_close, reply.read()


DROPPED = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
           http.client.BadStatusLine)


def _client(port: int, items: list[Body], report: Report) -> None:
    """One kept-alive connection through ``items``, reconnecting only when told to.

    A stalled reply stops every client: a wedged server would make each further body wait
    the full timeout, and the bodies in flight at that moment are the suspects to report."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REPLY_TIMEOUT)
    previous: Body | None = None  # the body whose keep-alive reply this connection follows
    me = threading.get_ident()
    for b in items:
        if report.stalled.is_set():
            break
        started = time.perf_counter()
        report.in_flight[me] = b
        try:
            status, closes, data = _send(conn, b)
        except TimeoutError:
            suspects = ", ".join(f"#{s.index} ({s.verb}, {s.kind})"
                                 for s in report.in_flight.values())
            report.fail(b, f"no reply within {REPLY_TIMEOUT:g} s: the server stalled; bodies "
                           f"in flight then: {suspects}")
            report.stalled.set()
            break
        except DROPPED as err:
            conn.close()
            if previous is None:
                report.in_flight.pop(me, None)
                report.fail(b, f"connection dropped with no reply ({err!r})")
                continue
            report.fail(previous, "the reply said keep-alive but the server then closed the "
                                  f"connection: the next request on it failed ({err!r})")
            previous = None
            try:  # this body on a fresh connection, so that it is still checked
                status, closes, data = _send(conn, b)
            except (OSError, http.client.HTTPException) as again:
                report.in_flight.pop(me, None)
                report.fail(b, f"no reply on a fresh connection either ({again!r})")
                conn.close()
                continue
        except http.client.HTTPException as err:  # a reply kube-scheduler could not read
            report.in_flight.pop(me, None)
            report.fail(b, f"unreadable reply ({err!r})")
            conn.close()
            previous = None
            continue
        report.in_flight.pop(me, None)
        report.record(b, time.perf_counter() - started)
        for problem in check_reply(b, status, data):
            report.fail(b, problem)
        if closes:
            conn.close()
            previous = None
        else:
            previous = b
    conn.close()


def _server_health(server: Server, report: Report) -> None:
    """After the run: alive, one worker ever, no held bind, every thread free at once."""
    if report.stalled.is_set():
        return  # nothing more to learn from a wedged server
    time.sleep(BIND_TIMEOUT * 2 + 0.5)
    if server.proc.poll() is not None:
        report.fail(None, f"the server exited with {server.proc.returncode}")
        return
    status, metrics = _get(server.port, "/metrics")
    waiting = [line for line in metrics.decode().splitlines()
               if line.startswith("muster_binds_waiting ")]
    if status != 200 or waiting != ["muster_binds_waiting 0.0"]:
        report.fail(None, f"binds still held after the run: {waiting}")
    for path in ("/healthz", "/readyz", "/inspect/gangs"):
        if _get(server.port, path)[0] != 200:
            report.fail(None, f"{path} does not answer 200 after the run")
    answered: list[float] = []
    probe = orjson.dumps({"Pod": {"metadata": {"name": "probe", "namespace": "default"},
                                  "spec": {"containers": []}}, "Nodes": None,
                          "NodeNames": NODES})

    def one() -> None:
        started = time.perf_counter()
        with contextlib.suppress(OSError, http.client.HTTPException):
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
            conn.request("POST", "/filter", body=probe)
            if conn.getresponse().status == 200:
                answered.append(time.perf_counter() - started)
            conn.close()

    threads = [threading.Thread(target=one) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    if len(answered) < THREADS:
        report.fail(None, f"only {len(answered)} of {THREADS} simultaneous filters answered "
                          "within 5 s: server threads are stuck")
    log = server.log.read_text(errors="replace")
    for marker in ("Traceback", "WORKER TIMEOUT", "error=internal"):
        if marker in log:
            at = log.index(marker)
            report.fail(None, f"server log has {marker!r}: {log[at:at + 400]!r}")
    if _workers(server) != server.workers:
        report.fail(None, f"the gunicorn worker was replaced: {server.workers} at the start, "
                          f"{_workers(server)} now (a crash or a worker timeout)")


def run(directory: Path, *, seed: int, count: int, connections: int = 4,
        only: int | None = None, wedges: bool = True) -> Report:
    """Send ``count`` bodies of ``seed`` (or just body ``only``) and check everything."""
    report = Report(seed=seed)
    indices = [only] if only is not None else list(range(count))
    items = [body(seed, i, wedges=wedges) for i in indices]
    with serving(directory) as server:
        started = time.perf_counter()
        shards = [items[w::connections] for w in range(connections)]
        threads = [threading.Thread(target=_client, args=(server.port, s, report))
                   for s in shards]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        report.seconds = time.perf_counter() - started
        _server_health(server, report)
    return report


def main(argv: list[str] | None = None) -> int:
    import tempfile  # noqa: PLC0415 - only the command line needs a directory of its own

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--bodies", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=16)
    p.add_argument("--connections", type=int, default=4)
    p.add_argument("--only", type=int, help="send just this body index (to replay a failure)")
    p.add_argument("--no-huge-quantities", action="store_true",
                   help="pods ask for 8 instead of 1e9 GPUs (measure the rest while the "
                        "wedge is open)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        report = run(Path(tmp), seed=args.seed, count=args.bodies,
                     connections=args.connections, only=args.only,
                     wedges=not args.no_huge_quantities)
    print(report.figures())
    if report.stalled.is_set() and args.only is None:
        # Name the body that wedges the server: each suspect alone, on a fresh one.
        for suspect in sorted(b.index for b in report.in_flight.values()):
            with tempfile.TemporaryDirectory() as tmp:
                alone = run(Path(tmp), seed=args.seed, count=1, only=suspect,
                            wedges=not args.no_huge_quantities)
            verdict = "stalls the server on its own" if alone.stalled.is_set() else "answered"
            print(f"  suspect body #{suspect}: {verdict} (replay: --seed {args.seed} "
                  f"--only {suspect})")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
