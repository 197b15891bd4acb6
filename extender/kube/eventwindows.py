"""Which of Muster's Events to write, and when: at most one per object and reason per window.

Muster says each change of a gang's reason once (:mod:`extender.core.decide.narration`), but
a reason carries counts that change with the cluster, so a busy gang's message changes many
times a minute, and each change was a POST to the API server. Every Kubernetes component
passes its Events through client-go's ``EventCorrelator`` (``tools/record/events_cache.go``)
for the same reason. That one drops what its spam filter refuses (25 per object, then one per
5 minutes), so the newest news can be lost, and it rewrites a repeated Event with a PATCH
(count, lastTimestamp), a write as well. Here, per involved object:

- an Event of a reason the object was not told in its last window is written at once, and
  opens that reason's window (:data:`WINDOW` seconds): a change of state is never held back;
- within the window, what the object is told of that reason is held, the newest replacing
  the one held before (an identical repeat is folded into it: its ``count`` grows); when the
  window ends the held one is written, and opens the next window. A steady stream of changes
  is then one Event per window, the newest;
- an object holds at most one Event: a newer one, of any reason, supersedes it (written at
  once, or held in its place), so the Events of an object are written in the order they were
  said and its newest Event is always what Muster said last (``muster describe`` reads a
  gang's state from the newest Event on its workload);
- a held Event that says what the object's newest Event already says is not written again.

Held Events are lost when the process ends, as queued writes are.

Pure: time is ``now``; :class:`extender.kube.events.KubeEvents` holds the clock and writes.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from extender.state.ports import AnyEvent, PodEvent

WINDOW = 30.0
"""Seconds between two Events of one reason on one object (measured in
``tests/unit/kube/test_event_windows_bound_writes_per_object.py``)."""

Subject = tuple[str, str, str, str]
"""An involved object: kind, namespace, name, uid."""


def subject_of(event: AnyEvent) -> Subject:
    if isinstance(event, PodEvent):
        return ("Pod", event.pod.namespace, event.pod.name, event.pod.uid)
    return (event.kind, event.namespace, event.name, event.uid)


def _said(event: AnyEvent) -> tuple[str, str, str]:
    return (event.type.value, event.reason, event.message)


@dataclass(frozen=True, slots=True)
class Due:
    """An Event to write: the newest said, said ``count`` times from ``first`` to ``last``."""

    event: AnyEvent
    count: int
    first: float
    last: float


@dataclass(slots=True)
class _Object:
    ends: dict[str, float] = field(default_factory=dict)
    """Reason -> when its open window ends."""
    held: Due | None = None
    """The newest Event not written yet (its reason's window is open)."""
    shown: tuple[str, str, str] | None = None
    """What the newest Event written on it says."""


class EventWindows:
    def __init__(self, window: float = WINDOW) -> None:
        self.window = window
        self._objects: dict[Subject, _Object] = {}
        self._ends: list[tuple[float, int, Subject, str]] = []
        self._seq = itertools.count()
        self.suppressed = 0
        """Events said that were not written as an Event of their own: folded into a held
        one, superseded while held, or saying what the object's newest Event says."""

    def offer(self, event: AnyEvent, now: float) -> Due | None:
        """``event`` was said at ``now``: what to write at once, or ``None`` (held)."""
        subject = subject_of(event)
        obj = self._objects.setdefault(subject, _Object())
        end = obj.ends.get(event.reason)
        held = obj.held
        if end is None or end <= now:
            if held is not None:
                self.suppressed += held.count
                obj.held = None
            return self._write(subject, obj, Due(event, 1, now, now), now)
        if held is not None and _said(held.event) == _said(event):
            obj.held = Due(event, held.count + 1, held.first, now)
        else:
            if held is not None:
                self.suppressed += held.count
            obj.held = Due(event, 1, now, now)
        return None

    def due(self, now: float) -> list[Due]:
        """The held Events whose windows ended by ``now``, in the order they fell due."""
        out: list[Due] = []
        while self._ends and self._ends[0][0] <= now:
            end, _, subject, reason = heapq.heappop(self._ends)
            obj = self._objects.get(subject)
            if obj is None or obj.ends.get(reason) != end:
                continue  # reopened since
            del obj.ends[reason]
            held = obj.held
            if held is not None and held.event.reason == reason:
                obj.held = None
                if _said(held.event) == obj.shown:
                    self.suppressed += held.count
                else:
                    out.append(self._write(subject, obj, held, now))
            if not obj.ends:
                del self._objects[subject]
        return out

    def next_due(self) -> float | None:
        """When the earliest open window ends (perhaps one reopened since: an early look)."""
        return self._ends[0][0] if self._ends else None

    def _write(self, subject: Subject, obj: _Object, due: Due, now: float) -> Due:
        end = now + self.window
        obj.ends[due.event.reason] = end
        obj.shown = _said(due.event)
        heapq.heappush(self._ends, (end, next(self._seq), subject, due.event.reason))
        return due
