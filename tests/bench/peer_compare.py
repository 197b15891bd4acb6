"""What the burst peer bench says beyond its table: ratios against the upstream plugin and
kube-scheduler alone from the same run, Muster's verb latencies, and the CPU hog.

* :func:`ratios`: per Muster mode, settle time over the upstream plugin's (target <= 1.0),
  gangs whole against the plugin's, partial gangs at the end, and pods/s as a share of
  kube-scheduler alone (target >= 50%); with ``--hog``, each mode's slowdown under the hog
  (settle with it over settle without) and Muster's slowdown over the plugin's (target <= 1).
* :func:`verb_latency`: p50/p99 of filter and bind from Muster's ``muster_request_seconds``
  histogram, interpolated within buckets as Prometheus's ``histogram_quantile`` does (so a
  figure is as fine as the buckets: 0.5, 1, 2, 5, 10 ms...).
* :class:`CpuHog`: a bounded busy process pinned to one core for a mode's measured window
  (it exits by itself after ``limit`` seconds even if the bench dies).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType

from prometheus_client.parser import text_string_to_metric_families

UPSTREAM = "gang"
ALONE = "default"
HOG = " (hog)"
"""Suffix of a mode's label in its run under the CPU hog."""


@dataclass(frozen=True)
class Figures:
    """The few figures of one mode's run the ratios read."""

    mode: str
    settle_s: float
    pods_per_s: float
    gangs_complete: int
    partial_end: int


def _ratio(a: float, b: float) -> str:
    return f"x{a / b:.2f}" if b > 0 else "n/a"


def ratios(results: Sequence[Figures]) -> list[str]:
    """Lines comparing each Muster mode with the upstream plugin and kube-scheduler alone of
    the same run (and of the same hog condition); a hog line per mode run both ways."""
    by = {r.mode: r for r in results}
    lines: list[str] = []
    for r in results:
        base = r.mode.removesuffix(HOG)
        if not base.startswith("muster"):
            continue
        suffix = HOG if r.mode.endswith(HOG) else ""
        upstream, alone = by.get(UPSTREAM + suffix), by.get(ALONE + suffix)
        parts = []
        if upstream is not None:
            parts.append(f"settle {_ratio(r.settle_s, upstream.settle_s)} of the upstream "
                         "plugin's (target <= 1.0)")
            parts.append(f"gangs whole {r.gangs_complete} to its {upstream.gangs_complete}")
        parts.append(f"partial at the end {r.partial_end}")
        if alone is not None and alone.pods_per_s > 0:
            parts.append(f"pods/s {100 * r.pods_per_s / alone.pods_per_s:.0f}% of "
                         "kube-scheduler alone (target >= 50%)")
        lines.append(f"{r.mode}: " + ", ".join(parts))
    slow = {base: by[base + HOG].settle_s / by[base].settle_s
            for base in (m for m in by if not m.endswith(HOG))
            if base + HOG in by and by[base].settle_s > 0}
    for base, factor in slow.items():
        line = f"{base}: under the CPU hog settle is x{factor:.2f} of its own without it"
        if base.startswith("muster") and UPSTREAM in slow and slow[UPSTREAM] > 0:
            line += (f"; that slowdown is x{factor / slow[UPSTREAM]:.2f} of the upstream "
                     "plugin's (target <= 1.0)")
        lines.append(line)
    return lines


def quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float | None:
    """The ``q`` quantile of a cumulative histogram given as (upper bound, count) pairs, by
    linear interpolation within the bucket it falls in (``histogram_quantile``); ``None``
    with no observations. A quantile in the ``+Inf`` bucket is the highest finite bound."""
    ordered = sorted(buckets)
    if not ordered or ordered[-1][1] <= 0:
        return None
    total = ordered[-1][1]
    rank = q * total
    lower, below = 0.0, 0.0
    for bound, count in ordered:
        if count >= rank:
            if bound == float("inf"):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


def verb_latency(metrics_text: str, verbs: Sequence[str] = ("filter", "bind"),
                 ) -> dict[str, tuple[int, float | None, float | None]]:
    """Verb -> (requests, p50 s, p99 s) from Muster's /metrics text."""
    buckets: dict[str, list[tuple[float, float]]] = {}
    for family in text_string_to_metric_families(metrics_text):
        if family.name != "muster_request_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket") and sample.labels.get("verb") in verbs:
                buckets.setdefault(sample.labels["verb"], []).append(
                    (float(sample.labels["le"]), sample.value))
    out: dict[str, tuple[int, float | None, float | None]] = {}
    for verb in verbs:
        found = buckets.get(verb, [])
        count = int(max((c for _, c in found), default=0))
        out[verb] = (count, quantile(0.5, found), quantile(0.99, found))
    return out


def latency_note(latency: Mapping[str, tuple[int, float | None, float | None]]) -> str:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1000:.1f} ms"
    return "; ".join(f"{verb} n={n} p50={ms(p50)} p99={ms(p99)}"
                     for verb, (n, p50, p99) in latency.items())


class CpuHog:
    """A busy Python process pinned to CPU 0 while the ``with`` block runs, and never longer
    than ``limit`` seconds (it checks the clock itself)."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> CpuHog:
        code = (f"import time\nend = time.monotonic() + {self.limit!r}\n"
                "while time.monotonic() < end:\n    pass\n")
        self._proc = subprocess.Popen([sys.executable, "-c", code])
        if hasattr(os, "sched_setaffinity") and os.cpu_count():
            os.sched_setaffinity(self._proc.pid, {0})
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
