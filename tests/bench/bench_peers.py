"""Muster against its peers on a real control plane: one seeded workload mix, three schedulers.

    .venv/bin/python tests/bench/bench_peers.py [--nodes 200] [--gangs 100] [--singles 150]
        [--seed 7] [--modes default,gang,muster] [--repeat N] [--hog] [--json FILE]
    .venv/bin/python tests/bench/bench_peers.py --streamed [--nodes 48] [--arrival-rate 40]
        [--duration 150] [--drain 60] [--runtime-min 20 --runtime-max 60] [--max-gang 8]
        [--seed 7] [--modes default,gang,muster,muster+gates] [--json FILE]

Two ways to run. The burst (the default, described below) creates every pod at once and
nothing finishes: it measures the first admission. ``--streamed`` (``peer_stream.py``, driven
by ``peer_stream_run.py``) makes JobSets and bare batch pods arrive over time (a seeded
Poisson process), each running a seeded number of seconds once Ready and then Succeeding
(KWOK, ``muster.dev/sandbox-runtime``), so later gangs start in the GPUs earlier ones free;
per mode it reports time-to-start per gang (first pod created to the poll that sees its
minimum bound and running at once; p50/p95/max, a gang never started counting as infinite),
GPU utilisation over the arrival window, gangs started whole, partial gangs seen, and Muster's
figures over the upstream plugin's from the same run. In both, every mode's pods are made by
the bench's stand-ins, never by the sandbox's real operators, so that the upstream plugin's
pods can name their PodGroup; ``peer_stream_run.py`` says why.

The same seeded mix of JobSets and LeaderWorkerSets (each gang 2..16 pods of 1, 2, 4 or 8
GPUs) and bare non-gang pods of 1-2 GPUs goes, in the same order, to one fresh sandbox per
mode (real etcd, kube-apiserver and kube-scheduler v1.37.2, fake GPU nodes; ``extender/sandbox``):

* ``default``: kube-scheduler alone, no gang scheduling;
* ``gang``: kube-scheduler with the upstream GangScheduling plugin (gate ``GenericWorkload``);
  each gang also gets the ``Workload`` and ``PodGroup`` (``scheduling.k8s.io/v1beta1``) a
  Workload-aware controller would create, and its pods name the PodGroup in
  ``spec.schedulingGroup.podGroupName``;
* ``muster``: kube-scheduler with Muster as its extender; ``muster:THREADS`` runs Muster with
  that many server threads (``MUSTER_THREADS``) instead of the default 32;
* ``muster+gates``: the same, with Muster's admission webhook: each gang pod is created behind
  a scheduling gate and enters kube-scheduler's queue only once its whole gang is planned;
* ``muster+policy``: the same gate, added by the API server's MutatingAdmissionPolicy
  (manifests/gate-policy/) with no call to Muster; Muster ungates pods of no gang.

First every workload and what its operator makes before pods (Jobs, and in gang mode Workload
and PodGroups) is created; then all pods, as the stand-ins for their controllers would make them
(:func:`extender.sandbox.controllers.children`; the Jobs name the stand-in in ``managedBy``, so
the sandbox's real Job controller leaves them to the bench), in one seeded random merge that
keeps each workload's own order: every controller at once, from ``--creators`` connections.
KWOK runs the bound pods but none asks for a runtime, so no pod finishes: this measures the
admission phase. From the first pod on, a
poller lists the bound pods every ``--poll`` seconds; a mode ends when the number of bound
pods has not changed for ``--quiet`` seconds after the last pod was created, or at
``--timeout``. Columns (times from the first pod created):

* ``pods/s``: bound pods / ``settle``;
* ``settle``: when the number of bound pods stopped changing (the quiet window not counted);
* ``last gang``: when the last gang that is whole at the end became whole;
* ``gangs whole`` / ``partial end`` / ``none bound``: gangs with at least their minimum, with
  some but fewer, and with no member bound, at the end; ``partial peak``: the most partial
  gangs any poll saw (a poll can catch a gang between its members' bindings);
* ``fit left``: at the end, gangs not whole that Muster's own ``muster fit`` check
  (:func:`extender.core.decide.fit.fit_workload`, bound members counted) says would fit in the free
  capacity now. When it is 0, ``settle`` is the time until every gang that can fit is bound;
  otherwise that moment never came;
* ``stranded GPUs``: GPUs bound to partial gangs at the end, held for good (nothing finishes);
* ``partial GPU-s``: GPUs bound to partial gangs, summed over the polls for the first
  ``--horizon`` seconds (the state after the end held constant).

Each mode's notes also give the CPU seconds each process used while the pods were created,
and from the first pod to the end (:func:`cpu_pinning.cpu_spent`): on a small machine every
process takes its CPU from the others, the API server's included.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from extender.core.decide.fit import fit_workload
from extender.core.devices.attach import lower_objects
from extender.core.workloads.catalog import Catalog
from extender.core.workloads.cluster import build_snapshot
from extender.core.workloads.workload import resolve_workload
from extender.files.catalog import packaged_catalog
from extender.kube.client import Connection
from extender.kube.reader import device_objects
from extender.sandbox.config import GateBy, Ports, SchedulerMode
from extender.sandbox.controllers import adopt, children, pod_groups
from extender.sandbox.dra import GpuModel, device_classes
from extender.sandbox.sandbox import Sandbox, SandboxSpec
from extender.sandbox.submit import Submitted, create, submit
from tests.bench import cpu_pinning
from tests.bench.peer_compare import (
    HOG,
    ROUND,
    CpuHog,
    Figures,
    api_latency,
    api_requests,
    api_time,
    claims_never_made,
    event_reasons,
    latency_note,
    ratios,
    repeated_ratios,
    rounds,
    verb_latency,
)

NAMESPACE = "bench"
GPU = "nvidia.com/gpu"
GPUS_PER_POD = (1, 2, 4, 8)
GPU_WEIGHTS = (2, 3, 3, 2)


# -- the workload mix -----------------------------------------------------------------------------
@dataclass(frozen=True)
class MixSpec:
    nodes: int = 200
    gpus_per_node: int = 8
    gangs: int = 100
    singles: int = 150
    seed: int = 7
    min_gang: int = 2
    max_gang: int = 16
    gpu_model: str = "device-plugin"
    """How pods get GPUs (:data:`GPU_MODELS`)."""


GPU_MODELS = ("device-plugin", "dra-extended", "dra-claims")
"""``device-plugin``: ``nvidia.com/gpu`` in nodes' allocatable; ``dra-extended``: the same pods
on nodes whose GPUs only ResourceSlices publish, served through the DeviceClass's
``extendedResourceName``; ``dra-claims``: those nodes, each pod taking its GPUs through a
ResourceClaimTemplate (``gpu-<n>``) instead of a request."""


def as_claims(obj: Any) -> Any:
    """``obj`` with every container's ``nvidia.com/gpu`` limit turned into a claim from the
    template ``gpu-<n>`` (for ``dra-claims``)."""
    if isinstance(obj, list):
        return [as_claims(item) for item in obj]
    if not isinstance(obj, dict):
        return obj
    out = {k: as_claims(v) for k, v in obj.items()}
    containers = out.get("containers")
    if isinstance(containers, list):
        gpus = 0
        for container in containers:
            limits = container.get("resources", {}).get("limits", {})
            gpus += int(limits.pop(GPU, 0) or 0)
            if gpus and not any(c.get("name") == "gpus"
                                for c in container["resources"].get("claims", [])):
                container["resources"]["claims"] = [{"name": "gpus"}]
        if gpus:
            out["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": f"gpu-{gpus}"}]
    return out


def claim_templates(namespace: str) -> list[dict[str, Any]]:
    return [{"metadata": {"name": f"gpu-{n}", "namespace": namespace},
             "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                 "deviceClassName": "gpu.nvidia.com", "count": n}}]}}}}
            for n in GPUS_PER_POD]


def _container(gpus: int) -> dict[str, Any]:
    return {"name": "main", "image": "registry.example/train:1",
            "resources": {"requests": {"cpu": "1", "memory": "4Gi"},
                          "limits": {GPU: str(gpus)}}}


def make_jobset(name: str, rng: random.Random, pods: int) -> dict[str, Any]:
    """One gang of ``pods``: one replicatedJob, a leader plus workers, or two workers Jobs."""
    gpus = rng.choices(GPUS_PER_POD, GPU_WEIGHTS)[0]
    shape = rng.choice(("workers", "leader", "replicas") if pods % 2 == 0 and pods >= 4
                       else ("workers", "leader"))
    if shape == "workers":
        groups = [("workers", 1, pods, gpus)]
    elif shape == "leader":
        groups = [("leader", 1, 1, gpus), ("workers", 1, pods - 1, gpus)]
    else:
        groups = [("workers", 2, pods // 2, gpus)]
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"replicatedJobs": [
            {"name": rj, "replicas": replicas, "template": {"spec": {
                "parallelism": per, "completions": per,
                "template": {"spec": {"restartPolicy": "Never",
                                      "containers": [_container(g)]}}}}}
            for rj, replicas, per, g in groups]},
    }


def _lws(name: str, rng: random.Random, groups: int) -> dict[str, Any]:
    """``groups`` gangs of 2..8 pods each (a leader and size-1 workers)."""
    size = rng.randint(2, 8)
    gpus = rng.choices(GPUS_PER_POD, GPU_WEIGHTS)[0]
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"replicas": groups, "leaderWorkerTemplate": {
            "size": size, "workerTemplate": {"spec": {"containers": [_container(gpus)]}}}},
    }


def make_single(name: str, rng: random.Random) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"containers": [_container(rng.choice((1, 1, 2)))]}}


def generate(spec: MixSpec) -> list[dict[str, Any]]:
    """The workload objects, in submission order: gangs and singles interleaved, seeded."""
    rng = random.Random(spec.seed)
    gang_objects: list[dict[str, Any]] = []
    left = spec.gangs
    while left > 0:
        index = len(gang_objects)
        if rng.random() < 0.6:
            pods = rng.randint(spec.min_gang, spec.max_gang)
            gang_objects.append(make_jobset(f"train-{index}", rng, pods))
            left -= 1
        else:
            groups = min(left, rng.randint(1, 3))
            gang_objects.append(_lws(f"serve-{index}", rng, groups))
            left -= groups
    singles = [make_single(f"single-{i}", rng) for i in range(spec.singles)]
    order = gang_objects + singles
    rng.shuffle(order)
    return [as_claims(o) for o in order] if spec.gpu_model == "dra-claims" else order


# -- one mode -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GangRecord:
    key: str
    min_member: int
    pods: tuple[str, ...]
    gpus_per_pod: dict[str, int]


@dataclass
class Sample:
    t: float
    bound: frozenset[str]


@dataclass
class ModeResult:
    mode: str
    up_s: float
    submit_s: float
    observed_s: float
    timed_out: bool
    pods: int
    bound: int
    settle_s: float
    pods_per_s: float
    last_gang_s: float | None
    gangs_complete: int
    gangs_waiting: int
    """Gangs with no member bound."""
    fit_left: int
    partial_end: int
    partial_peak: int
    stranded_gpus: int
    partial_gpu_s: float = 0.0
    gpus_bound: int = 0
    singles_bound: int = 0
    probe: str = "-"
    """After quiescence: members bound / pods of a 1-GPU gang one larger than the free GPUs."""
    notes: list[str] = field(default_factory=list)
    series: list[tuple[float, int, int, int, int]] = field(default_factory=list)
    """Per poll: (t, bound pods, whole gangs, partial gangs, GPUs bound to partial gangs)."""


def gang_records(sub: Submitted, catalog: Catalog) -> list[GangRecord]:
    """Each gang of a submitted workload and its pods, by the same mapping gang mode uses."""
    descriptor = catalog.require(sub.workload)
    _, pods = children(sub.workload, sub.tree, descriptor)
    _, groups = pod_groups(sub.workload, sub.tree, descriptor, pods)
    records = []
    for gang, group in zip(sub.tree.gangs, groups, strict=True):
        members = [p for p in pods
                   if p["spec"].get("schedulingGroup", {}).get("podGroupName")
                   == group["metadata"]["name"]]
        gpus = {p["metadata"]["name"]: pod_gpus(p) for p in members}
        records.append(GangRecord(gang.key, gang.min_member,
                                  tuple(p["metadata"]["name"] for p in members), gpus))
    return records


def pod_gpus(pod: dict[str, Any]) -> int:
    total = sum(int(c["resourceClaimTemplateName"].removeprefix("gpu-"))
                for c in pod["spec"].get("resourceClaims", [])
                if c.get("resourceClaimTemplateName", "").startswith("gpu-"))
    for c in pod["spec"].get("containers", []):
        res = c.get("resources", {})
        total += int(res.get("limits", {}).get(GPU) or res.get("requests", {}).get(GPU) or 0)
    return total


BOUND = "spec.nodeName!="
"""The field selector of bound pods."""


def bound_pods(conn: Connection, selector: str = BOUND) -> frozenset[str]:
    listing = conn.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods",
                           query={"fieldSelector": selector})
    return frozenset(p["metadata"]["name"] for p in listing.get("items", []))


class Poller(threading.Thread):
    """Lists the pods ``selector`` selects (the bound ones) every ``interval`` seconds;
    ``samples`` grows until stopped."""

    def __init__(self, conn: Connection, t0: float, interval: float, *,
                 selector: str = BOUND) -> None:
        super().__init__(daemon=True)
        self.conn, self.t0, self.interval, self.selector = conn, t0, interval, selector
        self.samples: list[Sample] = []
        self.errors = 0
        self.spent = 0.0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            started = time.monotonic()
            try:
                bound = bound_pods(self.conn, self.selector)
            except Exception:  # a slow answer under load; the next poll will do
                self.errors += 1
            else:
                self.samples.append(Sample(started - self.t0, bound))
                self.spent += time.monotonic() - started
            self._halt.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def mean_poll_ms(self) -> float:
        return 1000 * self.spent / max(1, len(self.samples))

    def stop(self) -> None:
        self._halt.set()
        self.join()


def partial_gpus(gangs: list[GangRecord], bound: frozenset[str]) -> tuple[int, int]:
    """(partial gangs, GPUs bound to them) for one poll."""
    count = gpus = 0
    for g in gangs:
        on = [p for p in g.pods if p in bound]
        if 0 < len(on) < g.min_member:
            count += 1
            gpus += sum(g.gpus_per_pod[p] for p in on)
    return count, gpus


def integrate_partial(samples: list[Sample], gangs: list[GangRecord], horizon: float) -> float:
    """GPU-seconds held by partial gangs from 0 to ``horizon``, the last state held after."""
    total = 0.0
    for i, s in enumerate(samples):
        if s.t >= horizon:
            break
        end = samples[i + 1].t if i + 1 < len(samples) else horizon
        total += partial_gpus(gangs, s.bound)[1] * (min(end, horizon) - s.t)
    return total


def fit_left(conn: Connection, submitted: list[Submitted], gangs: list[GangRecord],
             bound: frozenset[str], catalog: Catalog) -> int:
    """Gangs not complete that :func:`fit_workload` says would fit in the free capacity now."""
    nodes = conn.request("GET", "/api/v1/nodes").get("items", [])
    pods = conn.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods").get("items", [])
    return gangs_that_fit(nodes=nodes, pods=pods, devices=device_objects(conn, NAMESPACE),
                          submitted=submitted, gangs=gangs, bound=bound, catalog=catalog)


def gangs_that_fit(*, nodes: list[dict[str, Any]], pods: list[dict[str, Any]],
                   devices: list[dict[str, Any]], submitted: list[Submitted],
                   gangs: list[GangRecord], bound: frozenset[str], catalog: Catalog) -> int:
    """:func:`fit_left` on listed objects. ``devices`` (ResourceSlices, DeviceClasses, claims
    and templates) are lowered into the nodes, pods and workloads as Muster's store lowers
    them, so that with DRA GPUs the check counts the free devices and the GPUs each pod's
    claims ask (``muster fit`` does the same). ``nodes`` and ``pods`` may be listed items,
    which carry no ``kind``: lowering goes by it."""
    objects = [s.workload for s in submitted if s.tree.gangs]
    objects += [o for s in submitted for o in s.intermediates]
    lowered = lower_objects([*({**o, "kind": "Node"} for o in nodes),
                             *({**o, "kind": "Pod"} for o in pods), *objects, *devices])
    after_nodes, after_pods = len(nodes), len(nodes) + len(pods)  # lowering keeps the order
    snapshot = build_snapshot(nodes=lowered[:after_nodes], pods=lowered[after_nodes:after_pods],
                              objects=lowered[after_pods:after_pods + len(objects)],
                              catalog=catalog)
    complete = {g.key for g in gangs if sum(p in bound for p in g.pods) >= g.min_member}
    left = 0
    for sub in submitted:
        if not sub.tree.gangs or all(g.key in complete for g in sub.tree.gangs):
            continue
        tree = snapshot.workloads.get(sub.tree.ref.key, sub.tree)  # resolved with its devices
        result = fit_workload(tree, snapshot)
        left += sum(1 for g in result.gangs if g.fits and g.name not in complete)
    return left


def stage(conn: Connection, obj: dict[str, Any], catalog: Catalog, *,
          workload_api: bool) -> tuple[Submitted | None, list[dict[str, Any]]]:
    """Create what exists before any pod: the workload, the Jobs / StatefulSets its operator
    makes, and in gang mode its ``Workload`` and ``PodGroup``s. Returns the pods its
    controllers would then create (owner UIDs filled in), for :func:`interleave`. A bare pod
    is its own only pod."""
    if obj["kind"] == "Pod" and obj["apiVersion"] == "v1":
        return None, [obj]
    sub = submit(conn, obj, catalog, namespace=NAMESPACE, with_children=False)
    descriptor = catalog.require(sub.workload)
    intermediates, pods = children(sub.workload, sub.tree, descriptor)
    uids: dict[tuple[str, str], str] = {}
    made = []
    for item in intermediates:
        done = create(conn, item, "jobs" if item["kind"] == "Job" else "statefulsets")
        uids[(done["kind"], done["metadata"]["name"])] = done["metadata"]["uid"]
        made.append(done)
    groups: list[dict[str, Any]] = []
    if workload_api:  # what submit(..., workload_api=True) does, before the pods
        workload, pod_group_list = pod_groups(sub.workload, sub.tree, descriptor, pods)
        if workload is not None:
            done = create(conn, workload, "workloads")
            uids[("Workload", done["metadata"]["name"])] = done["metadata"]["uid"]
            groups = [done] + [create(conn, adopt(g, uids), "podgroups")
                               for g in pod_group_list]
    staged = Submitted(workload=sub.workload, tree=sub.tree, intermediates=made, pods=[],
                       groups=groups)
    return staged, [adopt(pod, uids) for pod in pods]


def interleave(sequences: list[list[dict[str, Any]]],
               rng: random.Random) -> list[dict[str, Any]]:
    """A uniformly random merge that keeps each workload's own pod order: every controller
    creates its pods in order, all controllers at once."""
    slots = [i for i, seq in enumerate(sequences) for _ in seq]
    rng.shuffle(slots)
    cursors = [0] * len(sequences)
    order = []
    for i in slots:
        order.append(sequences[i][cursors[i]])
        cursors[i] += 1
    return order


def create_pods(box: Sandbox, pods: list[dict[str, Any]], *, workers: int) -> None:
    """POST the pods in order from ``workers`` connections (several controllers at once)."""
    conns = [box.connection() for _ in range(workers)]
    for c in conns:
        c.timeout = 60.0
    lock = threading.Lock()
    queue = iter(pods)

    def work(conn: Connection) -> None:
        while True:
            with lock:
                pod = next(queue, None)
            if pod is None:
                return
            create(conn, pod, "pods")

    threads = [threading.Thread(target=work, args=(c,), daemon=True) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


GATED = {"gates": GateBy.WEBHOOK, "policy": GateBy.POLICY}
"""The additions to ``muster``: what gates new gang pods."""


def parse_mode(text: str) -> tuple[SchedulerMode, int | None, GateBy | None]:
    """``default``, ``gang``, ``muster`` or ``muster:THREADS`` (Muster's gunicorn threads);
    ``muster+gates`` (or ``muster+gates:THREADS``) also serves Muster's admission webhook,
    so gang pods wait behind a scheduling gate until their gang is planned, and
    ``muster+policy`` gates them by the API server's MutatingAdmissionPolicy instead."""
    name, _, threads = text.strip().partition(":")
    name, plus, extra = name.partition("+")
    if plus and extra not in GATED:
        raise ValueError(f"{text}: the only additions are " + ", ".join(f"+{g}" for g in GATED))
    mode = SchedulerMode(name)
    if (threads or plus) and mode is not SchedulerMode.MUSTER:
        raise ValueError(f"{text}: only muster takes :THREADS, " + ", ".join(
            f"+{g}" for g in GATED))
    return mode, int(threads) if threads else None, GATED[extra] if plus else None


def run_mode(label: str, mix: list[dict[str, Any]], spec: MixSpec, *,
             catalog: Catalog, options: argparse.Namespace, say: Callable[[str], None],
             hog: bool = False, round_: int = 0,
             ) -> tuple[ModeResult, list[Sample], list[GangRecord]]:
    """One mode in a fresh sandbox; with ``hog``, a busy process holds one core from the
    first pod created to the end, and the result's label says so, as it says the round
    (``--repeat``) when ``round_`` is set."""
    workdir = options.workdir and str(Path(options.workdir, *(
        [f"round-{round_}"] if round_ else []), "hog" if hog else "plain"))
    with mode_sandbox(label, nodes=spec.nodes, gpus_per_node=spec.gpus_per_node,
                      workdir=workdir, gpu_model=spec.gpu_model) as box:
        shown = label + (HOG if hog else "") + (f"{ROUND}{round_}" if round_ else "")
        return _observe(box, shown, mix, spec, catalog=catalog, options=options, say=say,
                        hog=hog)


@contextlib.contextmanager
def mode_sandbox(label: str, *, nodes: int, gpus_per_node: int,
                 workdir: str | None, gpu_model: str = "device-plugin") -> Iterator[Sandbox]:
    """A sandbox (not yet up) for one mode label; down, and its temp dir gone, on exit."""
    mode, threads, gated = parse_mode(label)
    with contextlib.ExitStack() as stack:
        if threads is not None:  # muster serve reads MUSTER_THREADS; the sandbox passes it on
            previous = os.environ.get("MUSTER_THREADS")
            os.environ["MUSTER_THREADS"] = str(threads)
            stack.callback(_restore_env, "MUSTER_THREADS", previous)
        if workdir:
            directory = Path(workdir) / label.replace(":", "-").replace("+", "-")
        else:
            directory = Path(stack.enter_context(
                tempfile.TemporaryDirectory(prefix=f"bench-peers-{mode.value}-")))
        dra = gpu_model != "device-plugin"
        model = (GpuModel.DRA if gpu_model == "dra-claims" else GpuModel.DRA_EXTENDED
                 ) if dra else GpuModel.DEVICE_PLUGIN
        box = Sandbox(SandboxSpec(directory=directory, nodes=nodes,
                                  gpus_per_node=gpus_per_node, mode=mode,
                                  ports=Ports(), gating=gated is not None,
                                  gate_by=gated or GateBy.WEBHOOK, gpu_model=model,
                                  dra_nodes=nodes if dra else None), say=lambda _m: None)
        try:
            yield box
        finally:
            box.down()


def _restore_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


class ApiServerProfile:
    """A CPU profile of kube-apiserver over the first ``seconds`` of a mode's pods (its
    ``/debug/pprof/profile``), written beside the sandbox's logs: where the control plane's
    time went, to read with ``go tool pprof -top``."""

    def __init__(self, box: Sandbox, conn: Connection, seconds: float) -> None:
        self.path = box.dir / "kube-apiserver.cpu.pprof"
        self.problem = ""

        def fetch() -> None:
            try:
                status, data = api_get(conn, f"/debug/pprof/profile?seconds={seconds:g}",
                                       accept="application/octet-stream",
                                       timeout=seconds + 60)
            except Exception as err:  # refused, timed out...: the note says so
                self.problem = str(err)[:300]
                return
            if status == 200:
                self.path.write_bytes(data)
            else:
                self.problem = f"HTTP {status}: {data.decode(errors='replace').strip()[:300]}"
        self._thread = threading.Thread(target=fetch, name="apiserver-profile", daemon=True)
        self._thread.start()

    def note(self) -> str:
        self._thread.join()
        if self.problem:
            return f"kube-apiserver CPU profile failed: {self.problem}"
        return f"kube-apiserver CPU profile: {self.path} (go tool pprof -top FILE)"


def _observe(box: Sandbox, label: str, mix: list[dict[str, Any]], spec: MixSpec, *,
             catalog: Catalog, options: argparse.Namespace, say: Callable[[str], None],
             hog: bool = False) -> tuple[ModeResult, list[Sample], list[GangRecord]]:
    mode = box.spec.mode
    started = time.monotonic()
    box.up()
    up_s = time.monotonic() - started
    pinned = None
    if options.own_core:  # (the CPUs for the rest, Muster's), split once in main
        rest, musters = options.own_core
        pinned = cpu_pinning.pin_sandbox(box.running(), rest=rest, muster=musters)
    conn = box.connection()
    conn.timeout = 60.0
    conn.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NAMESPACE}})
    if spec.gpu_model == "dra-claims":
        for made in claim_templates(NAMESPACE):
            conn.request("POST", f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/"
                         "resourceclaimtemplates", body=made)
    say(f"[{label}] sandbox up in {up_s:.1f} s; creating workloads and their owners")
    submitted: list[Submitted] = []
    sequences = []
    for obj in mix:
        sub, pods_of = stage(conn, obj, catalog, workload_api=mode is SchedulerMode.GANG)
        if sub is not None:
            submitted.append(sub)
        sequences.append(pods_of)
    order = interleave(sequences, random.Random(spec.seed))
    gangs = [g for s in submitted for g in gang_records(s, catalog)]
    say(f"[{label}] creating {len(order)} pods, interleaved, from {options.creators} "
        "connections")
    watcher = box.connection()
    watcher.timeout = 60.0
    t0 = time.monotonic()
    poller = Poller(watcher, t0, options.poll)
    poller.start()
    cpu = [cpu_pinning.cpu_by_name(box.running())]
    profile = (ApiServerProfile(box, conn, options.profile_apiserver)
               if options.profile_apiserver else None)
    try:
        with contextlib.ExitStack() as hogging:
            if hog:
                hogging.enter_context(CpuHog(limit=options.timeout + 60))
            create_pods(box, order, workers=options.creators)
            submit_s = time.monotonic() - t0
            cpu.append(cpu_pinning.cpu_by_name(box.running()))
            say(f"[{label}] {len(order)} pods created in {submit_s:.1f} s; waiting until "
                f"bound pods are quiet for {options.quiet:.0f} s")
            timed_out = _wait_quiet(poller, submit_s, quiet=options.quiet,
                                    timeout=options.timeout, say=say, mode=label)
    finally:
        poller.stop()
    cpu.append(cpu_pinning.cpu_by_name(box.running()))
    samples = poller.samples
    notes = [f"{poller.errors} polls failed"] if poller.errors else []
    notes.append("CPU-s while pods were created: " + cpu_pinning.cpu_spent(cpu[0], cpu[1]))
    notes.append("CPU-s from the first pod to the end (the quiet window too): "
                 + cpu_pinning.cpu_spent(cpu[0], cpu[2]))
    notes.append(f"poll took {poller.mean_poll_ms():.0f} ms on average")
    if profile is not None:
        notes.append(profile.note())
    if pinned:
        notes.append(pinned)
    left = fit_left(conn, submitted, gangs, samples[-1].bound, catalog)
    gpus_of = {p["metadata"]["name"]: pod_gpus(p) for p in order}
    result = summarize(label, samples, gangs, gpus_of=gpus_of, up_s=up_s,
                       submit_s=submit_s, timed_out=timed_out, fit_left_count=left,
                       notes=notes)
    served = api_metrics(conn)
    result.notes.append("API server: " + latency_note(api_latency(served)))
    result.notes.append("API server requests: " + api_requests(served))
    result.notes.append("API server seconds by request: " + api_time(served))
    events = conn.request("GET", f"/api/v1/namespaces/{NAMESPACE}/events").get("items", [])
    result.notes.append(f"events by writer and reason ({len(events)}): "
                        + event_reasons(events))
    if spec.gpu_model == "dra-claims":
        pods = conn.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods").get("items", [])
        unmade = claims_never_made(pods)
        if unmade:
            result.notes.append(unmade)
    if mode is SchedulerMode.MUSTER:
        result.notes += muster_notes(box)
    if options.probe:
        result.probe = probe(box, catalog, workload_api=mode is SchedulerMode.GANG, say=say,
                             label=label)
    return result, samples, gangs


