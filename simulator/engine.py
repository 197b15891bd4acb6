"""A deterministic discrete-event engine: a virtual clock and a heap of events.

Events sit in a heap of ``(time, priority, seq, event)``. ``priority`` orders events due at the
same instant (lower first: capacity is freed before new work arrives), and ``seq``, a counter
of scheduling order, breaks the remaining ties, so two runs of the same input pop the same
events in the same order. The clock only moves forward, to the time of the event popped.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Generic, TypeVar

E = TypeVar("E")


class Priority(IntEnum):
    """Order of events due at the same instant."""

    FREE = 0
    """Pods finish and free capacity."""
    ARRIVE = 1
    """Workloads arrive and their controllers create pods."""
    RETRY = 2
    """Backoffs end, bind barriers time out, the unschedulable pool is flushed."""


class ClockError(ValueError):
    """An event scheduled before the current virtual time."""


@dataclass(frozen=True, slots=True)
class Scheduled(Generic[E]):
    time: float
    priority: int
    seq: int
    event: E


class EventQueue(Generic[E]):
    """The event heap and the virtual clock it drives."""

    def __init__(self, *, start: float = 0.0) -> None:
        self._heap: list[tuple[float, int, int, E]] = []
        self._seq = itertools.count()
        self.now = start
        """Virtual seconds; advanced only by :meth:`pop`."""

    def __len__(self) -> int:
        return len(self._heap)

    def schedule(self, time: float, event: E, *, priority: int = Priority.RETRY) -> int:
        """Add ``event`` at ``time`` (not in the past); returns its sequence number."""
        if time < self.now:
            raise ClockError(f"event at {time:g}s is before the clock ({self.now:g}s)")
        seq = next(self._seq)
        heapq.heappush(self._heap, (time, int(priority), seq, event))
        return seq

    def peek_time(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def pop(self) -> Scheduled[E]:
        time, priority, seq, event = heapq.heappop(self._heap)
        self.now = time
        return Scheduled(time, priority, seq, event)

    def pop_due(self) -> Iterator[Scheduled[E]]:
        """Every event due at the next instant, in order (events they add at that same
        instant are popped too), advancing the clock once."""
        if not self._heap:
            return
        instant = self._heap[0][0]
        while self._heap and self._heap[0][0] == instant:
            yield self.pop()
