"""What the store hands a snapshot builder, and how it is read out of the store's sources.

A builder gets :class:`RawState` (every object, for a build from scratch) or, when it can carry
its last snapshot forward (:class:`IncrementalBuilder`), :class:`Changes` (the objects touched
since). Both are read out of the sources with the pod overlays applied and DRA lowered into
them (:mod:`extender.core.devices.attach`): Nodes with their free devices, Pods and workloads'
pod templates with the devices their claims ask; the DRA objects themselves reach no builder.

Functions over the store's parts, called under its lock: they take no lock and count no
revision; the lowering computes again only what changed since it last refreshed.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from extender.core.devices.attach import (
    CLAIM_TEMPLATES,
    DEVICE_CLASSES,
    DEVICE_SOURCES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    DeviceLowering,
)
from extender.core.model.snapshot import ClusterSnapshot
from extender.state.overlays import PodOverlays
from extender.state.sources import DESCRIPTOR_SOURCES, NODES, PODS, RawObject, Source


@dataclass(frozen=True)
class RawState:
    """Everything the store holds, as plain objects sorted by key (deterministic builds)."""

    nodes: tuple[RawObject, ...]
    pods: tuple[RawObject, ...]
    objects: tuple[RawObject, ...]
    """Workload objects and the intermediate owners (Jobs, StatefulSets...) of every kind."""
    descriptors: tuple[RawObject, ...]
    revision: int
    descriptors_revision: int
    """Changes only when a descriptor changes, so compiled catalogs can be cached."""
    object_keys: tuple[str, ...] = ()
    """``<source>/<key>`` of each of :attr:`objects`, as :attr:`Changes.objects` names them."""


SnapshotBuilder = Callable[[RawState], ClusterSnapshot]


@dataclass(frozen=True)
class Changes:
    """Objects changed since the last snapshot, each as it is now (``None``: gone)."""

    nodes: Mapping[str, RawObject | None]
    pods: Mapping[str, RawObject | None]
    """By store key (``namespace/name``), with the overlays applied."""
    objects: Mapping[str, RawObject | None]
    """Workload objects and owners by ``<source>/<key>``, the keys :class:`RawState` sorts by."""
    revision: int


@runtime_checkable
class IncrementalBuilder(Protocol):
    """A builder that can also carry its last snapshot forward by the changes since."""

    def __call__(self, raw: RawState) -> ClusterSnapshot: ...

    def update(self, changes: Changes) -> ClusterSnapshot: ...


def refresh_devices(devices: DeviceLowering, sources: Mapping[str, Source],
                    overlays: PodOverlays) -> bool:
    """Bring the DRA lowering up to date; whether its device catalog was rebuilt (or went
    away), which changes every node's supply."""
    def items(source: str) -> Iterable[RawObject]:
        entry = sources.get(source)
        return entry.objects.values() if entry is not None else ()

    if any(items(s) for s in DEVICE_SOURCES):
        return devices.refresh(
            slices=items(RESOURCE_SLICES), classes=items(DEVICE_CLASSES),
            claims=items(RESOURCE_CLAIMS), templates=items(CLAIM_TEMPLATES),
            pods=itertools.chain(items(PODS), overlays.upserted.values()))  # lazily
    return devices.clear()


def changes_of(log: Iterable[tuple[str, str]], sources: Mapping[str, Source],
               overlays: PodOverlays, devices: DeviceLowering, *, revision: int) -> Changes:
    """The objects of ``log`` (``(source, key)`` pairs) as they are now."""
    refresh_devices(devices, sources, overlays)
    lower_node, lower_pod, lower_workload = devices.node, devices.pod, devices.workload
    nodes: dict[str, RawObject | None] = {}
    pods: dict[str, RawObject | None] = {}
    objects: dict[str, RawObject | None] = {}
    for source, key in log:
        entry = sources.get(source)
        found = entry.objects.get(key) if entry is not None else None
        if source == NODES:
            nodes[key] = None if found is None else lower_node(found)
        elif source == PODS:
            found = found if found is not None else overlays.upserted.get(key)
            pods[key] = None if found is None else lower_pod(
                overlays.with_assumption(key, found))
        elif source in DEVICE_SOURCES:
            continue
        else:
            objects[f"{source}/{key}"] = None if found is None else lower_workload(found)
    return Changes(nodes=nodes, pods=pods, objects=objects, revision=revision)


def raw_state(sources: Mapping[str, Source], overlays: PodOverlays, devices: DeviceLowering,
              *, revision: int, descriptors_revision: int) -> RawState:
    """Every object the sources and overlays hold, for a build from scratch."""
    def items(source: str) -> dict[str, RawObject]:
        entry = sources.get(source)
        return dict(entry.objects) if entry is not None else {}

    refresh_devices(devices, sources, overlays)
    lower_node, lower_pod = devices.node, devices.pod
    pods = {**overlays.upserted, **items(PODS)}
    objects: dict[str, RawObject] = {}
    for source in sorted(sources):
        if source not in (NODES, PODS, *DESCRIPTOR_SOURCES, *DEVICE_SOURCES):
            objects.update({f"{source}/{k}": devices.workload(v)
                            for k, v in items(source).items()})
    return RawState(
        nodes=tuple(lower_node(v) for _, v in sorted(items(NODES).items())),
        pods=tuple(lower_pod(overlays.with_assumption(k, v)) for k, v in sorted(pods.items())),
        objects=tuple(v for _, v in sorted(objects.items())),
        object_keys=tuple(sorted(objects)),
        descriptors=tuple(v for source in DESCRIPTOR_SOURCES
                          for _, v in sorted(items(source).items())),
        revision=revision,
        descriptors_revision=descriptors_revision,
    )
