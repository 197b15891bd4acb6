"""The streamed peer benchmark's pure half: the seeded arrival schedule, and the figures a
sequence of polls gives (time-to-start per gang, GPU utilisation over a window, partial gangs).

No I/O, no clock, no threads: the schedule is a function of its :class:`StreamSpec`, the
figures a function of the polls and of when each gang's first pod was created.
``peer_stream_run`` drives one sandbox per mode with them (``bench_peers.py --streamed``).

The stream is batch work: JobSets (the burst mix's shapes, one gang each) and bare pods, all
``restartPolicy: Never`` and annotated with their runtime. The burst's LeaderWorkerSets are left
out: an LWS group is a StatefulSet's pods (``restartPolicy: Always``), which serve until
deleted and which KWOK's finish Stage rightly never ends.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# KWOK's ``muster-pod-finish`` Stage (manifests/sandbox/kwok/pods.yaml) makes a pod with this
# annotation and a restartPolicy of Never or OnFailure Succeed that long after it is Ready.
from extender.sandbox.components import RUNTIME_ANNOTATION
from tests.bench.bench_peers import GPU, make_jobset, make_single, pod_gpus


# -- the schedule ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class StreamSpec:
    nodes: int = 48
    gpus_per_node: int = 8
    seed: int = 7
    duration: float = 150.0
    """Seconds over which workloads arrive; also the window utilisation is measured over."""
    arrival_rate: float = 40.0
    """Workloads (gangs and singles together) per minute: a Poisson process."""
    single_fraction: float = 0.4
    """The share of arrivals that are one bare pod of 1 or 2 GPUs, not a gang."""
    runtime_min: int = 20
    """Seconds a workload's pods run once Ready, drawn uniformly from min..max per workload."""
    runtime_max: int = 60
    min_gang: int = 2
    max_gang: int = 8

    def __post_init__(self) -> None:
        if self.duration <= 0 or self.arrival_rate <= 0:
            raise ValueError("duration and arrival rate must be positive")
        if not 0.0 <= self.single_fraction <= 1.0:
            raise ValueError("single fraction must be within 0..1")
        if not 1 <= self.runtime_min <= self.runtime_max:
            raise ValueError("runtimes must satisfy 1 <= min <= max")
        if not 2 <= self.min_gang <= self.max_gang:  # a leader and at least one worker
            raise ValueError("gang sizes must satisfy 2 <= min <= max")

    @property
    def capacity(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True)
class Arrival:
    t: float
    """Seconds after the stream starts at which the workload's controller starts on it."""
    name: str
    obj: dict[str, Any]
    runtime_s: int
    pods: int
    gpus: int

    @property
    def single(self) -> bool:
        return bool(self.obj["kind"] == "Pod")


def arrival_times(rate_per_minute: float, duration: float, rng: random.Random) -> list[float]:
    """A Poisson process on ``[0, duration)``: exponential gaps of mean ``60 / rate``."""
    times: list[float] = []
    t = rng.expovariate(rate_per_minute / 60.0)
    while t < duration:
        times.append(t)
        t += rng.expovariate(rate_per_minute / 60.0)
    return times


def schedule(spec: StreamSpec) -> list[Arrival]:
    """The arrivals in time order. Times, shapes and runtimes come from three generators seeded
    from ``spec.seed``, so the n-th workload is the same whatever the rate or duration."""
    times = arrival_times(spec.arrival_rate, spec.duration, random.Random(f"{spec.seed}:times"))
    shapes = random.Random(f"{spec.seed}:shapes")
    runtimes = random.Random(f"{spec.seed}:runtimes")
    arrivals = []
    for index, t in enumerate(times):
        runtime = runtimes.randint(spec.runtime_min, spec.runtime_max)
        if shapes.random() < spec.single_fraction:
            name = f"single-{index}"
            obj = make_single(name, shapes)
            obj["spec"]["restartPolicy"] = "Never"  # a batch pod: KWOK finishes only these
            obj["metadata"]["annotations"] = {RUNTIME_ANNOTATION: f"{runtime}s"}
        else:
            name = f"train-{index}"
            obj = make_jobset(name, shapes, shapes.randint(spec.min_gang, spec.max_gang))
            for rj in obj["spec"]["replicatedJobs"]:
                template = rj["template"]["spec"]["template"]
                template.setdefault("metadata", {})["annotations"] = {
                    RUNTIME_ANNOTATION: f"{runtime}s"}
        pods, gpus = demand(obj)
        arrivals.append(Arrival(t=t, name=name, obj=obj, runtime_s=runtime, pods=pods,
                                gpus=gpus))
    return arrivals


