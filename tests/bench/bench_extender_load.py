"""Load benchmark: Muster's /filter and /bind against a do-nothing extender, same stack.

Run: ``.venv/bin/python tests/bench/bench_extender_load.py`` (about two minutes; loopback only).

For each cluster size (1,000 and 5,000 nodes of 8 GPUs, nodeCacheCapable bodies naming every
node, as with percentageOfNodesToScore: 100) it first compares the HTTP servers ``muster
serve`` can run (``--servers gunicorn,granian``): on each, Muster and the baseline below, all
in the same interleaved rounds, and prints each one's CPU per planned member's filter (median
round, min-max) and its ratio to the first server's. Then, on the first server, it starts two
real servers on free loopback ports, one process each, the same Flask app and routes:

* Muster: ``muster serve --snapshot FILE`` over a synthetic cluster with pending JobSet gangs;
* the baseline: the same app with the pass-through decider (filter answers with its input).

It then measures, client-side over keep-alive connections with concurrent clients:

* filter of a *planned member* (its gang was planned by an earlier member's filter), Muster
  and baseline interleaved in rounds so machine noise hits both alike; Muster / baseline ratio
  at p50 and p99 is Muster's own cost (target: <= 1.3 at p50 and <= 2.0 at p99, 5,000 nodes);
  each server's CPU per filter over those rounds (``/proc``): the baseline's is what the HTTP
  server, Flask and the wire cost alone;
* the planning filter (first member of each gang), for information;
* bind with hundreds of members held at the barrier at once, released by each gang's last
  member, against the baseline's immediate bind;

and, in the same run, JSON decode+encode of the 5,000-node body with orjson and the stdlib;
then, in process, what one pod event costs the next filter (the snapshot Muster keeps current).

``--events 1000,5000,10000`` runs only the background-event mode: clusters of 10 bound pods
per node, the resident memory each size's state adds to the process (target: under 2 GiB with
Python's at 10,000 nodes and 100,000 pods), the cost of one pod event (applied to the store
and the next snapshot made; target: within 1.5x from the smallest size to the largest), and a
planned member's filter quiet and with 200 pod events per second arriving from another thread;
ratios in the same run.
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench import cpu_pinning  # noqa: E402

GPU = "nvidia.com/gpu"


# --- the synthetic cluster -------------------------------------------------------------------

def node(i: int) -> dict[str, Any]:
    alloc = {"cpu": "96", "memory": "1Ti", "pods": "110", GPU: "8"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": f"gpu-{i:05d}", "labels": {"rack": f"r{i // 32}"}},
            "status": {"allocatable": alloc, "capacity": alloc}}


def container() -> dict[str, Any]:
    return {"name": "main", "image": "trainer",
            "resources": {"requests": {"cpu": "8", "memory": "64Gi", GPU: "8"},
                          "limits": {GPU: "8"}}}


def gang_objects(g: int, members: int) -> list[dict[str, Any]]:
    name, ns = f"train-{g}", "ml"
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
              "metadata": {"name": name, "namespace": ns, "uid": f"js-{g}"},
              "spec": {"replicatedJobs": [{"name": "worker", "replicas": 1, "template": {
                  "spec": {"parallelism": members, "completions": members,
                           "template": {"spec": {"containers": [container()]}}}}}]}}
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": f"{name}-worker-0", "namespace": ns, "uid": f"job-{g}",
                        "ownerReferences": [{"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                             "kind": "JobSet", "name": name, "uid": f"js-{g}",
                                             "controller": True}]},
           "spec": {"template": {"spec": {"containers": []}}}}
    return [jobset, job, *(member_pod(g, i) for i in range(members))]


def member_pod(g: int, i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"train-{g}-worker-0-{i}", "namespace": "ml",
                         "uid": f"uid-{g}-{i}",
                         "labels": {"jobset.sigs.k8s.io/jobset-name": f"train-{g}",
                                    "jobset.sigs.k8s.io/replicatedjob-name": "worker"},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                              "name": f"train-{g}-worker-0", "uid": f"job-{g}",
                                              "controller": True}]},
            "spec": {"schedulerName": "muster", "containers": [container()]},
            "status": {"phase": "Pending"}}


def lone_pod(name: str) -> dict[str, Any]:
    """A pod of no gang and no GPU (a notebook's, a preprocessing job's): with no
    ``managedResources`` in the extender block, such pods of the muster profile reach Muster
    too (claim-only GPU pods request no resource a list could name)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "tools", "uid": f"uid-{name}"},
            "spec": {"schedulerName": "muster", "containers": [{
                "name": "main", "image": "tool", "resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Pending"}}


# --- servers -----------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_baseline_server(port: int, threads: int, server: str) -> None:
    """The do-nothing extender: same app factory, routes, wire code and server settings."""
    from extender.core.model.snapshot import ClusterSnapshot  # noqa: PLC0415
    from extender.server.app import create_app  # noqa: PLC0415
    from extender.server.decider import PassThrough  # noqa: PLC0415
    from extender.server.runner import serve  # noqa: PLC0415
    from extender.server.settings import Settings  # noqa: PLC0415
    from extender.state.store import StateStore  # noqa: PLC0415

    def factory() -> Any:
        store = StateStore(lambda raw: ClusterSnapshot.of((), ()))
        return create_app(Settings(), store, time.time, decider=PassThrough())

    serve(factory, host="127.0.0.1", port=port, threads=threads, log_level="warning",
          server=server)


class Server:
    def __init__(self, argv: list[str], port: int) -> None:
        self.port = port
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, start_new_session=True)
        try:  # in a session of its own (to count its CPU): Ctrl-C does not reach it
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                status, _ = request(self.port, "GET", "/readyz", None)
                if status == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(self.proc.stderr.read().decode() if self.proc.stderr else "")
            time.sleep(0.2)
        raise RuntimeError(f"server on port {self.port} not ready in 120s")

    def cpu(self) -> float:
        """CPU seconds the server has used so far: its main process and its worker (its
        session's processes, threads included)."""
        return cpu_pinning.cpu_by_name({"server": self.proc.pid}).get("server", 0.0)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


