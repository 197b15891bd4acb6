"""What a replay measured: gangs admitted or left partial, GPU utilisation, gang waits.

A gang is *admitted* when at least its minimum of members are bound at once. A gang is
*partial* when, at the end of a scheduling round (whenever the virtual clock is about to move),
it has some members bound but fewer than its minimum: those pods hold GPUs and cannot work.
Under Muster's barrier that never happens; under kube-scheduler alone it does when the cluster
is tight. GPU-hours held by partial gangs integrate the GPUs such gangs hold over time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from extender.core.gang.capacity import DEVICE
from extender.core.model.values import GangKey


class Waits(TypedDict):
    p50: float | None
    p95: float | None
    max: float | None


class GangCounts(TypedDict):
    total: int
    admitted: int
    partial: int
    waiting: int


class Report(TypedDict):
    """The JSON scripts read (``muster simulate SNAPSHOT -o json``)."""

    scheduler: str
    gangs: GangCounts
    oversubscribed_nodes: int
    gpu_utilization: float
    """Percent of cluster GPUs bound, averaged over time."""
    gpu_utilization_working: float
    """The same, leaving out GPUs held by partial gangs (bound, but their job cannot run)."""
    gpu_hours_partial: float
    gang_wait_seconds: Waits
    gangs_in_one_domain: int | None
    """Admitted gangs whose members at admission were all in one domain of the scenario's
    domain label (a rack); ``None`` when the scenario names no domain label."""
    pods: dict[str, int]
    end_seconds: float


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (``q`` in 0..100) of ``values``; ``None`` when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


@dataclass
class _Gang:
    minimum: int
    arrival: float
    bound: int = 0
    held: int = 0
    """GPU milli its bound members hold."""
    admitted_at: float | None = None
    was_partial: bool = False
    domains: set[str | None] = field(default_factory=set)
    """Domains its bound members were in, up to admission (``None``: a node without one)."""


@dataclass
class Metrics:
    total_gpu_milli: int
    gangs: dict[GangKey, _Gang] = field(default_factory=dict)
    oversubscribed: set[str] = field(default_factory=set)
    pods_created: int = 0
    pods_bound: int = 0
    pods_finished: int = 0
    _touched: set[GangKey] = field(default_factory=set)
    _partial: set[GangKey] = field(default_factory=set)
    _steps: list[tuple[float, int, int]] = field(default_factory=list)
    """``(seconds, GPU milli bound, GPU milli held by partial gangs)`` when either changed."""

    def gang_arrived(self, key: GangKey, *, minimum: int, now: float) -> None:
        self.gangs.setdefault(key, _Gang(minimum=minimum, arrival=now))

    def pod_bound(self, key: GangKey | None, gpu_milli: int, *, now: float,
                  domain: str | None = None) -> None:
        self.pods_bound += 1
        gang = None if key is None else self.gangs.get(key)
        if gang is None or key is None:
            return
        if gang.admitted_at is None:
            gang.domains.add(domain)
        gang.bound += 1
        gang.held += gpu_milli
        self._touched.add(key)
        if gang.admitted_at is None and gang.bound >= gang.minimum:
            gang.admitted_at = now

    def pod_freed(self, key: GangKey | None, gpu_milli: int) -> None:
        self.pods_finished += 1
        gang = None if key is None else self.gangs.get(key)
        if gang is None or key is None:
            return
        gang.bound -= 1
        gang.held -= gpu_milli
        self._touched.add(key)

    def end_round(self, now: float, *, used_gpu_milli: int) -> None:
        """The clock is about to leave ``now``: note who is partial and what is held."""
        for key in self._touched:
            gang = self.gangs[key]
            if 0 < gang.bound < gang.minimum:
                gang.was_partial = True
                self._partial.add(key)
            else:
                self._partial.discard(key)
        self._touched.clear()
        held = sum(self.gangs[k].held for k in self._partial)
        if not self._steps or self._steps[-1][1:] != (used_gpu_milli, held):
            if self._steps and self._steps[-1][0] == now:
                self._steps[-1] = (now, used_gpu_milli, held)
            else:
                self._steps.append((now, used_gpu_milli, held))

    @property
    def utilization(self) -> list[tuple[float, float]]:
        """``(seconds, percent of GPUs bound)`` from each round that changed it."""
        return [(t, self.percent(used)) for t, used, _ in self._steps]

    def _integrals(self, end: float) -> tuple[float, float]:
        """GPU milli-seconds bound, and held by partial gangs, over ``[0, end]``."""
        used_total = partial_total = 0.0
        for i, (t, used, held) in enumerate(self._steps):
            until = self._steps[i + 1][0] if i + 1 < len(self._steps) else end
            span = min(until, end) - t
            if span > 0:
                used_total += used * span
                partial_total += held * span
        return used_total, partial_total

    def percent(self, milli: int) -> float:
        return 100.0 * milli / self.total_gpu_milli if self.total_gpu_milli else 0.0

    def waits(self) -> list[float]:
        return sorted(g.admitted_at - g.arrival for g in self.gangs.values()
                      if g.admitted_at is not None)

    def report(self, scheduler: str, *, end: float, domains: bool = False) -> Report:
        waits = self.waits()
        used_ms, partial_ms = self._integrals(end)
        if end > 0:
            utilization = self.percent(round(used_ms / end))
            working = self.percent(round((used_ms - partial_ms) / end))
        else:  # everything happens at time zero: the state then is the answer
            last = self._steps[-1] if self._steps else (0.0, 0, 0)
            utilization, working = self.percent(last[1]), self.percent(last[1] - last[2])
        admitted = sum(1 for g in self.gangs.values() if g.admitted_at is not None)
        return Report(
            scheduler=scheduler,
            gangs=GangCounts(total=len(self.gangs), admitted=admitted,
                             partial=sum(1 for g in self.gangs.values() if g.was_partial),
                             waiting=len(self.gangs) - admitted),
            oversubscribed_nodes=len(self.oversubscribed),
            gpu_utilization=round(utilization, 3),
            gpu_utilization_working=round(working, 3),
            gpu_hours_partial=round(partial_ms / DEVICE / 3600.0, 3),
            gang_wait_seconds=Waits(p50=percentile(waits, 50), p95=percentile(waits, 95),
                                    max=waits[-1] if waits else None),
            gangs_in_one_domain=sum(
                1 for g in self.gangs.values() if g.admitted_at is not None
                and len(g.domains) == 1 and None not in g.domains) if domains else None,
            pods={"created": self.pods_created, "bound": self.pods_bound,
                  "finished": self.pods_finished},
            end_seconds=end,
        )
