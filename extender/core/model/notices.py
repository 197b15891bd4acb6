"""What Muster tells people, as values: events on pods and on workload objects.

The session decides which events to write (and writes each change once, not each retry);
the adapters post them (``extender.kube.events``) or keep them in memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class PodRef:
    namespace: str
    name: str
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


@dataclass(frozen=True, slots=True)
class PodEvent:
    pod: PodRef
    type: EventType
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class WorkloadEvent:
    """An event on a workload object (a JobSet, a RayCluster...): ``kubectl describe`` of the
    workload then says what Muster thinks of it, not only its pods."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    type: EventType
    reason: str
    message: str
    gang: str = ""
    """The gang key the event is about, when it is about one (a workload may hold several
    gangs: an LWS's groups); not written to the API server, read by the gang-wait metric."""

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


AnyEvent = PodEvent | WorkloadEvent