_local = threading.local()


def request(port: int, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
    """One call over this thread's keep-alive connection to ``port`` (as Go's client does)."""
    conns: dict[int, http.client.HTTPConnection] = _local.__dict__.setdefault("conns", {})
    conn = conns.get(port)
    if conn is None:
        conn = conns[port] = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException):
        conn.close()
        conns.pop(port, None)
        raise


def timed(port: int, path: str, body: bytes) -> tuple[float, bytes]:
    started = time.perf_counter()
    status, data = request(port, "POST", path, body)
    elapsed = time.perf_counter() - started
    if status != 200:
        raise RuntimeError(f"{path} answered {status}")
    return elapsed, data


def concurrently(jobs: Sequence[Callable[[], None]], clients: int) -> None:
    lock = threading.Lock()
    queue = list(jobs)[::-1]

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                job = queue.pop()
            job()

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)


# --- figures -----------------------------------------------------------------------------------

def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def row(label: str, samples: Sequence[float]) -> str:
    return (f"  {label:<34} n={len(samples):<5} p50={pct(samples, 0.5) * 1e3:8.2f} ms  "
            f"p99={pct(samples, 0.99) * 1e3:8.2f} ms")


def json_costs(body: bytes, result: bytes, repeats: int = 200) -> tuple[float, float]:
    """Seconds per decode-request + encode-result, orjson and stdlib json."""
    def run(loads: Callable[[bytes], Any], dumps: Callable[[Any], bytes]) -> float:
        started = time.perf_counter()
        for _ in range(repeats):
            dumps(loads(body))
            loads(result)
        return (time.perf_counter() - started) / repeats

    def std_dumps(v: Any) -> bytes:
        return json.dumps(v, separators=(",", ":")).encode()

    return run(orjson.loads, orjson.dumps), run(json.loads, std_dumps)


def decode_costs(body: bytes, repeats: int = 200) -> tuple[float, float]:
    """Seconds per parse of a filter body: the wire's (msgspec over the top level, the names
    type-checked as they are read) and orjson reading the whole body, the names' types then
    checked in one pass through a set."""
    from extender.server.wire import parse_extender_args  # noqa: PLC0415

    def whole(b: bytes) -> tuple[str, ...]:
        names = orjson.loads(b)["NodeNames"]
        if not set(map(type, names)) <= {str}:
            raise ValueError("a name is not a string")
        return tuple(names)

    def run(parse: Callable[[bytes], object]) -> float:
        best = float("inf")
        for _ in range(3):  # the best of three: the machine is shared
            started = time.perf_counter()
            for _ in range(repeats):
                parse(body)
            best = min(best, (time.perf_counter() - started) / repeats)
        return best

    return run(parse_extender_args), run(whole)


# --- one cluster size --------------------------------------------------------------------------

