"""What the burst peer bench says beyond its table: ratios against the upstream plugin and
kube-scheduler alone from the same run, Muster's verb latencies, and the CPU hog.

* :func:`ratios`: per Muster mode, settle time over the upstream plugin's (target <= 1.0),
  gangs whole against the plugin's, partial gangs at the end, and pods/s as a share of
  kube-scheduler alone (target >= 50%); with ``--hog``, each mode's slowdown under the hog
  (settle with it over settle without) and Muster's slowdown over the plugin's (target <= 1).
  With ``--repeat N``, :func:`ratios` of each round and :func:`repeated_ratios`, the median
  of each ratio over the rounds.
* :func:`verb_latency`: p50/p99 of filter and bind from Muster's ``muster_request_seconds``
  histogram, interpolated within buckets as Prometheus's ``histogram_quantile`` does (so a
  figure is as fine as the buckets: 0.5, 1, 2, 5, 10 ms...).
* :func:`api_latency`: as the API server measures them, p50/p99 of a pod's creation and of
  each mutating webhook's call during it (``apiserver_request_duration_seconds``,
  ``apiserver_admission_webhook_admission_duration_seconds``): what gating costs the pods'
  creators.
* :func:`claims_never_made`: unbound pods whose claims were never made from their
  templates, which kube-scheduler therefore never tried: a zero with a cause.
* :class:`CpuHog`: a bounded busy process pinned to one core for a mode's measured window
  (it exits by itself after ``limit`` seconds even if the bench dies).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

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


def _musters(results: Sequence[Figures],
             ) -> Iterable[tuple[Figures, str, Figures | None, Figures | None]]:
    """Each Muster mode's figures with its label without the hog suffix, and the upstream
    plugin's and kube-scheduler alone's figures under the same condition."""
    by = {r.mode: r for r in results}
    for r in results:
        base = r.mode.removesuffix(HOG)
        if base.startswith("muster"):
            suffix = HOG if r.mode.endswith(HOG) else ""
            yield r, base, by.get(UPSTREAM + suffix), by.get(ALONE + suffix)


def ratios(results: Sequence[Figures]) -> list[str]:
    """Lines comparing each Muster mode with the upstream plugin and kube-scheduler alone of
    the same run (and of the same hog condition); a hog line per mode run both ways."""
    by = {r.mode: r for r in results}
    lines: list[str] = []
    for r, _base, upstream, alone in _musters(results):
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


ROUND = " #"
"""Between a mode's label and its round number, with ``--repeat``."""


def rounds(results: Sequence[Figures]) -> list[list[Figures]]:
    """Results labelled ``MODE #K`` (``--repeat``) grouped by round K, each with its plain
    labels back, in round order; results without a round are one round."""
    grouped: dict[int, list[Figures]] = {}
    for r in results:
        label, _, number = r.mode.rpartition(ROUND)
        k = int(number) if label and number.isdigit() else 0
        plain = label if label and number.isdigit() else r.mode
        grouped.setdefault(k, []).append(Figures(plain, r.settle_s, r.pods_per_s,
                                                 r.gangs_complete, r.partial_end))
    return [grouped[k] for k in sorted(grouped)]


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def repeated_ratios(results: Sequence[Figures]) -> list[str]:
    """With several rounds, per Muster mode: the median over rounds of its settle over the
    upstream plugin's of the same round, of its pods/s as a share of kube-scheduler alone's,
    and of its hog slowdown over the plugin's, each with every round's figure. Rounds run
    one after another, all modes in each, so a ratio compares runs minutes apart on the same
    machine: the machine's drift over the whole invocation cancels out of each pair."""
    grouped = rounds(results)
    if len(grouped) < 2:
        return []
    settle: dict[str, list[float]] = {}
    share: dict[str, list[float]] = {}
    slowdown: dict[str, list[float]] = {}
    for one in grouped:
        by = {r.mode: r for r in one}
        for r, base, upstream, alone in _musters(one):
            if upstream is not None and upstream.settle_s > 0:
                settle.setdefault(r.mode, []).append(r.settle_s / upstream.settle_s)
            if alone is not None and alone.pods_per_s > 0:
                share.setdefault(r.mode, []).append(100 * r.pods_per_s / alone.pods_per_s)
            plain, hogged = by.get(base), by.get(base + HOG)
            gang, gang_hog = by.get(UPSTREAM), by.get(UPSTREAM + HOG)
            if (r.mode == base and plain is not None and hogged is not None and gang is not None
                    and gang_hog is not None and plain.settle_s > 0 and gang.settle_s > 0
                    and gang_hog.settle_s > 0):
                slowdown.setdefault(base, []).append(
                    (hogged.settle_s / plain.settle_s) / (gang_hog.settle_s / gang.settle_s))
    lines = []
    for mode, values in settle.items():
        lines.append(f"{mode}: settle over the upstream plugin's, median of {len(values)} "
                     f"rounds x{_median(values):.2f} (target <= 1.0; rounds "
                     + ", ".join(f"x{v:.2f}" for v in values) + ")")
    for mode, values in share.items():
        lines.append(f"{mode}: pods/s as a share of kube-scheduler alone's, median "
                     f"{_median(values):.0f}% (target >= 50%; rounds "
                     + ", ".join(f"{v:.0f}%" for v in values) + ")")
    for mode, values in slowdown.items():
        lines.append(f"{mode}: hog slowdown over the upstream plugin's, median "
                     f"x{_median(values):.2f} (target <= 1.0; rounds "
                     + ", ".join(f"x{v:.2f}" for v in values) + ")")
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


Latency = tuple[int, float | None, float | None]
"""(observations, p50 s, p99 s)."""