def free_gpus(conn: Connection) -> int:
    """Allocatable GPUs (and GPUs ResourceSlices publish) minus the GPUs of bound pods."""
    nodes = conn.request("GET", "/api/v1/nodes").get("items", [])
    pods = conn.request("GET", "/api/v1/pods", query={"fieldSelector": "spec.nodeName!="})
    total = sum(int(n["status"].get("allocatable", {}).get(GPU, 0)) for n in nodes)
    slices = conn.request("GET", "/apis/resource.k8s.io/v1/resourceslices").get("items", [])
    total += sum(1 for s in slices if s["spec"]["driver"] == "gpu.nvidia.com"
                 for d in s["spec"].get("devices", [])
                 if d.get("attributes", {}).get("type", {}).get("string") == "gpu")
    return total - sum(pod_gpus(p) for p in pods.get("items", []))


def probe(box: Sandbox, catalog: Catalog, *, workload_api: bool, label: str,
          say: Callable[[str], None], limit: int = 600) -> str:
    """Does this mode gate a gang that cannot fit? One JobSet of 1-GPU pods, one more than
    the free GPUs, after the mix has settled: a gang scheduler binds none of it."""
    conn = box.connection()
    conn.timeout = 60.0
    size = free_gpus(conn) + 1
    if size == 1 or size > limit:
        return f"n/a ({size - 1} free)"
    obj = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
           "metadata": {"name": "probe", "namespace": NAMESPACE},
           "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": {
               "parallelism": size, "completions": size,
               "template": {"spec": {"restartPolicy": "Never",
                                     "containers": [_container(1)]}}}}}]}}
    _, pods = stage(conn, obj, catalog, workload_api=workload_api)
    names = {p["metadata"]["name"] for p in pods}
    say(f"[{label}] probe: a gang of {size} 1-GPU pods, {size - 1} GPUs free")
    create_pods(box, pods, workers=4)
    seen: list[int] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(1.0)
        seen.append(len(names & bound_pods(conn)))
        if len(seen) >= 25 and len(set(seen[-10:])) == 1:  # Muster's bind timeout is 20 s
            break
    return f"{seen[-1]}/{size}"