def write_cluster(workdir: Path, nodes: int, *, gangs: int, members: int) -> Path:
    snapshot = workdir / f"cluster-{nodes}.yaml"
    if not snapshot.exists():
        items = [node(i) for i in range(nodes)]
        for g in range(gangs):
            items += gang_objects(g, members)
        snapshot.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List",
                                            "items": items}, sort_keys=False))
    return snapshot


def start_pair(snapshot: Path, *, server: str, threads: int) -> tuple[Server, Server]:
    """Muster over ``snapshot`` and the do-nothing baseline, both on ``server``."""
    m_port, b_port = free_port(), free_port()
    muster = Server([sys.executable, "-m", "extender.cli.main", "serve", "--snapshot",
                     str(snapshot), "--port", str(m_port), "--threads", str(threads),
                     "--bind-timeout", "60", "--plan-ttl", "600", "--log-level", "warning",
                     "--max-request-bytes", str(64 << 20), "--server", server], m_port)
    try:
        baseline = Server([sys.executable, __file__, "--baseline-server", str(b_port),
                           "--threads", str(threads), "--servers", server], b_port)
    except BaseException:  # in its own session, nothing else would stop it
        muster.stop()
        raise
    return muster, baseline


def filter_bodies(nodes: int, *, gangs: int, members: int) -> dict[tuple[int, int], bytes]:
    names = [f"gpu-{i:05d}" for i in range(nodes)]
    return {(g, i): orjson.dumps({"Pod": member_pod(g, i), "Nodes": None, "NodeNames": names})
            for g in range(gangs) for i in range(members)}


def plan_every_gang(port: int, bodies: dict[tuple[int, int], bytes], gangs: int) -> list[float]:
    """The first member's filter of each gang, which plans the whole gang; seconds each."""
    plan_times: list[float] = []
    for g in range(gangs):
        elapsed, data = timed(port, "/filter", bodies[(g, 0)])
        result = orjson.loads(data)
        if result["Error"] or not result["NodeNames"]:
            raise RuntimeError(f"gang {g} was not planned: {result['Error'] or result}")
        plan_times.append(elapsed)
    return plan_times


def timed_into(samples: list[float], port: int, body: bytes) -> Callable[[], None]:
    """A job: one filter of ``body``, its seconds appended to ``samples``."""
    def job() -> None:
        samples.append(timed(port, "/filter", body)[0])  # list.append is atomic
    return job


def compare_servers(nodes: int, servers: Sequence[str], *, gangs: int, members: int,
                    clients: int, rounds: int, threads: int, workdir: Path) -> None:
    """CPU per planned member's filter, Muster and the baseline on each server, all in the
    same rounds (interleaved, so the machine's load hits every server alike)."""
    snapshot = write_cluster(workdir, nodes, gangs=gangs, members=members)
    bodies = filter_bodies(nodes, gangs=gangs, members=members)
    planned = [k for k in sorted(bodies) if k[1] > 0]
    pairs: dict[str, tuple[Server, Server]] = {}
    try:
        for server in servers:
            pairs[server] = start_pair(snapshot, server=server, threads=threads)
            plan_every_gang(pairs[server][0].port, bodies, gangs)
        cpu: dict[tuple[str, str], list[float]] = {}
        lat: dict[tuple[str, str], list[float]] = {}
        for _ in range(rounds):
            for server, pair in pairs.items():
                for who, target in zip(("muster", "baseline"), pair, strict=True):
                    samples: list[float] = []
                    before = target.cpu()
                    concurrently([timed_into(samples, target.port, bodies[k]) for k in planned],
                                 clients)
                    cpu.setdefault((server, who), []).append(
                        (target.cpu() - before) / len(planned))
                    lat.setdefault((server, who), []).extend(samples)
    finally:
        for pair in pairs.values():
            for target in pair:
                target.stop()
    print(f"\n{nodes} nodes, a planned member's filter, {rounds} rounds x {len(planned)} "
          f"filters per server, {clients} concurrent clients: server CPU per filter, the "
          "median round (min-max over rounds)")
    first = servers[0]
    for server in servers:
        for who in ("muster", "baseline"):
            per = sorted(cpu[(server, who)])
            mid = pct(per, 0.5)
            vs = (f"  x{mid / pct(cpu[(first, who)], 0.5):.2f} of {first}"
                  if server != first else "")
            print(f"  {server:<9} {who:<9} {mid * 1e3:6.2f} ms ({per[0] * 1e3:.2f}-"
                  f"{per[-1] * 1e3:.2f})  p50 {pct(lat[(server, who)], 0.5) * 1e3:6.2f} ms  "
                  f"p99 {pct(lat[(server, who)], 0.99) * 1e3:6.2f} ms{vs}")


