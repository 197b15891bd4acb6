"""Per-node free capacity, with GPUs counted per device.

A node's free capacity is its allocatable minus the requests of the pods bound to it that are
not terminal. The ledger then subtracts pods in flight and reservations held for gangs (see
:mod:`extender.core.gang.ledger`); this module only knows the arithmetic.

GPUs are tracked per device, because a node with two half-used devices cannot take a
one-GPU pod although one GPU is "free" in sum. A node has N devices of 1000 milli each. A pod
requesting whole GPUs takes whole free devices; a sharing pod (``PodShape.gpu_share``) takes
milli from ONE device, best fit first (the device with the least room that still holds it), so
that sharing pods pack together and leave whole devices whole.

A node's ``pods`` allocatable (its maximum number of pods) is tracked as free pod slots beside
the scalar resources: every pod takes one, as kube-scheduler's NodeResourcesFit counts them.
A node that declares no ``pods`` allocatable (trace files) has no such limit.

Nothing here is ever summed across nodes.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from extender.core.model.resources import EMPTY, GPU, PODS, Resources
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.sortednames import SortedNames
from extender.core.model.values import Gang, NodeInfo, NodeName, PodInfo, PodShape

DEVICE = 1000
"""Milli of one GPU device."""

_MANY = 1 << 30

MAX_DEVICES = 1024
"""GPU devices modelled per node at most. Real nodes have 4 to 16; a node that reports more
(a broken device plugin, a hand-edited status) is taken to have this many, so its per-device
picture stays small. Fewer GPUs than reported never oversubscribes."""


@dataclass(frozen=True, slots=True)
class Demand:
    """What one pod of a shape takes from a node: scalar resources plus its GPU part."""

    scalar: Resources
    """Every requested resource except the GPU resource (checked per device instead)."""
    whole: int = 0
    """Whole GPU devices."""
    share: int = 0
    """Milli of one device, for a GPU-sharing pod."""

    @property
    def gpu_milli(self) -> int:
        return self.whole * DEVICE + self.share

    def sort_key(self) -> tuple[int, int, tuple[int, ...]]:
        """Bigger demands sort first (negated), so placement tries the hard pods early."""
        return (-self.whole, -self.share, tuple(-v for v in self.scalar.values()))


def demand_of(shape: PodShape, *, gpu: str = GPU) -> Demand:
    """Split a shape's requests into the scalar part and the per-device GPU part."""
    requested = shape.requests.get(gpu, 0)
    scalar = shape.requests - Resources({gpu: requested}) if requested else shape.requests
    if shape.gpu_share > 0:
        # A sharing pod's device share is authoritative; a ``gpu: 1`` beside it names the
        # device it shares, not an extra whole device.
        return Demand(scalar=scalar, share=min(shape.gpu_share, DEVICE))
    return Demand(scalar=scalar, whole=-(-requested // DEVICE))


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    """What a node has free now. Negative scalar amounts mean it is oversubscribed."""

    free: Resources
    """Free scalar resources (the GPU resource and ``pods`` excluded)."""
    devices: tuple[int, ...] = ()
    """Free milli per GPU device, by device index."""
    pods: int | None = None
    """Free pod slots: the node's ``pods`` allocatable minus the pods on it; ``None`` when the
    node declares no limit."""
    whole_free: int = field(init=False, compare=False, repr=False)
    """Devices nobody uses at all: what a whole-GPU request can take."""
    unpacked: bool = False
    """A pod charged without a device index found no device with room and was charged to one
    anyway: the per-device picture is then no packing of the pods on the node (they may pack
    in another order, or not), so where another share would go is unknown and none is placed
    (see :func:`count_fitting`). Pods listing their devices are charged there and never set it."""
    gpu_milli_free: int = field(init=False, compare=False, repr=False)
    _hash: int = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        # Derived once: placement asks for these for every candidate node.
        object.__setattr__(self, "whole_free", sum(1 for d in self.devices if d >= DEVICE))
        object.__setattr__(self, "gpu_milli_free", sum(max(d, 0) for d in self.devices))
        # Capacities key capacity classes and per-call memos, once per node looked at.
        object.__setattr__(self, "_hash", hash((self.free, self.devices, self.pods,
                                                self.unpacked)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[NodeCapacity], tuple[Resources, tuple[int, ...],
                                                           int | None, bool]]:
        # Built again where unpickled: string hashes differ from one process to the next.
        return (NodeCapacity, (self.free, self.devices, self.pods, self.unpacked))

    @property
    def partial_devices(self) -> int:
        """Devices partly used by sharing pods: the fragments whole-GPU pods cannot use."""
        return sum(1 for d in self.devices if 0 < d < DEVICE)

    def oversubscribed(self) -> dict[str, int]:
        """Resources driven below zero (a GPU device below zero shows as ``gpu[i]``)."""
        over = self.free.negative()
        over.update({f"gpu[{i}]": d for i, d in enumerate(self.devices) if d < 0})
        if self.pods is not None and self.pods < 0:
            over[PODS] = self.pods
        return over


EMPTY_KEPT = 16_384
"""Nodes whose empty capacity is kept (prioritize asks it of every candidate node)."""


@functools.lru_cache(maxsize=EMPTY_KEPT)
def empty_capacity(node: NodeInfo, *, gpu: str = GPU) -> NodeCapacity:
    """What ``node`` has free with nothing on it. Kept per node value (nodes are immutable
    values, shared by the snapshots until the node changes): every prioritize asks it of every
    candidate node, and working it out cost 8 us a node, looking it up under one."""
    allocatable = node.allocatable.get(gpu, 0)
    slots = node.allocatable.get(PODS, 0)
    scalar = node.allocatable - Resources({gpu: allocatable, PODS: slots})
    return NodeCapacity(free=scalar, devices=(DEVICE,) * min(allocatable // DEVICE, MAX_DEVICES),
                        pods=slots // 1000 if PODS in node.allocatable else None)


def count_fitting(cap: NodeCapacity, demand: Demand) -> int:
    """How many pods of ``demand`` fit on a node with ``cap`` free (at most 2**30)."""
    n = demand.scalar.count_fitting(cap.free) if demand.scalar else _MANY
    if cap.pods is not None:
        n = min(n, cap.pods)
    if n <= 0:
        return 0
    if demand.whole:
        n = min(n, cap.whole_free // demand.whole)
    elif demand.share:
        # A share was forced onto a full device: the picture is no packing of the shares
        # charged (they may or may not pack in another order), so one more could oversubscribe.
        if cap.unpacked:
            return 0
        n = min(n, sum(d // demand.share for d in cap.devices if d > 0))
    return n


def fits(cap: NodeCapacity, demand: Demand) -> bool:
    return count_fitting(cap, demand) > 0


def _take_devices(devices: list[int], demand: Demand, count: int, *, force: bool) -> bool:
    """Charge ``count`` pods of ``demand`` to ``devices`` in place; whether any was forced
    onto a device without room. As if pod by pod (whole GPUs: the first free devices by index;
    a share: best fit, the device with the least room that still holds it; a pod with no room
    left: the device with the most), but in O(devices log devices) however many pods or GPUs:
    an observed pod may ask for a billion GPUs (the API server accepts it)."""
    if demand.whole:
        need = demand.whole * count
        free = [i for i, d in enumerate(devices) if d >= DEVICE]
        for i in free[:need]:
            devices[i] -= DEVICE
        short = need - min(need, len(free))
        if not short:
            return False
        if not force:
            raise ValueError("not enough whole GPU devices")
        # Observed pods may already oversubscribe; charge the emptiest devices so the
        # oversubscription shows on a device instead of vanishing.
        _level(devices, DEVICE, short)
        return True
    if not demand.share:
        return False
    left = count
    # Best fit for equal shares fills the device with the least room until it holds no more,
    # then the next: devices in order of room, each filled at once.
    for i in sorted((i for i, d in enumerate(devices) if d >= demand.share),
                    key=lambda i: (devices[i], i)):
        k = min(left, devices[i] // demand.share)
        devices[i] -= k * demand.share
        left -= k
        if not left:
            return False
    if not force:
        raise ValueError("no GPU device has room for the share")
    _level(devices, demand.share, left)
    return True


def _level(devices: list[int], step: int, times: int) -> None:
    """Charge ``step`` milli ``times`` times, each time to the device with the most room (ties:
    the lowest index), as repeated single charges would, in O(devices log devices)."""
    n = len(devices)
    if not n or times <= 0:
        return
    if times > 2 * n:
        # Past the first rounds the devices take turns: whole rounds are one subtraction each.
        rounds = times // n - 1
        for i in range(n):
            devices[i] -= rounds * step
        times -= rounds * n
    heap = [(-d, i) for i, d in enumerate(devices)]
    heapq.heapify(heap)
    for _ in range(times):
        room, i = heapq.heappop(heap)
        devices[i] -= step
        heapq.heappush(heap, (room + step, i))


def take(cap: NodeCapacity, demand: Demand, count: int = 1, *, force: bool = False) -> NodeCapacity:
    """``cap`` after ``count`` pods of ``demand`` start. Raises ``ValueError`` if they do not fit,
    unless ``force`` (observed pods are charged even when the node is already full)."""
    if count <= 0:
        return cap
    if not force and count_fitting(cap, demand) < count:
        raise ValueError("pods do not fit")
    free = cap.free - demand.scalar.scale(count) if demand.scalar else cap.free
    pods = None if cap.pods is None else cap.pods - count
    if not demand.whole and not demand.share:
        return NodeCapacity(free=free, devices=cap.devices, pods=pods, unpacked=cap.unpacked)
    devices = list(cap.devices)
    forced = _take_devices(devices, demand, count, force=force)
    return NodeCapacity(free=free, devices=tuple(devices), pods=pods,
                        unpacked=cap.unpacked or forced)


def charge_pod(cap: NodeCapacity, pod: PodInfo, *, gpu: str = GPU) -> NodeCapacity:
    """Charge an observed pod; its known device indexes win over the default choice.

    A pod is never charged less than it requests: one listing fewer devices than the whole
    GPUs it asks for is charged the listed devices plus free ones for the rest (a sharing pod
    is charged its share on each device it lists).
    """
    demand = demand_of(pod.shape, gpu=gpu)
    listed = sorted({i for i in pod.gpu_devices if 0 <= i < len(cap.devices)})
    if not listed or not (demand.whole or demand.share):
        return take(cap, demand, 1, force=True)
    devices = list(cap.devices)
    per_device = DEVICE if demand.whole else demand.share
    for i in listed:
        devices[i] -= per_device
    missing = demand.whole - len(listed)
    forced = missing > 0 and _take_devices(devices, Demand(scalar=EMPTY, whole=missing), 1,
                                           force=True)
    return NodeCapacity(free=cap.free - demand.scalar, devices=tuple(devices),
                        pods=None if cap.pods is None else cap.pods - 1,
                        unpacked=cap.unpacked or forced)


def _charge_order(pod: PodInfo) -> tuple[int, int, str]:
    # Pods with known devices first (they pin devices), then whole-GPU pods, then shares
    # largest first (best fit decreasing packs what an arbitrary order leaves overfull); the
    # fixed order makes the per-device picture the same on every rebuild.
    if pod.gpu_devices:
        return (0, 0, pod.uid)
    share = pod.shape.gpu_share
    return (1, 0, pod.uid) if share == 0 else (2, -share, pod.uid)


def node_capacity(
    node: NodeInfo, pods: Iterable[PodInfo], *, gpu: str = GPU
) -> NodeCapacity:
    cap = empty_capacity(node, gpu=gpu)
    for pod in sorted(pods, key=_charge_order):
        cap = charge_pod(cap, pod, gpu=gpu)
    return cap


Classes = dict[NodeCapacity, SortedNames[NodeName]]


class Capacities(Mapping[NodeName, NodeCapacity]):
    """Free capacity per node, read-only, with its *capacity classes* (nodes grouped by
    identical free capacity, names sorted) derived once.

    Large clusters have few distinct free capacities (most nodes are empty or alike), so
    placement ranks these classes instead of every node. A source that keeps the classes up
    to date as capacity changes (the simulator, the live reindexer) hands them in."""

    __slots__ = ("_classes", "_data")

    def __init__(self, data: Mapping[NodeName, NodeCapacity], *,
                 classes: Classes | None = None) -> None:
        self._data = data
        self._classes = classes

    def __getitem__(self, name: NodeName) -> NodeCapacity:
        return self._data[name]

    def __iter__(self) -> Iterator[NodeName]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, name: object) -> bool:
        return name in self._data

    @property
    def classes(self) -> Classes:
        if self._classes is None:
            self._classes = _group(self._data)
        return self._classes


def _group(base: Mapping[NodeName, NodeCapacity]) -> Classes:
    grouped: dict[NodeCapacity, list[NodeName]] = {}
    for name in sorted(base):
        grouped.setdefault(base[name], []).append(name)
    return {cap: SortedNames(names) for cap, names in grouped.items()}


def moved_classes(classes: Classes, before: Mapping[NodeName, NodeCapacity],
                  moved: Mapping[NodeName, NodeCapacity | None]) -> Classes:
    """``classes`` with each moved node taken out of its class in ``before`` (if it had one)
    and put in the class of its new capacity (``None``: the node is gone). Each move copies
    one chunk of each class it touches, never a whole class."""
    if not moved:
        return classes
    out = dict(classes)
    for name, after in moved.items():
        old = before.get(name)
        if old is not None:
            rest = out[old].removing(name)
            if rest:
                out[old] = rest
            else:
                del out[old]
        if after is not None:
            out[after] = out.get(after, _NO_NAMES).adding(name)
    return out


_NO_NAMES: SortedNames[NodeName] = SortedNames()


def classes_of(base: Mapping[NodeName, NodeCapacity]) -> Classes:
    """Nodes grouped by identical free capacity (sorted names); derived once per
    :class:`Capacities`, computed afresh for any other mapping."""
    if isinstance(base, Capacities):
        return base.classes
    return _group(base)


@dataclass(frozen=True)
class SnapshotIndex:
    """Values derived once per snapshot: base capacity and who is where."""

    base: Capacities
    """Allocatable minus bound, non-terminal pods, for every node."""
    pods_on: Mapping[NodeName, tuple[str, ...]]
    """UIDs of the pods holding resources on each node."""
    gang_pods: Mapping[str, tuple[str, ...]]
    """Gang key -> UIDs of its pods that exist, sorted."""
    eligible: dict[PodShape, tuple[NodeName, ...]] = field(default_factory=dict)
    """Memo: shape -> nodes its constraints allow (filled by :func:`eligible_for`)."""


def _build_index(snapshot: ClusterSnapshot, gpu: str) -> SnapshotIndex:
    on: dict[NodeName, list[PodInfo]] = {}
    for pod in snapshot.pods.values():
        if pod.holds_resources and pod.node_name is not None:
            on.setdefault(pod.node_name, []).append(pod)
    base = {
        name: node_capacity(node, on.get(name, ()), gpu=gpu)
        for name, node in snapshot.nodes.items()
    }
    gang_pods: dict[str, list[str]] = {}
    for uid, member in snapshot.memberships.items():
        if member.gang is not None and uid in snapshot.pods:
            gang_pods.setdefault(member.gang, []).append(uid)
    return SnapshotIndex(
        base=Capacities(MappingProxyType(base)),
        pods_on=MappingProxyType({n: tuple(sorted(p.uid for p in ps)) for n, ps in on.items()}),
        gang_pods=MappingProxyType({k: tuple(sorted(v)) for k, v in gang_pods.items()}),
    )


def index_of(snapshot: ClusterSnapshot, *, gpu: str = GPU) -> SnapshotIndex:
    """The snapshot's index, derived once per snapshot and kept on it."""
    key = f"index:{gpu}"
    found = snapshot.derived.get(key)
    if isinstance(found, SnapshotIndex):
        return found
    index = _build_index(snapshot, gpu)
    snapshot.derived[key] = index
    return index


GATED = "gated"


def is_gated(pod: PodInfo) -> bool:
    """Whether ``pod`` waits behind a scheduling gate: it has one, is not bound and is not
    being deleted (kube-scheduler keeps it out of its queue)."""
    return bool(pod.gates) and pod.node_name is None and not pod.deleting


def gated_of(snapshot: ClusterSnapshot) -> frozenset[str]:
    """UIDs of the snapshot's gated pods (:func:`is_gated`), derived once per snapshot, or
    kept by the source (:func:`attach_gated`) so ungating looks at them without a pass over
    every pod after each event."""
    found = snapshot.derived.get(GATED)
    if isinstance(found, frozenset):
        return found
    gated = frozenset(p.uid for p in snapshot.pods.values() if is_gated(p))
    snapshot.derived[GATED] = gated
    return gated


def attach_gated(snapshot: ClusterSnapshot, gated: frozenset[str]) -> None:
    """Give a snapshot just built its gated pods, kept by a source that sees which pods
    changed; ``gated`` must be what :func:`gated_of` would derive."""
    snapshot.derived[GATED] = gated


STAMPS = "gang-stamps"


def attach_gang_stamps(snapshot: ClusterSnapshot, stamps: Mapping[str, int]) -> None:
    """Give a snapshot just built, by a source that sees which pods changed, a stamp per gang
    that is new whenever one of the gang's pods, or the set or roles of its members, changed.
    A stamp is never given twice, even by another source (after a relist), so what was
    derived from a gang's pods may be kept while its stamp stays."""
    snapshot.derived[STAMPS] = stamps


def gang_stamps(snapshot: ClusterSnapshot) -> Mapping[str, int] | None:
    """The stamps :func:`attach_gang_stamps` gave, or ``None``: derive afresh."""
    found = snapshot.derived.get(STAMPS)
    return found if isinstance(found, Mapping) else None


def gang_priority(gang: Gang, snapshot: ClusterSnapshot, *, gpu: str = GPU) -> int:
    """The gang's priority: the highest of its templates' and its pods' own.

    Operators' pod templates name a ``priorityClassName``, rarely a number; admission writes
    the class's value into each pod's ``spec.priority``. So a gang read from its templates
    alone has priority 0 until its pods exist, and every decision about a gang is made once
    they do."""
    pods = index_of(snapshot, gpu=gpu).gang_pods.get(gang.key, ())
    return max([gang.priority, *(snapshot.pods[u].shape.priority for u in pods
                                 if u in snapshot.pods)])


def attach_index(snapshot: ClusterSnapshot, index: SnapshotIndex, *, gpu: str = GPU) -> None:
    """Give a snapshot just built its index, instead of letting the core derive it.

    For a source that keeps base capacity up to date as pods come and go (the simulator, the
    live reindexer): deriving it again for every snapshot is a pass over every node and pod.
    ``index`` must be what :func:`index_of` would compute.
    """
    snapshot.derived[f"index:{gpu}"] = index


def attach_empty(snapshot: ClusterSnapshot, empty: Capacities, *, gpu: str = GPU) -> None:
    """Give a snapshot just built the empty capacities of its nodes (:func:`empty_of`), kept
    by a source whose nodes did not change since the last snapshot."""
    snapshot.derived[f"empty:{gpu}"] = empty


def empty_of(snapshot: ClusterSnapshot, *, gpu: str = GPU) -> Capacities:
    """Every node's capacity with nothing on it, derived once per snapshot (sources pass it
    along while their nodes do not change: :func:`attach_empty`), so "would it fit an empty
    cluster?" costs no pass over 5,000 nodes."""
    key = f"empty:{gpu}"
    found = snapshot.derived.get(key)
    if isinstance(found, Capacities):
        return found
    empty = Capacities(MappingProxyType({n: empty_capacity(node, gpu=gpu)
                                         for n, node in snapshot.nodes.items()}))
    snapshot.derived[key] = empty
    return empty


class CapacityView(Mapping[NodeName, NodeCapacity]):
    """Base capacity with a few nodes changed, without copying the base (5,000 nodes)."""

    __slots__ = ("base", "changes")

    def __init__(
        self, base: Mapping[NodeName, NodeCapacity],
        changes: Mapping[NodeName, NodeCapacity] | None = None,
    ) -> None:
        self.base = base
        self.changes: dict[NodeName, NodeCapacity] = dict(changes or {})

    def __getitem__(self, name: NodeName) -> NodeCapacity:
        cap = self.changes.get(name)
        return cap if cap is not None else self.base[name]

    def __iter__(self) -> Iterator[NodeName]:
        return iter(self.base)

    def __len__(self) -> int:
        return len(self.base)

    def __contains__(self, name: object) -> bool:
        return name in self.base


def describe_free(cap: NodeCapacity) -> str:
    """``"4 whole GPUs, cpu=12, memory=64Gi"`` for reasons people read."""
    parts = [f"{cap.whole_free} whole GPUs"] if cap.devices else []
    if cap.partial_devices:
        parts.append(f"{cap.partial_devices} shared devices")
    rendered = cap.free.render() if cap.free != EMPTY else ""
    if rendered:
        parts.append(rendered)
    if cap.pods is not None:
        parts.append(f"{max(cap.pods, 0)} pod slots")
    return ", ".join(parts) or "nothing"