def _wait_quiet(poller: Poller, submit_s: float, *, quiet: float, timeout: float,
                say: Callable[[str], None], mode: str) -> bool:
    """Until the bound count has not changed for ``quiet`` s; ``True`` if ``timeout`` hit."""
    last_report = 0.0
    while True:
        time.sleep(poller.interval)
        samples = poller.samples
        if not samples:
            continue
        now = samples[-1].t
        if now - last_report >= 15:
            say(f"[{mode}]   t={now:5.0f} s  bound {len(samples[-1].bound)}")
            last_report = now
        changed = _last_change(samples)
        if now >= submit_s + quiet and now - changed >= quiet:
            return False
        if now >= timeout:
            return True


def _last_change(samples: list[Sample]) -> float:
    """The time of the first poll that saw the final bound count."""
    final = len(samples[-1].bound)
    t = samples[-1].t
    for s in reversed(samples):
        if len(s.bound) != final:
            break
        t = s.t
    return t


def summarize(mode: str, samples: list[Sample], gangs: list[GangRecord], *,
              gpus_of: dict[str, int], up_s: float, submit_s: float, timed_out: bool,
              fit_left_count: int, notes: list[str]) -> ModeResult:
    final = samples[-1].bound
    settle = _last_change(samples)
    complete_at: list[float] = []
    for g in gangs:
        if sum(p in final for p in g.pods) < g.min_member:
            continue
        complete_at.append(next(s.t for s in samples
                                if sum(p in s.bound for p in g.pods) >= g.min_member))
    partial_end, stranded = partial_gpus(gangs, final)
    peak = max(partial_gpus(gangs, s.bound)[0] for s in samples)
    in_gangs = {p for g in gangs for p in g.pods}
    waiting = sum(1 for g in gangs if not any(p in final for p in g.pods))
    series = []
    for s in samples:
        whole = sum(1 for g in gangs if sum(p in s.bound for p in g.pods) >= g.min_member)
        series.append((round(s.t, 2), len(s.bound), whole, *partial_gpus(gangs, s.bound)))
    pods = len(gpus_of)
    return ModeResult(
        mode=mode, up_s=round(up_s, 1), submit_s=round(submit_s, 1),
        observed_s=round(samples[-1].t, 1), timed_out=timed_out, pods=pods, bound=len(final),
        settle_s=round(settle, 1),
        pods_per_s=round(len(final) / settle, 1) if settle > 0 else 0.0,
        last_gang_s=round(max(complete_at), 1) if complete_at else None,
        gangs_complete=len(complete_at), fit_left=fit_left_count, partial_end=partial_end,
        partial_peak=peak, stranded_gpus=stranded,
        gangs_waiting=waiting, gpus_bound=sum(gpus_of.get(p, 0) for p in final),
        singles_bound=len(final - in_gangs), notes=notes, series=series)