def bench(nodes: int, *, server: str, gangs: int, members: int, clients: int, rounds: int,
          threads: int, workdir: Path) -> dict[str, float]:
    snapshot = write_cluster(workdir, nodes, gangs=gangs, members=members)
    names = [f"gpu-{i:05d}" for i in range(nodes)]
    muster, baseline = start_pair(snapshot, server=server, threads=threads)
    m_port, b_port = muster.port, baseline.port
    out: dict[str, float] = {}
    try:
        bodies = filter_bodies(nodes, gangs=gangs, members=members)
        plan_times = plan_every_gang(m_port, bodies, gangs)
        for _ in range(2):  # warm both servers' connections and caches
            timed(m_port, "/filter", bodies[(0, 1)])
            timed(b_port, "/filter", bodies[(0, 1)])

        samples: dict[str, list[float]] = {"muster": [], "baseline": []}
        lock = threading.Lock()
        planned = [k for k in sorted(bodies) if k[1] > 0]

        def filter_job(port: int, who: str, key: tuple[int, int]) -> Callable[[], None]:
            def job() -> None:
                elapsed, data = timed(port, "/filter", bodies[key])
                if who == "muster" and orjson.loads(data)["Error"]:
                    raise RuntimeError(orjson.loads(data)["Error"])
                with lock:
                    samples[who].append(elapsed)
            return job

        cpu = {"muster": 0.0, "baseline": 0.0}

        def measured(server: Server, who: str, jobs: list[Callable[[], None]]) -> None:
            before = server.cpu()
            concurrently(jobs, clients)
            cpu[who] += server.cpu() - before

        for _ in range(rounds):  # interleaved, so drift and neighbours hit both alike
            measured(muster, "muster", [filter_job(m_port, "muster", k) for k in planned])
            measured(baseline, "baseline", [filter_job(b_port, "baseline", k) for k in planned])

        # Pods of no gang, each new to Muster (as kube-scheduler sends them), interleaved.
        lone: dict[str, list[float]] = {"muster": [], "baseline": []}

        def lone_job(port: int, who: str, body: bytes) -> Callable[[], None]:
            def job() -> None:
                elapsed, data = timed(port, "/filter", body)
                if who == "muster" and orjson.loads(data)["Error"]:
                    raise RuntimeError(orjson.loads(data)["Error"])
                with lock:
                    lone[who].append(elapsed)
            return job

        for r in range(rounds):
            lone_bodies = [orjson.dumps({"Pod": lone_pod(f"tool-{r}-{k}"), "Nodes": None,
                                         "NodeNames": names}) for k in range(len(planned))]
            concurrently([lone_job(m_port, "muster", b) for b in lone_bodies], clients)
            concurrently([lone_job(b_port, "baseline", b) for b in lone_bodies], clients)

        # Binds: every gang's members but the last are held at the barrier at once.
        held: list[float] = []
        releasing: list[float] = []
        errors: list[str] = []
        gang_nodes = {}
        for g in range(gangs):
            [gang] = [x for x in orjson.loads(request(m_port, "GET", "/inspect/gangs", None)[1])
                      ["gangs"] if x["gang"] == f"ml/train-{g}"]
            gang_nodes[g] = [s["node"] for s in gang["plan"] for _ in range(s["pods"])]

        def bind_body(g: int, i: int) -> bytes:
            return orjson.dumps({"PodName": f"train-{g}-worker-0-{i}", "PodNamespace": "ml",
                                 "PodUID": f"uid-{g}-{i}", "Node": gang_nodes[g][i]})

        def bind_job(g: int, i: int, into: list[float]) -> Callable[[], None]:
            def job() -> None:
                elapsed, data = timed(m_port, "/bind", bind_body(g, i))
                error = orjson.loads(data)["Error"]
                with lock:
                    into.append(elapsed)
                    if error:
                        errors.append(error)
            return job

        holders = [threading.Thread(target=bind_job(g, i, held))
                   for g in range(gangs) for i in range(members - 1)]
        for t in holders:
            t.start()
        deadline = time.monotonic() + 60
        waiting = 0
        while time.monotonic() < deadline:
            metrics = request(m_port, "GET", "/metrics", None)[1].decode()
            line = next(x for x in metrics.splitlines() if x.startswith("muster_binds_waiting "))
            waiting = int(float(line.split()[1]))
            if waiting >= len(holders):
                break
            time.sleep(0.05)
        out["held_at_once"] = waiting
        concurrently([bind_job(g, members - 1, releasing) for g in range(gangs)], clients)
        for t in holders:
            t.join(120)
        if errors:
            raise RuntimeError(f"{len(errors)} binds failed, e.g. {errors[0]}")
        base_binds: list[float] = []

        def base_bind(g: int, i: int) -> Callable[[], None]:
            def job() -> None:
                elapsed, _ = timed(b_port, "/bind", bind_body(g, i))
                with lock:
                    base_binds.append(elapsed)
            return job

        concurrently([base_bind(g, i) for g in range(gangs) for i in range(members)], clients)

        print(f"\n{nodes} nodes x 8 GPUs, {gangs} gangs x {members} members x 8 GPUs, "
              f"{clients} concurrent clients, body {len(bodies[(0, 1)]) / 1024:.0f} KiB")
        print(row("filter, planned member (Muster)", samples["muster"]))
        print(row("filter (do-nothing baseline)", samples["baseline"]))
        p50 = pct(samples["muster"], 0.5) / pct(samples["baseline"], 0.5)
        p99 = pct(samples["muster"], 0.99) / pct(samples["baseline"], 0.99)
        print(f"  {'Muster / baseline':<34} p50 x{p50:.2f} (target <= 1.3)   "
              f"p99 x{p99:.2f} (target <= 2.0)")
        per = {who: cpu[who] / len(samples[who]) for who in cpu}
        print(f"  {'server CPU per filter':<34} Muster {per['muster'] * 1e3:.2f} ms, "
              f"baseline {per['baseline'] * 1e3:.2f} ms ({server}, Flask and the wire alone; "
              f"Muster x{per['muster'] / per['baseline']:.2f})")
        print(row("filter, a pod of no gang (Muster)", lone["muster"]))
        print(row("filter, a pod of no gang (baseline)", lone["baseline"]))
        lone_p50 = pct(lone["muster"], 0.5) / pct(lone["baseline"], 0.5)
        lone_p99 = pct(lone["muster"], 0.99) / pct(lone["baseline"], 0.99)
        print(f"  {'Muster / baseline, no gang':<34} p50 x{lone_p50:.2f}   p99 x{lone_p99:.2f} "
              "(what reaching Muster costs a pod that is no gang's)")
        out.update(lone_p50_ratio=lone_p50, lone_p99_ratio=lone_p99)
        print(row("filter, planning a gang (Muster)", plan_times))
        print(row(f"bind, held at barrier ({waiting} at once)", held))
        print(row("bind, releasing its gang", releasing))
        print(row("bind (do-nothing baseline)", base_binds))
        out.update(p50_ratio=p50, p99_ratio=p99, cpu_muster=per["muster"],
                   cpu_baseline=per["baseline"])
        orj, std = json_costs(bodies[(0, 1)], orjson.dumps(
            {"Nodes": None, "NodeNames": names, "FailedNodes": {},
             "FailedAndUnresolvableNodes": {}, "Error": ""}))
        print(f"  JSON decode+encode of this body: orjson {orj * 1e3:.3f} ms, stdlib json "
              f"{std * 1e3:.3f} ms (stdlib x{std / orj:.1f}; "
              f"{(std - orj) / pct(samples['baseline'], 0.5):.0%} of the baseline p50)")
        fast, whole = decode_costs(bodies[(0, 1)])
        print(f"  this body parsed: the wire's msgspec pass {fast * 1e3:.3f} ms, orjson over "
              f"the whole body and the names' types checked through a set {whole * 1e3:.3f} "
              f"ms (x{whole / fast:.2f})")
    finally:
        muster.stop()
        baseline.stop()
    return out


