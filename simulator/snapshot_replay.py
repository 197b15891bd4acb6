"""Snapshot mode's input: a recorded (or hand-written) cluster plus an optional timeline.

A snapshot is what ``kubectl get nodes,pods -A -o yaml`` prints (a ``List`` or a multi-document
stream), plus workload objects of any described kind (JobSet, PyTorchJob, ...), plus
``WorkloadDescriptor`` objects (added to the catalog), ``PriorityClass`` objects, plus at most
one ``Timeline``::

    apiVersion: muster.dev/v1alpha1
    kind: Timeline
    metadata: {name: monday}
    spec:
      entries:
        - {workload: JobSet/ml/llama, arrival: 0, runtime: 3600}

When a workload arrives: its Timeline entry says; without one, a workload still to be
scheduled (a pod pending, or pods its controller has yet to create) arrives at its
``metadata.creationTimestamp``, in seconds after the earliest such timestamp among those
workloads and the pending pods outside workloads; a workload whose pods all run already, or
one without a timestamp, arrives at 0. Without a runtime a workload runs forever. Pods the
snapshot holds stay as they are (bound pods keep their node); the controller creates the pods
a workload lacks. Priorities are resolved from ``priorityClassName`` as the API server's
admission would (:mod:`simulator.priority`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from extender.core.devices.attach import lower_objects
from extender.core.model.objects import ObjectError, node_from_api, pod_from_api, timestamp
from extender.core.model.values import Membership, NodeInfo, PodInfo, PodPhase, WorkloadTree
from extender.core.workloads.catalog import Catalog
from extender.core.workloads.cluster import build_snapshot
from extender.core.workloads.descriptor import KIND as DESCRIPTOR_KIND
from extender.core.workloads.descriptor import compile_descriptor
from extender.core.workloads.expressions import DescriptorError
from extender.core.workloads.workload import workload_ref
from simulator.controllers import admit_priorities, gang_policy
from simulator.preferences import PreferenceError, Preferred, preferred_affinity
from simulator.priority import KIND as PRIORITY_CLASS_KIND
from simulator.priority import PriorityClasses, PriorityError, admitted_spec
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


def _admitted_pod(obj: Mapping[str, Any], classes: PriorityClasses) -> Mapping[str, Any]:
    """The pod with ``spec.priority`` as admission would have set it."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return obj
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    namespace = (meta.get("namespace") if isinstance(meta, Mapping) else None) or "default"
    admitted = admitted_spec(spec, classes, where=f"pod {namespace}/{name}")
    return obj if admitted is spec else {**obj, "spec": admitted}


def _preferred(spec: object, where: str) -> Preferred:
    try:
        return preferred_affinity(spec if isinstance(spec, Mapping) else None)
    except PreferenceError as err:
        raise ReplayInputError(f"{where}: {err}") from None


def _created_at(objects: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Workload key -> creationTimestamp (epoch seconds) of the objects that carry one."""
    out: dict[str, float] = {}
    for obj in objects:
        meta = obj.get("metadata")
        stamp = timestamp(meta.get("creationTimestamp")) if isinstance(meta, Mapping) else 0.0
        if stamp > 0:
            try:
                out[workload_ref(obj).key] = stamp
            except ValueError:
                continue  # unnamed: it does not resolve into a workload either
    return out


def _arrivals(trees: Mapping[str, WorkloadTree],
              recorded: Mapping[str, list[tuple[PodInfo, Membership | None]]],
              created: Mapping[str, float], loose: Iterable[PodInfo]) -> tuple[
                  dict[str, float], dict[str, float]]:
    """Arrival seconds of workloads still to schedule and of pending loose pods, by their
    creation times relative to the earliest of them (see the module docstring)."""
    waiting: dict[str, float] = {}
    for key, tree in trees.items():
        pods = recorded.get(key, [])
        running = len(pods) >= tree.pods and all(p.node_name is not None for p, _ in pods)
        if not running and created.get(key, 0.0) > 0:
            waiting[key] = created[key]
    pending = {p.uid: p.created for p in loose if p.node_name is None and p.created > 0}
    stamps = [*waiting.values(), *pending.values()]
    if not stamps:
        return {}, {}
    earliest = min(stamps)
    return ({k: round(v - earliest, 3) for k, v in waiting.items()},
            {u: round(v - earliest, 3) for u, v in pending.items()})


def scenario_from_objects(objects: Iterable[Mapping[str, Any]], *, catalog: Catalog,
                          name: str = "snapshot") -> Scenario:
    """Nodes, pods, workloads, descriptors and a timeline -> a :class:`Scenario`."""
    nodes: list[NodeInfo] = []
    pods: list[Mapping[str, Any]] = []
    others: list[Mapping[str, Any]] = []
    found = []
    timeline: dict[str, TimelineEntry] = {}
    timelines = 0
    priority_classes: list[Mapping[str, Any]] = []
    # DRA counted as the extender counts it: nodes offer their free devices, pods and pod
    # templates ask for their claims' devices (docs/dra.md).
    for obj in lower_objects(list(objects)):
        kind = obj.get("kind")
        if kind == PRIORITY_CLASS_KIND:
            priority_classes.append(obj)
        elif kind == "Node":
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
    try:
        classes = PriorityClasses.of(priority_classes)
        pods = [_admitted_pod(p, classes) for p in pods]
    except PriorityError as err:
        raise ReplayInputError(str(err)) from None
    preferred: dict[str, Preferred] = {}
    for admitted_pod in pods:
        info = pod_from_api(admitted_pod)
        terms = _preferred(admitted_pod.get("spec"), f"pod {info.key}")
        if terms:
            preferred[info.uid] = terms
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
    created = _created_at([*others, *pods])
    arrivals, loose_arrivals = _arrivals(snapshot.workloads, by_workload, created, loose)
    workloads = []
    for key, tree in sorted(snapshot.workloads.items()):
        try:
            admitted = admit_priorities(tree, classes)
        except PriorityError as err:
            raise ReplayInputError(str(err)) from None
        for role in admitted.roles:
            _preferred(role.template.get("spec"), f"{key} role {role.name}")
        entry = timeline.get(key, TimelineEntry(arrivals.get(key, 0.0), None))
        workloads.append(WorkloadSpec(tree=admitted, policy=gang_policy(tree, catalog),
                                      arrival=entry.arrival, runtime=entry.runtime,
                                      pods=tuple(by_workload.get(key, ()))))
    return Scenario(nodes=tuple(nodes), workloads=tuple(workloads), loose_pods=tuple(loose),
                    name=name, loose_arrivals=loose_arrivals, preferred=preferred)