def api_get(conn: Connection, path: str, *, accept: str, timeout: float) -> tuple[int, bytes]:
    """A GET of one of the API server's own paths whose body is not JSON (``/metrics``,
    ``/debug/pprof/...``): its status and raw body."""
    method, url, headers, _body, _post = conn.api.param_serialize(
        "GET", path, header_params={"Accept": accept}, auth_settings=["BearerToken"])
    response = conn.api.call_api(method, url, header_params=headers, _request_timeout=timeout)
    return int(response.status), bytes(response.read())  # type: ignore[no-untyped-call]


def api_metrics(conn: Connection) -> str:
    """The API server's /metrics text (Prometheus format, not JSON)."""
    try:
        return api_get(conn, "/metrics", accept="text/plain", timeout=30)[1].decode()
    except Exception as err:  # a figure for the report, never the bench's failure
        return f"# unreachable: {err}"


def muster_notes(box: Sandbox) -> list[str]:
    """A few of Muster's own counters at the end (its /metrics), for the report."""
    url = f"http://127.0.0.1:{box.ports.muster}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
    except OSError as err:
        return [f"muster /metrics unreachable: {err}"]
    keep = ("muster_gangs", "muster_decisions_total", "muster_request_seconds_sum",
            "muster_request_seconds_count")
    lines = [line for line in text.splitlines()
             if line.startswith(keep) and not line.startswith("#")]
    return [latency_note(verb_latency(text)), *lines[:30]]