def demand(obj: Mapping[str, Any]) -> tuple[int, int]:
    """``(pods, GPUs)`` of a bare pod or of a JobSet as :func:`make_jobset` writes it."""
    if obj["kind"] == "Pod":
        return 1, pod_gpus(dict(obj))
    pods = gpus = 0
    for rj in obj["spec"]["replicatedJobs"]:
        job = rj["template"]["spec"]
        count = int(rj.get("replicas", 1)) * int(job.get("parallelism", 1))
        per = sum(int(c["resources"]["limits"].get(GPU, 0))
                  for c in job["template"]["spec"]["containers"])
        pods += count
        gpus += count * per
    return pods, gpus


def configuration(spec: StreamSpec, arrivals: Sequence[Arrival]) -> dict[str, Any]:
    """What the schedule asks for, and its offered load: the GPU-seconds its workloads would
    hold if each started at once, over the capacity's GPU-seconds in the window."""
    gangs = [a for a in arrivals if not a.single]
    singles = [a for a in arrivals if a.single]
    offered = sum(a.gpus * a.runtime_s for a in arrivals) / (spec.capacity * spec.duration)
    return {
        "seed": spec.seed, "nodes": spec.nodes, "gpus_per_node": spec.gpus_per_node,
        "gpu_capacity": spec.capacity, "duration_s": spec.duration,
        "arrival_rate_per_min": spec.arrival_rate, "arrivals": len(arrivals),
        "gangs": len(gangs), "singles": len(singles),
        "gang_pods": f"{min(a.pods for a in gangs)}..{max(a.pods for a in gangs)}"
        if gangs else "-",
        "gang_gpus": f"{min(a.gpus for a in gangs)}..{max(a.gpus for a in gangs)}"
        if gangs else "-",
        "pods": sum(a.pods for a in arrivals), "gpus_demanded": sum(a.gpus for a in arrivals),
        "runtime_s": f"{spec.runtime_min}..{spec.runtime_max}",
        "offered_load": round(offered, 2),
    }


# -- the figures ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Poll:
    t: float
    """Seconds after the stream started, when the listing was asked for."""
    live: frozenset[str]
    """Pods bound to a node and not finished (not Succeeded or Failed): they hold GPUs."""


@dataclass(frozen=True)
class Tracked:
    """One gang (or single pod) of the stream, as the figures need it."""

    key: str
    created: float
    """When its first pod was created, seconds after the stream started."""
    min_member: int
    gpus_per_pod: dict[str, int]
    single: bool = False


@dataclass
class StreamFigures:
    mode: str
    gangs: int
    started: int
    """Gangs whose minimum was live at once in some poll: started whole."""
    not_started: int
    tts_p50: float | None
    """Time-to-start percentiles over every gang that arrived, a gang not started counted
    as infinite (nearest rank); None when no gang arrived."""
    tts_p95: float | None
    tts_max: float | None
    singles: int
    single_p50: float | None
    single_p95: float | None
    partial_seen: int
    """Gangs some poll saw with some but fewer than their minimum live, before they started."""
    partial_max_s: float
    """The longest any gang spent partial (summed over polls)."""
    partial_gpu_s: float
    """GPU-seconds held by gangs not started (partial), within the window."""
    util: float
    """Bound GPU-seconds over capacity GPU-seconds, within the window."""
    util_whole: float
    """The same, less what partial gangs held: GPUs of started gangs and singles."""
    tts: dict[str, float | None] = field(default_factory=dict)
    """Time-to-start of each gang and single, None if it never started."""


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q``-th percentile (``inf`` sorts last); None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]


def start_times(polls: Sequence[Poll], tracked: Sequence[Tracked]) -> dict[str, float | None]:
    """When each gang first had its minimum live at once (the poll's time); None: never."""
    owner = {pod: i for i, g in enumerate(tracked) for pod in g.gpus_per_pod}
    start: dict[str, float | None] = {g.key: None for g in tracked}
    for poll in polls:
        counts: dict[int, int] = {}
        for pod in poll.live:
            i = owner.get(pod)
            if i is not None:
                counts[i] = counts.get(i, 0) + 1
        for i, n in counts.items():
            g = tracked[i]
            if start[g.key] is None and n >= g.min_member:
                start[g.key] = poll.t
    return start