def busy_pod(i: int, nodes: int) -> dict[str, Any]:
    """A bound 2-GPU pod on one of the first half of the nodes (4 per node)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"busy-{i}", "namespace": "default", "uid": f"busy-{i}",
                         "resourceVersion": "1"},
            "spec": {"nodeName": f"gpu-{(i // 4) % max(1, nodes // 2):05d}",
                     "containers": [{"name": "m", "image": "x", "resources": {
                         "requests": {"cpu": "1", GPU: "2"}, "limits": {GPU: "2"}}}]},
            "status": {"phase": "Running"}}


def bench_churn(nodes: int, *, gangs: int, members: int, requests: int) -> None:
    """A planned member's filter while the cluster changes: one pod event before each request
    (every filter pays for a fresh snapshot), against the same filter with no change.

    In process, through the Flask app (the HTTP stack is the same for both and is measured
    above): this isolates what keeping state current costs Muster per event.
    """
    from extender.files.catalog import packaged_catalog  # noqa: PLC0415
    from extender.server.app import create_app  # noqa: PLC0415
    from extender.server.settings import Settings  # noqa: PLC0415
    from extender.state.build import CatalogSnapshots  # noqa: PLC0415
    from extender.state.store import DESCRIPTORS, NODES, PODS, StateStore  # noqa: PLC0415

    busy = nodes * 2
    items = [node(i) for i in range(nodes)] + [busy_pod(i, nodes) for i in range(busy)]
    for g in range(gangs):
        items += gang_objects(g, members)
    store = StateStore(CatalogSnapshots(packaged_catalog()), expected=[NODES, PODS, DESCRIPTORS])
    store.load(items)
    client = create_app(Settings(plan_ttl=3600, bind_timeout=60), store,
                        time.time).test_client()
    names = [f"gpu-{i:05d}" for i in range(nodes)]

    def filter_once(g: int, i: int) -> float:
        body = orjson.dumps({"Pod": member_pod(g, i), "Nodes": None, "NodeNames": names})
        started = time.perf_counter()
        data = client.post("/filter", data=body, headers={"Content-Type": "application/json"})
        elapsed = time.perf_counter() - started
        if orjson.loads(data.data)["Error"]:
            raise RuntimeError(orjson.loads(data.data)["Error"])
        return elapsed

    for g in range(gangs):
        filter_once(g, 0)  # plan every gang
    quiet = [filter_once(k % gangs, 1 + k % (members - 1)) for k in range(requests)]
    churned: list[float] = []
    for k in range(requests):
        changed = busy_pod(k % busy, nodes)
        changed["metadata"]["resourceVersion"] = str(k + 2)
        store.apply(PODS, "MODIFIED", changed)  # as the pod informer would
        churned.append(filter_once(k % gangs, 1 + k % (members - 1)))
    print(f"\n{nodes} nodes, {busy} bound pods, {gangs} planned gangs, in process "
          "(no HTTP): a pod event before every filter")
    print(row("filter, planned member, no change", quiet))
    print(row("filter, planned member, 1 event", churned))
    print(f"  {'cost of keeping up with one event':<34} p50 "
          f"{(pct(churned, 0.5) - pct(quiet, 0.5)) * 1e3:8.2f} ms")


def small_pod(i: int, nodes: int, version: int = 1) -> dict[str, Any]:
    """A bound CPU-only pod, ``pods_per_node`` of them per node (GPUs stay free for gangs)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"svc-{i}", "namespace": "default", "uid": f"svc-{i}-{version}",
                         "resourceVersion": str(version)},
            "spec": {"nodeName": f"gpu-{i % nodes:05d}",
                     "containers": [{"name": "m", "image": "x", "resources": {
                         "requests": {"cpu": "1", "memory": "1Gi"}}}]},
            "status": {"phase": "Running"}}


