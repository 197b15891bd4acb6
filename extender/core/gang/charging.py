"""The arithmetic of one node's free capacity: how many pods of a demand fit
(:func:`count_fitting`), the capacity after they start (:func:`take`), and after an observed
pod is charged (:func:`charge_pod`, :func:`node_capacity`).

A sharing pod takes milli from one device, best fit first (the device with the least room that
still holds it), so that sharing pods pack together and leave whole devices whole. Per node
only: nothing here is ever summed across nodes, and nothing reads a snapshot.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from extender.core.gang.nodecapacity import DEVICE, Demand, NodeCapacity, demand_of, empty_capacity
from extender.core.model.resources import EMPTY, GPU
from extender.core.model.values import NodeInfo, PodInfo

_MANY = 1 << 30


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