def measure(mode: str, polls: Sequence[Poll], tracked: Sequence[Tracked], *, capacity: int,
            window: float) -> StreamFigures:
    """The figures of one mode. Each poll's state holds until the next poll (the last one's
    until ``window``); before the first poll nothing is bound. Integrals stop at ``window``."""
    start = start_times(polls, tracked)
    owner = {pod: g for g in tracked for pod in g.gpus_per_pod}
    bound_gpu_s = partial_gpu_s = 0.0
    partial_time: dict[str, float] = {}
    for i, poll in enumerate(polls):
        end = polls[i + 1].t if i + 1 < len(polls) else max(window, poll.t)
        in_window = max(0.0, min(end, window) - poll.t)
        live: dict[str, int] = {}  # gang key -> GPUs of its live members
        for pod in poll.live:
            g = owner.get(pod)
            if g is not None:
                live[g.key] = live.get(g.key, 0) + g.gpus_per_pod[pod]
        for key, gpus in live.items():
            bound_gpu_s += gpus * in_window
            began = start[key]
            if began is None or poll.t < began:  # not yet whole: some but fewer than min
                partial_gpu_s += gpus * in_window
                partial_time[key] = partial_time.get(key, 0.0) + (end - poll.t)
    gangs = [g for g in tracked if not g.single]
    singles = [g for g in tracked if g.single]
    tts: dict[str, float | None] = {}
    for g in tracked:
        began = start[g.key]
        tts[g.key] = None if began is None else max(0.0, began - g.created)
    gang_waits = [_or_inf(tts[g.key]) for g in gangs]
    single_waits = [_or_inf(tts[g.key]) for g in singles]
    full = capacity * window
    return StreamFigures(
        mode=mode, gangs=len(gangs), started=sum(1 for g in gangs if start[g.key] is not None),
        not_started=sum(1 for g in gangs if start[g.key] is None),
        tts_p50=percentile(gang_waits, 50), tts_p95=percentile(gang_waits, 95),
        tts_max=max(gang_waits) if gang_waits else None,
        singles=len(singles), single_p50=percentile(single_waits, 50),
        single_p95=percentile(single_waits, 95),
        partial_seen=sum(1 for g in gangs if g.key in partial_time),
        partial_max_s=max((partial_time.get(g.key, 0.0) for g in gangs), default=0.0),
        partial_gpu_s=partial_gpu_s,
        util=bound_gpu_s / full if full else 0.0,
        util_whole=(bound_gpu_s - partial_gpu_s) / full if full else 0.0,
        tts=tts)


# -- comparing modes ------------------------------------------------------------------------------
#: Figures compared between Muster and the upstream plugin: (field, lower is better).
COMPARED = (("tts_p50", True), ("tts_p95", True), ("tts_max", True), ("started", False),
            ("partial_seen", True), ("util", False), ("util_whole", False))


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """``ours / theirs``; None unless both are finite and ``theirs`` is not 0."""
    if ours is None or theirs is None or not math.isfinite(ours) or not math.isfinite(theirs):
        return None
    if theirs == 0:
        return None
    return ours / theirs


def ratios(figures: Sequence[StreamFigures], *,
           base: str = "gang") -> dict[str, dict[str, float | None]]:
    """For each Muster mode (``muster``, ``muster+gates``, ``muster:N``), its figures over
    the ``base`` mode's in the same run; empty without a ``base`` mode."""
    theirs = next((f for f in figures if f.mode == base), None)
    if theirs is None:
        return {}
    out: dict[str, dict[str, float | None]] = {}
    for f in figures:
        if f.mode.startswith("muster"):
            out[f.mode] = {name: ratio(_number(f, name), _number(theirs, name))
                           for name, _ in COMPARED}
    return out


def _number(figures: StreamFigures, name: str) -> float | None:
    value = getattr(figures, name)
    return None if value is None else float(value)


def _or_inf(value: float | None) -> float:
    return math.inf if value is None else value


def text_table(rows: Sequence[Sequence[str]]) -> str:
    """Rows of cells, the first the header: the first column left-aligned, the rest right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.rjust(w) if i else cell.ljust(w)
                       for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
             for row in rows]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])