class Events:
    """Pod events as an informer delivers them: one pod updated, one replaced by a new pod
    (deleted, then its successor added and bound), in turn; capacities change every time."""

    def __init__(self, store: Any, nodes: int, pods: int) -> None:
        self.store, self.nodes, self.pods = store, nodes, pods
        self.version = [1] * pods
        self.k = 0

    def one(self) -> None:
        from extender.state.store import PODS  # noqa: PLC0415

        i = (self.k * 7919) % self.pods
        self.k += 1
        old = small_pod(i, self.nodes, self.version[i])
        if self.k % 2:
            old["status"]["conditions"] = [{"type": "Ready", "status": str(self.k % 3 == 0)}]
            self.store.apply(PODS, "MODIFIED", old)
            return
        self.store.apply(PODS, "DELETED", old)
        self.version[i] += 1
        new = small_pod(i, self.nodes, self.version[i])
        new["spec"]["nodeName"] = f"gpu-{(i + self.k) % self.nodes:05d}"
        self.store.apply(PODS, "ADDED", new)


def resident_mib(field: str = "VmRSS") -> float:
    """This process's resident memory (``VmRSS``) or its peak (``VmHWM``), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


HOUSEKEEPING = 1.0
"""Seconds between the housekeeper's ticks, as ``muster serve`` sets them."""


