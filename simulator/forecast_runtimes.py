"""How long each workload has left to run, from what its owner wrote on it.

Pure: no clock (``now`` is a parameter) and no I/O. The forecast (:mod:`simulator.forecast`)
ends each running workload at ``now + remaining``; where nothing is written the runtime is
*unknown*, and says so, never a guess.

What is read:

- the annotation ``muster.dev/expected-runtime`` on the workload object: a Go duration
  (``2h30m``, ``45m``, ``90s``) or a bare number of seconds, counted from when the workload's
  pods started (the earliest ``status.startTime`` of its pods; none started: it has not begun);
- ``activeDeadlineSeconds``, an upper bound the cluster enforces, counted from the workload's
  own ``status.startTime`` (else its ``creationTimestamp``): ``spec.activeDeadlineSeconds``
  (Job, RayJob), ``spec.runPolicy.activeDeadlineSeconds`` (PyTorchJob, TFJob, MPIJob and the
  other Kubeflow kinds), and for a JobSet the child Jobs' ``template.spec.activeDeadlineSeconds``
  when every replicated Job has one and ``failurePolicy.maxRestarts`` allows no restart (the
  largest bounds the JobSet; a restart would begin the clock again).

The remaining runtime is the smaller of the two that are written, never below zero. A
workload that ran past its annotation while no deadline bounds it is *overdue*: when it ends
is not known.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from extender.core.model.objects import timestamp

EXPECTED_RUNTIME = "muster.dev/expected-runtime"

DurationParser = Callable[[str], float]
"""Seconds of a Go duration or a bare number of seconds; raises ``ValueError`` on anything
else (the callers pass the one parser, ``extender.core.model.durations.parse_seconds``)."""


class RuntimeSource(StrEnum):
    ANNOTATION = "annotation"
    """``muster.dev/expected-runtime`` (bounded by a deadline when one is shorter)."""
    DEADLINE = "deadline"
    """Only ``activeDeadlineSeconds``: the latest it can end, used as its end."""
    UNKNOWN = "unknown"
    """Nothing is written, or what is written cannot be read."""
    OVERDUE = "overdue"
    """It ran past its expected runtime and no deadline bounds it."""


@dataclass(frozen=True, slots=True)
class Runtime:
    """A workload's remaining runtime as far as what is written on it tells."""

    source: RuntimeSource
    remaining: float | None
    """Seconds from ``now``; ``None`` when unknown or overdue."""
    reason: str = ""
    """Why it is unknown or overdue, for people."""

    @property
    def known(self) -> bool:
        return self.remaining is not None


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _seconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value >= 0 and math.isfinite(value) else None


def active_deadline(obj: Mapping[str, Any]) -> float | None:
    """The ``activeDeadlineSeconds`` that bounds the whole workload, when its kind has one."""
    spec = _mapping(obj.get("spec"))
    own = _seconds(spec.get("activeDeadlineSeconds"))
    if own is not None:
        return own
    run_policy = _seconds(_mapping(spec.get("runPolicy")).get("activeDeadlineSeconds"))
    if run_policy is not None:
        return run_policy
    if obj.get("kind") != "JobSet":
        return None
    restarts = _mapping(spec.get("failurePolicy")).get("maxRestarts")
    if isinstance(restarts, int) and restarts > 0:
        return None
    jobs = spec.get("replicatedJobs")
    if not isinstance(jobs, list) or not jobs:
        return None
    found = [_seconds(_mapping(_mapping(_mapping(job).get("template")).get("spec"))
                      .get("activeDeadlineSeconds")) for job in jobs]
    known = [s for s in found if s is not None]
    return max(known) if len(known) == len(found) else None


def started_at(obj: Mapping[str, Any]) -> float:
    """When the deadline's clock started: ``status.startTime``, else the creation (epoch
    seconds; 0.0 when neither is written)."""
    start = timestamp(_mapping(obj.get("status")).get("startTime"))
    return start or timestamp(_mapping(obj.get("metadata")).get("creationTimestamp"))


def pods_started_at(pods: Iterable[Mapping[str, Any]]) -> float | None:
    """The earliest ``status.startTime`` of ``pods`` (epoch seconds); ``None``: none started."""
    starts = [timestamp(_mapping(p.get("status")).get("startTime")) for p in pods]
    known = [s for s in starts if s > 0]
    return min(known) if known else None


def remaining_runtime(obj: Mapping[str, Any], *, pods_started: float | None, now: float,
                      parse_duration: DurationParser) -> Runtime:
    """The remaining runtime of workload ``obj`` at ``now`` (epoch seconds), its pods having
    started at ``pods_started`` (``None``: not yet)."""
    deadline = active_deadline(obj)
    deadline_left = None
    if deadline is not None:
        start = started_at(obj)
        elapsed = max(0.0, now - start) if start > 0 else 0.0
        deadline_left = max(0.0, deadline - elapsed)
    annotations = _mapping(_mapping(obj.get("metadata")).get("annotations"))
    written = annotations.get(EXPECTED_RUNTIME)
    expected = None
    unreadable = ""
    if isinstance(written, str):
        try:
            expected = parse_duration(written)
        except ValueError:
            unreadable = f"{EXPECTED_RUNTIME} {written!r} is not a duration"
        else:
            if not math.isfinite(expected) or expected < 0:
                expected, unreadable = None, f"{EXPECTED_RUNTIME} {written!r} is negative"
    if expected is not None:
        ran = max(0.0, now - pods_started) if pods_started is not None else 0.0
        left = expected - ran
        if left >= 0:
            best = left if deadline_left is None else min(left, deadline_left)
            return Runtime(RuntimeSource.ANNOTATION, best)
        if deadline_left is None:
            return Runtime(RuntimeSource.OVERDUE, None,
                           f"ran {ran:.0f}s, past its {EXPECTED_RUNTIME} of {expected:.0f}s")
    if deadline_left is not None:
        return Runtime(RuntimeSource.DEADLINE, deadline_left)
    return Runtime(RuntimeSource.UNKNOWN, None,
                   unreadable or f"no {EXPECTED_RUNTIME} annotation and no activeDeadlineSeconds")
