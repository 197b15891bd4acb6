"""Snapshot mode's input: a recorded (or hand-written) cluster plus an optional timeline.

A snapshot is what ``kubectl get nodes,pods -A -o yaml`` prints (a ``List`` or a multi-document
stream), plus workload objects of any described kind (JobSet, PyTorchJob, ...), plus
``WorkloadDescriptor`` objects (added to the catalog), plus at most one ``Timeline``::

    apiVersion: muster.dev/v1alpha1
    kind: Timeline
    metadata: {name: monday}
    spec:
      entries:
        - {workload: JobSet/ml/llama, arrival: 0, runtime: 3600}

A workload without an entry arrives at 0 and runs forever. Pods the snapshot holds stay as
they are (bound pods keep their node); the controller creates the pods a workload lacks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from extender.core.catalog import Catalog
from extender.core.cluster import build_snapshot
from extender.core.descriptor import KIND as DESCRIPTOR_KIND
from extender.core.descriptor import compile_descriptor
from extender.core.expressions import DescriptorError
from extender.core.model import Membership, NodeInfo, PodInfo, PodPhase
from extender.core.objects import ObjectError, node_from_api, pod_from_api
from simulator.controllers import gang_policy
from simulator.simulation import Scenario, WorkloadSpec

TIMELINE_KIND = "Timeline"


class ReplayInputError(ValueError):
    """A snapshot that cannot be replayed; the message names the object and the field."""


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    arrival: float
    runtime: float | None


def _number(value: object, where: str, *, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ReplayInputError(f"{where}: expected seconds (a number >= 0), got {value!r}")
    return float(value)


def parse_timeline(obj: Mapping[str, Any]) -> dict[str, TimelineEntry]:
    """``Timeline`` entries by workload key ``KIND/NAMESPACE/NAME``."""
    name = obj.get("metadata", {}).get("name", "?")
    spec = obj.get("spec")
    entries = spec.get("entries") if isinstance(spec, Mapping) else None
    if not isinstance(entries, list):
        raise ReplayInputError(f"Timeline {name}: spec.entries must be a list")
    out: dict[str, TimelineEntry] = {}
    for i, raw in enumerate(entries):
        where = f"Timeline {name}: spec.entries[{i}]"
        if not isinstance(raw, Mapping):
            raise ReplayInputError(f"{where}: expected an object")
        key = raw.get("workload")
        if not isinstance(key, str) or key.count("/") != 2:
            raise ReplayInputError(f"{where}.workload: expected KIND/NAMESPACE/NAME, got {key!r}")
        if key in out:
            raise ReplayInputError(f"{where}.workload: {key} is listed twice")
        arrival = _number(raw.get("arrival", 0), f"{where}.arrival")
        assert arrival is not None
        out[key] = TimelineEntry(arrival=arrival,
                                 runtime=_number(raw.get("runtime"), f"{where}.runtime",
                                                 allow_none=True))
    return out


def scenario_from_objects(objects: Iterable[Mapping[str, Any]], *, catalog: Catalog,
                          name: str = "snapshot") -> Scenario:
    """Nodes, pods, workloads, descriptors and a timeline -> a :class:`Scenario`."""
    nodes: list[NodeInfo] = []
    pods: list[Mapping[str, Any]] = []
    others: list[Mapping[str, Any]] = []
    found = []
    timeline: dict[str, TimelineEntry] = {}
    timelines = 0
    for obj in objects:
        kind = obj.get("kind")
        if kind == "Node":
            try:
                nodes.append(node_from_api(obj))
            except ObjectError as err:
                raise ReplayInputError(str(err)) from None
        elif kind == "Pod":
            try:
                pod_from_api(obj)
            except ObjectError as err:
                raise ReplayInputError(str(err)) from None
            pods.append(obj)
        elif kind == DESCRIPTOR_KIND:
            try:
                found.append(compile_descriptor(dict(obj)))
            except DescriptorError as err:
                raise ReplayInputError(f"WorkloadDescriptor "
                                       f"{obj.get('metadata', {}).get('name')}: {err}") from None
        elif kind == TIMELINE_KIND:
            if timelines:
                raise ReplayInputError("a snapshot may hold one Timeline; found a second")
            timelines += 1
            timeline = parse_timeline(obj)
        else:
            others.append(obj)
    if not nodes:
        raise ReplayInputError("the snapshot has no Node objects to schedule onto")
    if found:
        catalog = catalog.merged(found)
    snapshot = build_snapshot(nodes=nodes, pods=pods, objects=others, catalog=catalog)
    unknown = sorted(set(timeline) - set(snapshot.workloads))
    if unknown:
        raise ReplayInputError(f"Timeline names workloads the snapshot does not hold: "
                               f"{', '.join(unknown)}")
    by_workload: dict[str, list[tuple[PodInfo, Membership | None]]] = {}
    loose: list[PodInfo] = []
    for pod in sorted(snapshot.pods.values(), key=lambda p: p.key):
        if pod.phase in (PodPhase.SUCCEEDED, PodPhase.FAILED):
            continue
        member = snapshot.memberships.get(pod.uid)
        if member is None:
            loose.append(pod)
        else:
            by_workload.setdefault(member.workload.key, []).append((pod, member))
    workloads = []
    for key, tree in sorted(snapshot.workloads.items()):
        entry = timeline.get(key, TimelineEntry(0.0, None))
        workloads.append(WorkloadSpec(tree=tree, policy=gang_policy(tree, catalog),
                                      arrival=entry.arrival, runtime=entry.runtime,
                                      pods=tuple(by_workload.get(key, ()))))
    return Scenario(nodes=tuple(nodes), workloads=tuple(workloads), loose_pods=tuple(loose),
                    name=name)