class EventWorld:
    """One cluster size for the background-event mode: a store fed as informers feed it, the
    Flask app over it, every gang planned, and the pod events to apply."""

    def __init__(self, nodes: int, *, pods_per_node: int, gangs: int, members: int) -> None:
        from extender.files.catalog import packaged_catalog  # noqa: PLC0415
        from extender.server.app import create_app  # noqa: PLC0415
        from extender.server.settings import Settings  # noqa: PLC0415
        from extender.state.build import CatalogSnapshots  # noqa: PLC0415
        from extender.state.store import DESCRIPTORS, NODES, PODS, StateStore  # noqa: PLC0415

        self.nodes, self.pods = nodes, nodes * pods_per_node
        items = [node(i) for i in range(nodes)] + [small_pod(i, nodes) for i in range(self.pods)]
        for g in range(gangs):
            items += gang_objects(g, members)
        self.store = StateStore(CatalogSnapshots(packaged_catalog()),
                                expected=[NODES, PODS, DESCRIPTORS])
        started = time.perf_counter()
        self.store.load(items)
        self.store.snapshot()
        self.loaded = time.perf_counter() - started
        # With the housekeeper, as `muster serve` runs it: its ticks, and the rounds each burst
        # of pod events brings on, share the lock and the GIL with the filters measured here.
        self.client = create_app(Settings(plan_ttl=3600, bind_timeout=60), self.store,
                                 time.time, housekeeping=HOUSEKEEPING).test_client()
        names = [f"gpu-{i:05d}" for i in range(nodes)]
        self.bodies = {(g, i): orjson.dumps({"Pod": member_pod(g, i), "Nodes": None,
                                             "NodeNames": names})
                       for g in range(gangs) for i in range(members)}
        for g in range(gangs):
            self.filter_once((g, 0))  # plan every gang
        self.planned = [k for k in sorted(self.bodies) if k[1] > 0]
        self.events = Events(self.store, nodes, self.pods)
        self.costs: list[float] = []

    def filter_once(self, key: tuple[int, int]) -> float:
        t0 = time.perf_counter()
        data = self.client.post("/filter", data=self.bodies[key],
                                headers={"Content-Type": "application/json"})
        elapsed = time.perf_counter() - t0
        if orjson.loads(data.data)["Error"]:
            raise RuntimeError(orjson.loads(data.data)["Error"])
        return elapsed

    def event_costs(self, count: int) -> None:
        """``count`` events, each applied and followed by the snapshot a filter would ask for."""
        for _ in range(count):
            t0 = time.perf_counter()
            self.events.one()
            self.store.snapshot()
            self.costs.append(time.perf_counter() - t0)

    def filters(self, *, rate: float, filters: int, rounds: int,
                ) -> tuple[list[float], list[float], float]:
        """A planned member's filter quiet, then with ``rate`` pod events per second arriving
        from another thread (as informer threads deliver them), in alternating phases so
        machine noise hits both alike. Returns quiet and busy samples, events/s achieved."""
        quiet: list[float] = []
        busy: list[float] = []
        applied = [0]

        def background(stop: threading.Event) -> None:
            period, due = 1.0 / rate, time.perf_counter()
            while not stop.is_set():
                self.events.one()
                applied[0] += 1
                due += period
                pause = due - time.perf_counter()
                if pause > 0:
                    stop.wait(pause)

        busy_seconds = 0.0
        for r in range(rounds):
            keys = [self.planned[(r * filters + j) % len(self.planned)] for j in range(filters)]
            quiet += [self.filter_once(k) for k in keys]
            stop = threading.Event()
            thread = threading.Thread(target=background, args=(stop,), daemon=True)
            t0 = time.perf_counter()
            thread.start()
            busy += [self.filter_once(k) for k in keys]
            stop.set()
            thread.join(30)
            busy_seconds += time.perf_counter() - t0
        return quiet, busy, applied[0] / busy_seconds if busy_seconds else 0.0


