"""What the server needs from the outside world, as protocols the adapters implement.

The server must not import ``extender.kube``; the CLI wires a Kubernetes binder and event
recorder (live mode) or the in-memory ones below (snapshot-file mode, tests) into the app.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from extender.core.model.notices import AnyEvent, EventType, PodEvent, PodRef, WorkloadEvent

__all__ = [
    "AnyEvent",
    "BindError",
    "Binder",
    "Clock",
    "EventSink",
    "EventType",
    "Evictor",
    "GangObjectSink",
    "MemoryEvents",
    "MemoryEvictor",
    "MemoryGangObjects",
    "MemoryRequeuer",
    "MemoryUngater",
    "PodEvent",
    "PodRef",
    "Requeuer",
    "Ungater",
    "WorkloadEvent",
]

Clock = Callable[[], float]
"""Seconds since the epoch; injected so tests and the simulator control time."""


class BindError(Exception):
    """The Binding could not be created; the message is shown to kube-scheduler."""




class Binder(Protocol):
    def bind(self, pod: PodRef, node: str) -> None:
        """Create the pod's Binding to ``node``; raise :class:`BindError` on failure.

        Must succeed when the pod is already bound to ``node`` (kube-scheduler retries)."""

    def reserve_claims(self, pod: PodRef, node: str, claims: Sequence[str]) -> None:
        """Reserve the pod's ResourceClaims ``claims`` (in its namespace) for it, as
        kube-scheduler's DynamicResources PreBind does, before a bind Muster makes itself;
        raise :class:`BindError` when one is no longer allocated to ``node``. Succeeds when
        they are reserved for the pod already."""


class EventSink(Protocol):
    def emit(self, event: AnyEvent) -> None:
        """Record an event on a pod or a workload; must not block the caller on the
        network."""


class Requeuer(Protocol):
    def requeue(self, pods: Sequence[PodRef], reason: str) -> None:
        """Make kube-scheduler try ``pods`` again; must not block the caller on the network.

        kube-scheduler retries a pod an extender turned away only on a cluster event it
        watches (a node or pod change) or after minutes in its unschedulable queue; what
        Muster learns on its own (a plan ended, a workload observed, the state trusted again)
        is no such event, so Muster makes one: a change of the pod's status."""


class GangObjectSink(Protocol):
    def publish(self, objects: Mapping[tuple[str, str], Mapping[str, Any]]) -> None:
        """The ``Gang`` objects that should exist now, by ``(namespace, name)``: write those
        that changed and delete those gone; must not block the caller on the network."""


class MemoryGangObjects:
    """The last ``Gang`` objects published (snapshot-file mode and tests)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[tuple[str, str], Mapping[str, Any]] = {}

    def publish(self, objects: Mapping[tuple[str, str], Mapping[str, Any]]) -> None:
        with self._lock:
            self._objects = dict(objects)

    def objects(self) -> dict[tuple[str, str], Mapping[str, Any]]:
        with self._lock:
            return dict(self._objects)


class Ungater(Protocol):
    def ungate(self, pods: Sequence[PodRef], reason: str) -> None:
        """Remove Muster's scheduling gate (and only it) from ``pods``; must not block the
        caller on the network. A pod recreated under the same name must not be touched."""


class MemoryUngater:
    """Ungatings recorded in memory (snapshot-file mode and tests), oldest first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ungated: list[tuple[PodRef, str]] = []

    def ungate(self, pods: Sequence[PodRef], reason: str) -> None:
        with self._lock:
            self._ungated.extend((pod, reason) for pod in pods)

    def ungated(self) -> list[tuple[PodRef, str]]:
        with self._lock:
            return list(self._ungated)


class Evictor(Protocol):
    def evict(self, pods: Sequence[PodRef], reason: str) -> None:
        """Evict ``pods`` (the whole victims of a preemption plan); must not block the
        caller on the network."""


class MemoryEvictor:
    """Evictions recorded in memory (snapshot-file mode and tests), oldest first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._evicted: list[tuple[PodRef, str]] = []

    def evict(self, pods: Sequence[PodRef], reason: str) -> None:
        with self._lock:
            self._evicted.extend((pod, reason) for pod in pods)

    def evicted(self) -> list[tuple[PodRef, str]]:
        with self._lock:
            return list(self._evicted)


class MemoryRequeuer:
    """Requeues recorded in memory (snapshot-file mode and tests), oldest first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requeued: list[tuple[PodRef, str]] = []

    def requeue(self, pods: Sequence[PodRef], reason: str) -> None:
        with self._lock:
            self._requeued.extend((pod, reason) for pod in pods)

    def requeued(self) -> list[tuple[PodRef, str]]:
        with self._lock:
            return list(self._requeued)


class MemoryEvents:
    """Events kept in memory (snapshot-file mode and tests), newest last, bounded."""

    def __init__(self, *, limit: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._events: list[AnyEvent] = []
        self._limit = limit

    def emit(self, event: AnyEvent) -> None:
        with self._lock:
            self._events.append(event)
            del self._events[: max(0, len(self._events) - self._limit)]

    def events(self) -> list[PodEvent]:
        """The events on pods."""
        with self._lock:
            return [e for e in self._events if isinstance(e, PodEvent)]

    def workload_events(self) -> list[WorkloadEvent]:
        with self._lock:
            return [e for e in self._events if isinstance(e, WorkloadEvent)]
