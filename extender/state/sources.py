"""The store's sources (one listed kind each, named ``<apiVersion>/<kind>``, e.g. ``v1/Pod``)
and the readiness they add up to.

Here: the names of the sources the store treats apart (nodes, pods, descriptors; the DRA ones
are :mod:`extender.core.devices.attach`'s). A :class:`Source` holds one kind's objects and what
its informer last said: listed or not, its watch healthy or broken (and why), or unwatchable
(RBAC forbids it). :func:`readiness` and :func:`source_states` read the sources against the
ones expected: every expected source must have completed a full list and be connected; until
then (and while any watch is broken) the state cannot be trusted, and readiness says why.

Names, plain records and functions: no lock, no revision, no snapshot; the store keeps the
records under its lock.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

RawObject = Mapping[str, Any]

NODES = "v1/Node"
PODS = "v1/Pod"
DESCRIPTORS = "muster.dev/v1alpha1/WorkloadDescriptor"
KARTAS = "run.ai/v1alpha1/Karta"
"""NVIDIA Workload Map descriptors: held, compiled and listened to like WorkloadDescriptors."""
DESCRIPTOR_SOURCES = (DESCRIPTORS, KARTAS)

SOURCE_STATES = ("listing", "synced", "broken", "forbidden")
"""What :func:`source_states` says of a source: not listed yet; listed and watched; its watch
failing (the store is not ready); cannot be watched (RBAC)."""


def source_of(obj: RawObject) -> str:
    """The source name an object belongs to: ``<apiVersion>/<kind>``."""
    return f"{obj.get('apiVersion') or 'v1'}/{obj.get('kind') or ''}"


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    reason: str


@dataclass
class Source:
    objects: dict[str, RawObject]
    synced: bool = False
    healthy: bool = True
    problem: str = ""
    unwatchable: str = ""
    """Why an optional source counts as empty instead of being watched (RBAC forbids it)."""


def source_states(sources: Mapping[str, Source], expected: Collection[str]) -> dict[str, str]:
    """Each expected source's state, one of :data:`SOURCE_STATES`."""
    out = {}
    for source in sorted(expected):
        entry = sources.get(source)
        if entry is None or not entry.synced:
            out[source] = "listing"
        elif not entry.healthy:
            out[source] = "broken"
        elif entry.unwatchable:
            out[source] = "forbidden"
        else:
            out[source] = "synced"
    return out


def readiness(sources: Mapping[str, Source], expected: Collection[str]) -> Readiness:
    """Ready once every expected source is listed and watched; the reason names the first
    that is not, or the sources that cannot be watched."""
    for source in sorted(expected):
        entry = sources.get(source)
        if entry is None or not entry.synced:
            return Readiness(False, f"{source} not listed yet")
        if not entry.healthy:
            return Readiness(False, f"{source}: {entry.problem or 'watch broken'}")
    unwatched = [f"{s} ({e.unwatchable})" for s, e in sorted(sources.items())
                 if s in expected and e.unwatchable]
    if unwatched:
        return Readiness(True, "synced, but cannot watch " + "; ".join(unwatched)
                         + ": their workloads are not gang-scheduled")
    return Readiness(True, "all sources synced")