def events_mode(sizes: Sequence[int], args: argparse.Namespace) -> int:
    """One event's cost at every size, measured round-robin (100 events per size in turn) so
    that the machine's load at the moment hits every size alike; then each size's filter
    latency quiet and under events.

    In one process, as ``muster serve``'s worker runs: its interpreter-lock switch interval
    (``Settings.switch_interval``) is set before the threads start, so a filter waiting for
    the lock behind the event thread waits as long as it would in Muster, not Python's
    default 5 ms."""
    from extender.server.settings import Settings  # noqa: PLC0415

    sys.setswitchinterval(Settings().switch_interval)
    print(f"interpreter switch interval {sys.getswitchinterval() * 1e3:g} ms, "
          "as muster serve sets it")
    from extender.files.catalog import packaged_catalog  # noqa: PLC0415
    from extender.server.app import create_app  # noqa: F401, PLC0415
    from extender.state.build import CatalogSnapshots  # noqa: F401, PLC0415

    packaged_catalog()  # modules and descriptors loaded before the first size is measured
    base = resident_mib()
    worlds: dict[int, EventWorld] = {}
    added: dict[int, float] = {}
    for n in sizes:  # what each size's store, snapshot and app keep, measured as they load
        before = resident_mib()
        worlds[n] = EventWorld(n, pods_per_node=args.pods_per_node, gangs=args.gangs,
                               members=args.members)
        gc.collect()
        added[n] = resident_mib() - before
    for world in worlds.values():
        world.event_costs(100)  # warm
        world.costs.clear()
    for _ in range(6):
        for world in worlds.values():
            world.event_costs(100)
    for n, world in worlds.items():
        quiet, busy, achieved = world.filters(rate=args.rate, filters=150, rounds=3)
        mean = sum(world.costs) / len(world.costs)
        print(f"\n{n} nodes, {world.pods} bound pods ({args.pods_per_node} per node), "
              f"{args.gangs} planned gangs, in process (no HTTP); state loaded in "
              f"{world.loaded:.1f} s")
        print(f"  {'resident memory':<34} this size added {added[n]:.0f} MiB to the "
              f"process (Python, Muster's modules and catalog alone: {base:.0f} MiB)")
        print(row("one pod event (applied + snapshot)", world.costs)
              + f"  mean={mean * 1e3:6.3f} ms")
        print(row("filter, planned member, quiet", quiet))
        print(row(f"filter, {achieved:.0f} pod events/s behind", busy))
        print(f"  {'under events / quiet':<34} p50 x{pct(busy, 0.5) / pct(quiet, 0.5):.2f}   "
              f"p99 x{pct(busy, 0.99) / pct(quiet, 0.99):.2f} (target <= 2.0)")
    largest = max(sizes)
    print(f"\nresident memory at {largest} nodes and {worlds[largest].pods} pods: "
          f"{base + added[largest]:.0f} MiB, Python, modules and that size alone (target < 2048 "
          "MiB); "
          f"the process held every size at once: {resident_mib():.0f} MiB, "
          f"peak {resident_mib('VmHWM'):.0f} MiB")
    small, large = worlds[min(sizes)].costs, worlds[max(sizes)].costs
    print(f"\none event at {max(sizes)} nodes / at {min(sizes)} nodes: p50 "
          f"x{pct(large, 0.5) / pct(small, 0.5):.2f}, mean "
          f"x{sum(large) / len(large) / (sum(small) / len(small)):.2f} (target <= 1.5)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", default="1000,5000")
    parser.add_argument("--gangs", type=int, default=8)
    parser.add_argument("--members", type=int, default=32)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=320)
    parser.add_argument("--events", default="", metavar="NODES",
                        help="only the background-event mode, at these sizes (e.g. "
                        "1000,5000,10000): one event's cost and filter p99 quiet vs under events")
    parser.add_argument("--pods-per-node", type=int, default=10)
    parser.add_argument("--rate", type=float, default=200.0, help="pod events per second")
    parser.add_argument("--servers", default="gunicorn,granian",
                        help="the HTTP servers compared, the first also measured in full")
    parser.add_argument("--compare-rounds", type=int, default=6,
                        help="interleaved rounds of the servers' comparison")
    parser.add_argument("--baseline-server", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    servers = args.servers.split(",")
    if args.baseline_server:
        run_baseline_server(args.baseline_server, args.threads, servers[0])
        return 0
    print(f"bench_extender_load: loopback, {' and '.join(servers)} with {args.threads} "
          f"threads, {os.cpu_count()} CPUs shared with whatever else runs")
    if args.events:
        return events_mode([int(x) for x in args.events.split(",")], args)
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.nodes.split(",")):
            compare_servers(n, servers, gangs=args.gangs, members=args.members,
                            clients=args.clients, rounds=args.compare_rounds,
                            threads=args.threads, workdir=Path(tmp))
        for n in (int(x) for x in args.nodes.split(",")):
            bench(n, server=servers[0], gangs=args.gangs, members=args.members,
                  clients=args.clients, rounds=args.rounds, threads=args.threads,
                  workdir=Path(tmp))
        for n in (int(x) for x in args.nodes.split(",")):
            bench_churn(n, gangs=args.gangs, members=args.members, requests=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
