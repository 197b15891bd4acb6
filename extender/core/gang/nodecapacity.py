"""What one node has free and what one pod takes from it, with GPUs counted per device.

A node's free capacity is its allocatable minus the requests of the pods on it that are not
terminal. GPUs are tracked per device, because a node with two half-used devices cannot take a
one-GPU pod although one GPU is "free" in sum. A node has N devices of 1000 milli each. A pod
requesting whole GPUs takes whole free devices; a sharing pod (``PodShape.gpu_share``) takes
milli from ONE device.

A node's ``pods`` allocatable (its maximum number of pods) is tracked as free pod slots beside
the scalar resources: every pod takes one, as kube-scheduler's NodeResourcesFit counts them.
A node that declares no ``pods`` allocatable (trace files) has no such limit.

Values only: counting and charging pods is :mod:`~extender.core.gang.charging`'s, capacity
across a snapshot's nodes :mod:`~extender.core.gang.capacity`'s. Nothing here reads a snapshot.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from extender.core.model.resources import EMPTY, GPU, PODS, Resources
from extender.core.model.values import NodeInfo, PodShape

DEVICE = 1000
"""Milli of one GPU device."""

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
    (see :func:`~extender.core.gang.charging.count_fitting`). Pods listing their devices are
    charged there and never set it."""
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
