"""The streamed peer benchmark's driver (``bench_peers.py --streamed``): one fresh sandbox per
mode, each workload of the seeded schedule (:mod:`peer_stream`) created at its arrival time,
the pods that hold GPUs polled, and the figures computed from the polls.

Every mode gets the same pods the same way: the bench's own stand-in controllers
(``bench_peers.stage``), not the sandbox's real JobSet operator. The upstream plugin needs
``spec.schedulingGroup.podGroupName`` on each pod, and the JobSet v0.10.1 CRD's pod template
schema (generated from k8s.io/api v0.34, no unknown fields kept) has no such field, so the API
server prunes it from a JobSet's template and the operator's pods never name their PodGroup.
With the real operator in ``default`` and ``muster`` modes only, the modes would differ in who
makes the pods and when (the Job controller's batches), not only in the scheduler. The
stand-in's Jobs name it in
``spec.managedBy``, so the real Job controller never acts on them: when their pods Succeed
nothing recreates or deletes them and no Job completes; the Succeeded pods stay, bound and
holding nothing (the scheduler, Muster and the poll's field selector all skip them).
"""

from __future__ import annotations

import argparse
import json
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from extender.core.workloads.catalog import Catalog
from extender.files.catalog import packaged_catalog
from extender.kube.client import Connection
from extender.sandbox.config import SchedulerMode
from extender.sandbox.sandbox import Sandbox
from extender.sandbox.submit import create
from tests.bench.bench_peers import (
    NAMESPACE,
    Poller,
    gang_records,
    mode_sandbox,
    muster_notes,
    parse_mode,
    pod_gpus,
    stage,
)
from tests.bench.peer_stream import (
    COMPARED,
    Arrival,
    Poll,
    StreamFigures,
    StreamSpec,
    Tracked,
    configuration,
    measure,
    ratios,
    schedule,
    start_times,
    text_table,
)

Say = Callable[[str], None]
#: Pods that hold GPUs: bound, and neither Succeeded nor Failed.
LIVE = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


def live_polls(poller: Poller) -> list[Poll]:
    """The poller's listings so far, as polls of the pods that hold GPUs."""
    return [Poll(sample.t, sample.bound) for sample in list(poller.samples)]


class Launcher(threading.Thread):
    """Hands each arrival, at its time, to one of ``workers`` controllers, which creates the
    workload, what exists before its pods, then its pods in order (``bench_peers.stage``)."""

    def __init__(self, box: Sandbox, arrivals: list[Arrival], catalog: Catalog, *, t0: float,
                 workers: int, workload_api: bool) -> None:
        super().__init__(daemon=True)
        self.box, self.arrivals, self.catalog = box, arrivals, catalog
        self.t0, self.workload_api = t0, workload_api
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="controller")
        self.local = threading.local()
        self.lock = threading.Lock()
        self.tracked: list[Tracked] = []
        self.lags: list[float] = []
        """Per workload: its first pod created, less its arrival time (the bench's own lag)."""
        self.errors: list[str] = []
        self.futures: list[Future[None]] = []
        self._halt = threading.Event()

    def run(self) -> None:
        for arrival in self.arrivals:
            if self._halt.wait(max(0.0, self.t0 + arrival.t - time.monotonic())):
                return
            self.futures.append(self.pool.submit(self._launch, arrival))

    def _connection(self) -> Connection:
        conn: Connection | None = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.box.connection()
            conn.timeout = 60.0
            self.local.conn = conn
        return conn

    def _launch(self, arrival: Arrival) -> None:
        conn = self._connection()
        try:
            sub, pods = stage(conn, arrival.obj, self.catalog, workload_api=self.workload_api)
            created: dict[str, float] = {}
            for pod in pods:
                create(conn, pod, "pods")
                created[pod["metadata"]["name"]] = time.monotonic() - self.t0
        except Exception as err:  # recorded and reported: the figures then lack this one
            with self.lock:
                self.errors.append(f"{arrival.name}: {err}")
            return
        if sub is None:
            [pod] = pods
            name = pod["metadata"]["name"]
            made = [Tracked(key=f"{NAMESPACE}/{name}", created=created[name], min_member=1,
                            gpus_per_pod={name: pod_gpus(pod)}, single=True)]
        else:
            made = [Tracked(key=g.key, created=min(created[p] for p in g.pods),
                            min_member=g.min_member, gpus_per_pod=dict(g.gpus_per_pod))
                    for g in gang_records(sub, self.catalog)]
        with self.lock:
            self.tracked.extend(made)
            self.lags.append(min(created.values()) - arrival.t)

    def done(self) -> bool:
        return not self.is_alive() and all(f.done() for f in self.futures)

    def stop(self) -> None:
        self._halt.set()
        self.join()
        self.pool.shutdown(wait=True)