# -- output ---------------------------------------------------------------------------------------
COLUMNS = (("mode", "mode", "{}"), ("pods/s", "pods_per_s", "{:.1f}"),
           ("settle s", "settle_s", "{:.1f}"), ("last gang s", "last_gang_s", "{:.1f}"),
           ("pods bound", "bound", "{}"), ("GPUs bound", "gpus_bound", "{}"),
           ("gangs whole", "gangs_complete", "{}"), ("partial end", "partial_end", "{}"),
           ("partial peak", "partial_peak", "{}"), ("none bound", "gangs_waiting", "{}"),
           ("fit left", "fit_left", "{}"), ("stranded GPUs", "stranded_gpus", "{}"),
           ("partial GPU-s", "partial_gpu_s", "{:.0f}"), ("probe", "probe", "{}"))


def table(results: list[ModeResult]) -> str:
    columns = [c for c in COLUMNS if c[1] != "probe" or any(r.probe != "-" for r in results)]
    rows = [[name for name, _, _ in columns]]
    for r in results:
        data = asdict(r)
        rows.append(["-" if data[key] is None else fmt.format(data[key])
                     for _, key, fmt in columns])
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    lines = ["  ".join(cell.rjust(w) if i else cell.ljust(w)
                       for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
             for row in rows]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def configuration(spec: MixSpec, mix: list[dict[str, Any]], catalog: Catalog) -> dict[str, Any]:
    gangs = pods = gang_pods = gpus = 0
    kinds: dict[str, int] = {}
    sizes: list[int] = []
    claims = [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", **t}
              for t in claim_templates(NAMESPACE)] + device_classes(GpuModel.DRA)
    for listed in mix:
        kinds[listed["kind"]] = kinds.get(listed["kind"], 0) + 1
        obj = lower_objects([{**listed, "metadata": {**listed["metadata"],
                                                      "namespace": NAMESPACE}}, *claims])[0]
        tree = resolve_workload({**obj, "metadata": {**obj["metadata"], "uid": "x"}},
                                catalog.require(obj))
        pods += tree.pods
        gpus += tree.gpus
        gangs += len(tree.gangs)
        gang_pods += sum(g.pods for g in tree.gangs)
        sizes += [g.pods for g in tree.gangs]
    capacity = spec.nodes * spec.gpus_per_node
    return {"seed": spec.seed, "nodes": spec.nodes, "gpus_per_node": spec.gpus_per_node,
            "gpu_capacity": capacity, "workloads": kinds, "gangs": gangs,
            "gang_sizes": f"{min(sizes)}..{max(sizes)} pods" if sizes else "-",
            "gang_pods": gang_pods, "non_gang_pods": pods - gang_pods, "pods": pods,
            "gpus_demanded": gpus, "oversubscription": round(gpus / capacity, 2),
            "gpu_model": spec.gpu_model}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--nodes", type=int, default=MixSpec.nodes)
    parser.add_argument("--gpus-per-node", type=int, default=MixSpec.gpus_per_node)
    parser.add_argument("--gangs", type=int, default=MixSpec.gangs)
    parser.add_argument("--singles", type=int, default=MixSpec.singles,
                        help="bare non-gang pods")
    parser.add_argument("--seed", type=int, default=MixSpec.seed)
    parser.add_argument("--gpu-model", choices=GPU_MODELS, default=MixSpec.gpu_model,
                        help="how pods get GPUs: the device plugin's nvidia.com/gpu, the same "
                             "requests served by DRA (dra-extended), or claims (dra-claims)")
    parser.add_argument("--modes", default="default,gang,muster",
                        help="comma-separated: default, gang, muster, muster:THREADS "
                             "(Muster with that many server threads; default 32)")
    parser.add_argument("--poll", type=float, default=0.5, help="seconds between polls")
    parser.add_argument("--quiet", type=float, default=40.0,
                        help="bound pods unchanged this long = quiescent; keep it above "
                             "Muster's bind timeout (20 s) and plan TTL (30 s)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="stop observing a mode after this many seconds")
    parser.add_argument("--horizon", type=float, default=120.0,
                        help="seconds over which partial gangs' GPU-seconds are summed")
    parser.add_argument("--creators", type=int, default=4,
                        help="connections creating pods at once (default 4)")
    parser.add_argument("--workdir", metavar="DIR",
                        help="keep each mode's sandbox (logs) in DIR/MODE instead of a temp dir")
    parser.add_argument("--probe", action="store_true",
                        help="after each mode, submit a gang one GPU larger than the free "
                             "GPUs and count its bound members (n/a on a full cluster)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="run every mode N times, in N rounds one after another; print "
                             "each round's ratios and their medians (the machine's drift "
                             "cancels out of ratios within a round)")
    parser.add_argument("--hog", action="store_true",
                        help="run every mode again with a busy process on one core, and "
                             "print each mode's slowdown")
    parser.add_argument("--own-core", action="store_true",
                        help="Muster's processes on CPUs of their own, the bench and the "
                             "control plane on the first CPU, in every mode (cpu_pinning.py)")
    parser.add_argument("--profile-apiserver", type=float, metavar="SECONDS",
                        help="take a CPU profile of kube-apiserver over the first SECONDS "
                             "of each mode's pods, kept with the sandbox (use --workdir)")
    parser.add_argument("--min-gang", type=int,
                        help="pods of the smallest JobSet gang (default 2)")
    parser.add_argument("--max-gang", type=int,
                        help="pods of the largest JobSet gang (default 16; streamed: 8)")
    stream = parser.add_argument_group(
        "streamed mode", "workloads arrive over time and finish (peer_stream.py); "
        "--gangs, --singles, --quiet, --timeout, --horizon and --probe do not apply")
    stream.add_argument("--streamed", action="store_true",
                        help="arrivals over time, each workload running for a seeded time")
    stream.add_argument("--arrival-rate", type=float, default=40.0,
                        help="workloads (gangs and singles) per minute, Poisson (default 40)")
    stream.add_argument("--duration", type=float, default=150.0,
                        help="seconds of arrivals, and the utilisation window (default 150)")
    stream.add_argument("--drain", type=float, default=60.0,
                        help="after the window, seconds more for the last gangs to start")
    stream.add_argument("--single-fraction", type=float, default=0.4,
                        help="share of arrivals that are one bare pod (default 0.4)")
    stream.add_argument("--runtime-min", type=int, default=20,
                        help="a workload's pods run min..max seconds once Ready (default 20)")
    stream.add_argument("--runtime-max", type=int, default=60)
    args = parser.parse_args(argv)

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    if args.profile_apiserver and (args.streamed or not args.workdir):
        parser.error("--profile-apiserver needs --workdir (the profile is kept with the "
                     "sandbox) and applies to the burst only")
    if args.streamed and args.own_core:
        parser.error("--own-core applies to the burst only, not to --streamed")
    if args.streamed:  # its own module: imported only when asked for
        from tests.bench.peer_stream_run import run_streamed  # noqa: PLC0415
        return run_streamed(args, say)
    spec = MixSpec(nodes=args.nodes, gpus_per_node=args.gpus_per_node, gangs=args.gangs,
                   singles=args.singles, seed=args.seed,
                   min_gang=args.min_gang or MixSpec.min_gang,
                   max_gang=args.max_gang or MixSpec.max_gang, gpu_model=args.gpu_model)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    for m in modes:
        parse_mode(m)
    catalog = packaged_catalog()
    mix = generate(spec)
    config = configuration(spec, mix, catalog)

    if args.own_core:  # split before the first mode pins this process to its part
        args.own_core = cpu_pinning.split(os.sched_getaffinity(0))
        config["own_core"] = "rest on CPU {} and Muster on CPU {}".format(
            *(sorted(c) for c in args.own_core))
    print("configuration: " + ", ".join(f"{k}={v}" for k, v in config.items()), flush=True)
    runs = []
    repeat = max(1, args.repeat)
    for round_ in range(1, repeat + 1):  # every mode once per round, rounds one by one
        tag = round_ if repeat > 1 else 0
        for mode in modes:
            runs.append(run_mode(mode, mix, spec, catalog=catalog, options=args, say=say,
                                 round_=tag))
        if args.hog:  # the same modes again, each with a busy process on one core
            for mode in modes:
                runs.append(run_mode(mode, mix, spec, catalog=catalog, options=args,
                                     say=say, hog=True, round_=tag))
    horizon = args.horizon
    for result, samples, gangs in runs:
        result.partial_gpu_s = round(integrate_partial(samples, gangs, horizon), 1)
    results = [r for r, _, _ in runs]
    print()
    print(table(results))
    print(f"\npartial GPU-s: over the first {horizon:.0f} s after the first pod; "
          f"sandbox up / submission / observed, s: " + "; ".join(
              f"{r.mode} {r.up_s:.0f}/{r.submit_s:.0f}/{r.observed_s:.0f}"
              + (" (timed out)" if r.timed_out else "") for r in results))
    for r in results:
        for note in r.notes:
            print(f"  {r.mode}: {note}")
    figures = [Figures(r.mode, r.settle_s, r.pods_per_s, r.gangs_complete, r.partial_end)
               for r in results]
    grouped = rounds(figures)
    for k, one in enumerate(grouped, start=1):
        compared = ratios(one)
        if compared:
            print("\nratios in this run:" if len(grouped) == 1 else f"\nratios in round {k}:")
            for line in compared:
                print(f"  {line}")
    over = repeated_ratios(figures)
    if over:
        print(f"\nover the {len(grouped)} rounds:")
        for line in over:
            print(f"  {line}")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"configuration": config, "horizon_s": horizon,
             "quiet_s": args.quiet, "poll_s": args.poll,
             "results": [asdict(r) for r in results]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