def _histograms(metrics_text: str, family_name: str, key: Callable[[Mapping[str, str]], str | None],
                ) -> dict[str, Latency]:
    """Each series of a histogram family, summed over series that ``key`` maps to the same
    name (``None``: left out), as (count, p50, p99)."""
    buckets: dict[str, dict[float, float]] = {}
    for family in text_string_to_metric_families(metrics_text):
        if family.name != family_name:
            continue
        for sample in family.samples:
            name = key(sample.labels) if sample.name.endswith("_bucket") else None
            if name is not None:
                le = float(sample.labels["le"])
                series = buckets.setdefault(name, {})
                series[le] = series.get(le, 0.0) + sample.value
    out: dict[str, Latency] = {}
    for name, series in buckets.items():
        pairs = sorted(series.items())
        count = int(max((c for _, c in pairs), default=0))
        out[name] = (count, quantile(0.5, pairs), quantile(0.99, pairs))
    return out


def verb_latency(metrics_text: str, verbs: Sequence[str] = ("filter", "bind", "admission"),
                 ) -> dict[str, Latency]:
    """Verb -> (requests, p50 s, p99 s) from Muster's /metrics text."""
    found = _histograms(metrics_text, "muster_request_seconds",
                        lambda labels: labels.get("verb") if labels.get("verb") in verbs
                        else None)
    return {verb: found.get(verb, (0, None, None)) for verb in verbs}


def api_latency(metrics_text: str) -> dict[str, Latency]:
    """From the API server's /metrics: ``pod create`` (POST of pods, every scope) and
    ``webhook NAME`` (each mutating webhook called on a pod's creation)."""
    def create(labels: Mapping[str, str]) -> str | None:
        return ("pod create" if labels.get("verb") == "POST"
                and labels.get("resource") == "pods" and not labels.get("subresource")
                else None)

    def webhook(labels: Mapping[str, str]) -> str | None:
        return (f"webhook {labels.get('name')}" if labels.get("type") == "admit"
                and labels.get("operation") == "CREATE" else None)
    return {**_histograms(metrics_text, "apiserver_request_duration_seconds", create),
            **_histograms(metrics_text, "apiserver_admission_webhook_admission_duration_seconds",
                          webhook)}


def _by_request(metrics_text: str, family_name: str, suffix: str, skip: tuple[str, ...],
                top: int) -> list[tuple[str, float]]:
    """One of the API server's families summed by verb and resource (``POST pods/binding``),
    the verbs in ``skip`` left out, the ``top`` largest first."""
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        if family.name != family_name:
            continue
        for sample in family.samples:
            labels = sample.labels
            if not sample.name.endswith(suffix) or labels.get("verb") in skip:
                continue
            what = "/".join(x for x in (labels.get("resource"), labels.get("subresource")) if x)
            key = f"{labels.get('verb')} {what}"
            totals[key] = totals.get(key, 0.0) + sample.value
    return sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:top]


def api_requests(metrics_text: str, *, top: int = 8) -> str:
    """The API server's requests by verb and resource (``apiserver_request_total``), the
    ``top`` most frequent, watches and reads of its own left out: who made it work."""
    ranked = _by_request(metrics_text, "apiserver_request", "_total", ("WATCH", "LIST"), top)
    return ", ".join(f"{key} {int(n)}" for key, n in ranked)


def api_time(metrics_text: str, *, top: int = 8) -> str:
    """The API server's time serving requests by verb and resource (the sum of
    ``apiserver_request_duration_seconds``, reads included, watches left out as they last
    as long as their clients), the ``top`` most costly: where a slow API server's time went."""
    ranked = _by_request(metrics_text, "apiserver_request_duration_seconds", "_sum",
                         ("WATCH", "CONNECT"), top)
    return ", ".join(f"{key} {s:.1f}" for key, s in ranked)


def event_reasons(events: Sequence[Mapping[str, Any]], *, top: int = 10) -> str:
    """The Events in the bench's namespace by who wrote them and why, the ``top`` most
    frequent: which writes the API server served for whom (``muster GangWaiting 120``)."""
    counts: dict[str, int] = {}
    for event in events:
        source = event.get("source") or {}
        who = (event.get("reportingComponent") or event.get("reportingController")
               or source.get("component") or "?")
        key = f"{who} {event.get('reason') or '?'}"
        counts[key] = counts.get(key, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return ", ".join(f"{key} {n}" for key, n in ranked)


def claims_never_made(pods: Sequence[Mapping[str, Any]]) -> str | None:
    """A note on the unbound pods that take a claim from a template with no claim made for it
    yet (its entry missing from ``status.resourceClaimStatuses``): kube-scheduler keeps such a
    pod out of its queue (DynamicResources' PreEnqueue), so none of them was ever tried.
    ``None`` when there is none. kube-controller-manager's resourceclaim-controller makes the
    claims; its log says why it did not."""
    waiting = in_groups = 0
    for pod in pods:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        if spec.get("nodeName"):
            continue
        made = {s.get("name") for s in status.get("resourceClaimStatuses") or []}
        if any(c.get("resourceClaimTemplateName") and c.get("name") not in made
               for c in spec.get("resourceClaims") or []):
            waiting += 1
            in_groups += bool((spec.get("schedulingGroup") or {}).get("podGroupName"))
    if not waiting:
        return None
    return (f"NOT TRIED: {waiting} pods ({in_groups} in a PodGroup) have no ResourceClaim made "
            "from their template, so kube-scheduler never tried them; see why in "
            "kube-controller-manager.log")


def latency_note(latency: Mapping[str, Latency]) -> str:
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