def run_streamed(args: argparse.Namespace, say: Say) -> int:
    spec = StreamSpec(nodes=args.nodes, gpus_per_node=args.gpus_per_node, seed=args.seed,
                      duration=args.duration, arrival_rate=args.arrival_rate,
                      single_fraction=args.single_fraction, runtime_min=args.runtime_min,
                      runtime_max=args.runtime_max,
                      min_gang=args.min_gang or StreamSpec.min_gang,
                      max_gang=args.max_gang or StreamSpec.max_gang)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in modes:
        parse_mode(m)
    catalog = packaged_catalog()
    arrivals = schedule(spec)
    config = configuration(spec, arrivals)
    print("configuration: " + ", ".join(f"{k}={v}" for k, v in config.items()), flush=True)
    results: list[tuple[StreamFigures, list[str]]] = []
    for label in modes:
        with mode_sandbox(label, nodes=spec.nodes, gpus_per_node=spec.gpus_per_node,
                          workdir=args.workdir) as box:
            results.append(observe_stream(box, label, arrivals, spec, catalog=catalog,
                                          options=args, say=say))
    figures = [f for f, _ in results]
    print()
    print(figures_table(figures))
    compared = ratios(figures)
    if compared:
        print("\nMuster / upstream gang plugin, same run (time: lower is better; started, "
              "utilisation: higher is better):")
        print(ratios_table(compared))
    for f, notes in results:
        for note in notes:
            print(f"  {f.mode}: {note}")
    if args.json:
        Path(args.json).write_text(json.dumps(_finite(
            {"configuration": config, "poll_s": args.poll, "drain_s": args.drain,
             "results": [{**asdict(f), "notes": n} for f, n in results],
             "ratios_vs_gang": compared}), indent=2) + "\n")
    return 0


def observe_stream(box: Sandbox, label: str, arrivals: list[Arrival], spec: StreamSpec, *,
                   catalog: Catalog, options: argparse.Namespace,
                   say: Say) -> tuple[StreamFigures, list[str]]:
    mode = box.spec.mode
    began = time.monotonic()
    box.up()
    up_s = time.monotonic() - began
    conn = box.connection()
    conn.timeout = 60.0
    conn.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}})
    say(f"[{label}] sandbox up in {up_s:.1f} s; {len(arrivals)} arrivals over "
        f"{spec.duration:.0f} s, then up to {options.drain:.0f} s for the last to start")
    watcher = box.connection()
    watcher.timeout = 60.0
    t0 = time.monotonic()
    poller = Poller(watcher, t0, options.poll, selector=LIVE)
    launcher = Launcher(box, arrivals, catalog, t0=t0, workers=options.creators,
                        workload_api=mode is SchedulerMode.GANG)
    poller.start()
    launcher.start()
    try:
        _wait(poller, launcher, spec, drain=options.drain, say=say, label=label)
    finally:
        launcher.stop()
        poller.stop()
    polls = live_polls(poller)
    figures = measure(label, polls, launcher.tracked, capacity=spec.capacity,
                      window=spec.duration)
    finished = conn.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods",
                            query={"fieldSelector": "status.phase=Succeeded"})
    notes = [f"sandbox up {up_s:.0f} s; observed {polls[-1].t:.0f} s; "
             f"{len(finished.get('items', []))} pods Succeeded by the end",
             f"poll took {poller.mean_poll_ms():.0f} ms on average"
             + (f", {poller.errors} polls failed" if poller.errors else ""),
             f"first pod created after its arrival time: max {max(launcher.lags, default=0):.1f}"
             " s (the bench's own lag; time-to-start counts from the pod, not the arrival)"]
    notes += [f"creation failed: {e}" for e in launcher.errors]
    if mode is SchedulerMode.MUSTER:
        notes += muster_notes(box)
    return figures, notes


def _wait(poller: Poller, launcher: Launcher, spec: StreamSpec, *, drain: float,
          say: Say, label: str) -> None:
    """Until every arrival is created and, after the window, every gang and single has
    started, or ``drain`` seconds after the window."""
    last_report = -math.inf
    while True:
        time.sleep(max(poller.interval, 1.0))
        polls = live_polls(poller)
        if not polls:
            continue
        now = polls[-1].t
        if now - last_report >= 15:
            say(f"[{label}]   t={now:5.0f} s  live pods {len(polls[-1].live)}  "
                f"workloads created {len(launcher.lags)}/{len(launcher.arrivals)}")
            last_report = now
        if now < spec.duration or not launcher.done():
            continue
        if now >= spec.duration + drain:
            return
        with launcher.lock:
            tracked = list(launcher.tracked)
        if all(t is not None for t in start_times(polls, tracked).values()):
            return


def _cell(value: float | None, fmt: str = "{:.1f}") -> str:
    if value is None:
        return "-"
    return "never" if math.isinf(value) else fmt.format(value)


def figures_table(figures: list[StreamFigures]) -> str:
    rows = [["mode", "gangs", "started", "not started", "tts p50 s", "tts p95 s", "tts max s",
             "partial seen", "partial max s", "partial GPU-s", "GPU util", "util whole",
             "single p50 s", "single p95 s"]]
    for f in figures:
        rows.append([f.mode, str(f.gangs), str(f.started), str(f.not_started),
                     _cell(f.tts_p50), _cell(f.tts_p95), _cell(f.tts_max),
                     str(f.partial_seen), f"{f.partial_max_s:.1f}", f"{f.partial_gpu_s:.0f}",
                     f"{f.util:.1%}", f"{f.util_whole:.1%}",
                     _cell(f.single_p50), _cell(f.single_p95)])
    return text_table(rows)


def ratios_table(compared: dict[str, dict[str, float | None]]) -> str:
    rows = [["mode / gang", *(name for name, _ in COMPARED)]]
    for mode, values in compared.items():
        rows.append([mode, *(_cell(values[name], "x{:.2f}") for name, _ in COMPARED)])
    return text_table(rows)


def _finite(value: Any) -> Any:
    """JSON without Infinity: a gang that never started has a null time-to-start."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
