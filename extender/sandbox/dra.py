"""Fake GPUs that exist only through DRA, as NVIDIA's GPU DRA driver publishes them.

No driver runs in the sandbox: the sandbox itself posts, once, the DeviceClasses NVIDIA's chart
ships (kubernetes-sigs/dra-driver-nvidia-gpu, ``templates/deviceclass-*.yaml``) and, per fake
DRA node, the ResourceSlices its kubelet plugins would publish (``gpu.nvidia.com`` and
``compute-domain.nvidia.com``, one pool per node named after it). Pure: names in, objects out;
the sandbox posts them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from extender.sandbox.nodes import fake_node, rack_of

API_VERSION = "resource.k8s.io/v1"
GPU_DRIVER = "gpu.nvidia.com"
CHANNEL_DRIVER = "compute-domain.nvidia.com"
GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
#: What the class ``gpu.nvidia.com`` serves a pod's plain request for, where no node's
#: allocatable has it (DRAExtendedResource, GA in 1.37).
EXTENDED_RESOURCE = "nvidia.com/gpu"
#: The NVLink clique of a node: NVIDIA's plugin labels the node ``<clusterUUID>.<cliqueID>``.
CLIQUE_LABEL = "nvidia.com/gpu.clique"
#: The same value on every device of the node. NVIDIA's devices carry no clique attribute;
#: this one lets a claim's ``matchAttribute`` name a clique.
CLIQUE_ATTRIBUTE = "cliqueID"
DRA_NODE_PREFIX = "dra-node"
#: The NVLink fabric's cluster UUID (one fabric per sandbox).
FABRIC_UUID = "7c5e1d7a-3f0b-4b8e-9a51-6d2f0c4e8b19"

# The GPU: a DGX H100's, as the driver (580 series) describes it.
PRODUCT = "NVIDIA H100 80GB HBM3"
GPU_ATTRIBUTES: dict[str, dict[str, str]] = {
    "productName": {"string": PRODUCT},
    "brand": {"string": "Nvidia"},
    "architecture": {"string": "Hopper"},
    "cudaComputeCapability": {"version": "9.0.0"},
    "driverVersion": {"version": "580.95.5"},
    "cudaDriverVersion": {"version": "13.0.0"},
}
GPU_MEMORY_GI = 80
MULTIPROCESSORS = 132
#: A GPU's memory slices: MIG places a partition on a run of them.
MEMORY_SLICES = 8
#: Max counter sets in one ResourceSlice.
MAX_COUNTER_SETS = 8

_UUIDS = uuid.UUID("0b3f3c0e-5d0a-4c52-8c43-6a9e2f1d7b20")


class GpuModel(StrEnum):
    """How a sandbox's fake nodes offer their GPUs."""

    DEVICE_PLUGIN = "device-plugin"
    """Every node: ``nvidia.com/gpu`` in its allocatable, as NVIDIA's device plugin reports."""
    DRA = "dra"
    """Every node: GPUs only in ResourceSlices; a pod gets them through a ResourceClaim."""
    DRA_EXTENDED = "dra-extended"
    """As ``dra``, and the class ``gpu.nvidia.com`` also serves plain ``nvidia.com/gpu``
    requests (``extendedResourceName``, as NVIDIA's chart ships it on resource.k8s.io/v1)."""
    MIXED = "mixed"
    """Device-plugin nodes and DRA nodes side by side; ``nvidia.com/gpu`` is served on both."""

    @property
    def has_dra_nodes(self) -> bool:
        return self is not GpuModel.DEVICE_PLUGIN

    @property
    def has_device_plugin_nodes(self) -> bool:
        return self in (GpuModel.DEVICE_PLUGIN, GpuModel.MIXED)

    @property
    def extended(self) -> bool:
        return self in (GpuModel.DRA_EXTENDED, GpuModel.MIXED)


#: DRA nodes when a DRA model is chosen and no count is given.
DEFAULT_DRA_NODES = 3


@dataclass(frozen=True)
class MigProfile:
    """A MIG partition an H100 80GB offers, and where it can be placed."""

    name: str
    profile_id: int
    multiprocessors: int
    memory_gi: int
    memory_slices: int
    starts: tuple[int, ...]


#: A subset of the H100 80GB's profiles: the smallest, a half and the whole GPU.
MIG_PROFILES = (
    MigProfile("1g.10gb", 19, 16, 10, 1, (0, 1, 2, 3, 4, 5, 6)),
    MigProfile("3g.40gb", 9, 60, 40, 4, (0, 4)),
    MigProfile("7g.80gb", 0, MULTIPROCESSORS, GPU_MEMORY_GI, 8, (0,)),
)


def clique_of(rack: int) -> str:
    """The ``nvidia.com/gpu.clique`` of a rack's nodes: one NVLink domain per rack."""
    return f"{FABRIC_UUID}.{rack}"


def dra_node(index: int, *, slot: int, nodes_per_rack: int, cpu: int = 224,
             memory_gi: int = 2048, ready: bool = True) -> dict[str, Any]:
    """A fake node whose GPUs only its ResourceSlices publish: nothing of ``nvidia.com/gpu``
    in its status. ``slot`` is its place among all fake nodes (racks count through both
    kinds), and its rack is its NVLink clique."""
    clique = clique_of(rack_of(slot, nodes_per_rack))
    return fake_node(index, gpus=0, cpu=cpu, memory_gi=memory_gi, nodes_per_rack=nodes_per_rack,
                     prefix=DRA_NODE_PREFIX, ready=ready, slot=slot, device_plugin=False,
                     labels={CLIQUE_LABEL: clique})


def device_classes(model: GpuModel) -> list[dict[str, Any]]:
    """The DeviceClasses of NVIDIA's chart: full GPUs, MIG partitions, ComputeDomain channels;
    with ``model.extended`` the GPU class also serves ``nvidia.com/gpu`` requests."""
    gpu: dict[str, Any] = {"selectors": [_cel(
        f"device.driver == '{GPU_DRIVER}' && device.attributes['{GPU_DRIVER}'].type == 'gpu'")]}
    if model.extended:
        gpu["extendedResourceName"] = EXTENDED_RESOURCE
    mig = {"selectors": [_cel(
        f"device.driver == '{GPU_DRIVER}' && device.attributes['{GPU_DRIVER}'].type == 'mig'")]}
    channel = {"selectors": [_cel(
        f"device.driver == '{CHANNEL_DRIVER}' && "
        f"device.attributes['{CHANNEL_DRIVER}'].type == 'channel' && "
        f"device.attributes['{CHANNEL_DRIVER}'].id == 0")]}
    return [{"apiVersion": API_VERSION, "kind": "DeviceClass", "metadata": {"name": name},
             "spec": spec}
            for name, spec in ((GPU_CLASS, gpu), (MIG_CLASS, mig), (CHANNEL_CLASS, channel))]


def node_slices(node: dict[str, Any], *, gpus: int, partitions: bool) -> list[dict[str, Any]]:
    """What the two kubelet plugins of a :func:`dra_node` publish: its GPUs (``gpu-0`` ..),
    and one ComputeDomain channel.

    With ``partitions`` (NVIDIA's DynamicMIG): each GPU has a counter set
    ``gpu-<i>-counter-set`` (memory, multiprocessors, one ``memory-slice-<j>`` per memory
    slice); the full GPU consumes all of it and each MIG placement its share. As the driver
    does on Kubernetes 1.35 and later, the counter sets go in slices of their own and each
    GPU's devices in one more: a slice whose devices consume counters holds at most 64."""
    name = node["metadata"]["name"]
    clique = node["metadata"]["labels"][CLIQUE_LABEL]
    gpu_devices = [_gpu(name, i, clique=clique, partitions=partitions) for i in range(gpus)]
    if partitions:
        counters = [_counter_set(i) for i in range(gpus)]
        counter_chunks = [counters[i:i + MAX_COUNTER_SETS]
                          for i in range(0, len(counters), MAX_COUNTER_SETS)]
        per_gpu = [[gpu_devices[i], *_partitions(name, i, clique=clique)] for i in range(gpus)]
        count = len(counter_chunks) + len(per_gpu)
        slices = [_slice(f"{name}-{GPU_DRIVER}-counters-{k}", GPU_DRIVER, name, count,
                         sharedCounters=chunk) for k, chunk in enumerate(counter_chunks)]
        slices += [_slice(f"{name}-{GPU_DRIVER}-gpu-{i}", GPU_DRIVER, name, count,
                          devices=devices) for i, devices in enumerate(per_gpu)]
    else:
        slices = [_slice(f"{name}-{GPU_DRIVER}", GPU_DRIVER, name, 1, devices=gpu_devices)]
    channel = {"name": "channel-0",
               "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}}
    slices.append(_slice(f"{name}-{CHANNEL_DRIVER}", CHANNEL_DRIVER, name, 1, devices=[channel]))
    return slices


def _slice(slice_name: str, driver: str, node: str, count: int,
           **content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "ResourceSlice",
            "metadata": {"name": slice_name},
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": count},
                     **content}}


def _gpu(node: str, index: int, *, clique: str, partitions: bool) -> dict[str, Any]:
    device: dict[str, Any] = {
        "name": f"gpu-{index}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": _uuid(node, f"gpu-{index}")},
            **GPU_ATTRIBUTES,
            "resource.kubernetes.io/pciBusID": {"string": _pci_bus_id(index)},
            CLIQUE_ATTRIBUTE: {"string": clique},
        },
        "capacity": {"memory": {"value": f"{GPU_MEMORY_GI}Gi"}},
    }
    if partitions:
        device["capacity"]["multiprocessors"] = {"value": str(MULTIPROCESSORS)}
        device["consumesCounters"] = [{"counterSet": _counter_set_name(index),
                                       "counters": _counter_set(index)["counters"]}]
    return device


def _pci_bus_id(index: int) -> str:
    """Distinct, well-formed IDs, 8 GPUs per PCI domain, spread like a DGX's."""
    return f"{index // 8:04x}:{0x18 + 0x11 * (index % 8):02x}:00.0"


def _counter_set(index: int) -> dict[str, Any]:
    return {"name": _counter_set_name(index),
            "counters": _counters(MULTIPROCESSORS, GPU_MEMORY_GI, range(MEMORY_SLICES))}


def _counter_set_name(index: int) -> str:
    return f"gpu-{index}-counter-set"


def _counters(multiprocessors: int, memory_gi: int, memory_slices: range) -> dict[str, Any]:
    counters: dict[str, Any] = {"multiprocessors": {"value": str(multiprocessors)},
                                "memory": {"value": f"{memory_gi}Gi"}}
    counters.update((f"memory-slice-{j}", {"value": "1"}) for j in memory_slices)
    return counters


def _partitions(node: str, index: int, *, clique: str) -> list[dict[str, Any]]:
    parent = _uuid(node, f"gpu-{index}")
    devices: list[dict[str, Any]] = []
    for profile in MIG_PROFILES:
        for start in profile.starts:
            # NVIDIA's name: gpu-<minor>-mig-<profile without dots>-<profile id>-<start>.
            name = (f"gpu-{index}-mig-{profile.name.replace('.', '')}-"
                    f"{profile.profile_id}-{start}")
            devices.append({
                "name": name,
                "attributes": {
                    "type": {"string": "mig"},
                    "uuid": {"string": "MIG-" + _uuid(node, name).removeprefix("GPU-")},
                    "parentUUID": {"string": parent},
                    "profile": {"string": profile.name},
                    **GPU_ATTRIBUTES,
                    CLIQUE_ATTRIBUTE: {"string": clique},
                },
                "capacity": {"memory": {"value": f"{profile.memory_gi}Gi"},
                             "multiprocessors": {"value": str(profile.multiprocessors)}},
                "consumesCounters": [{
                    "counterSet": _counter_set_name(index),
                    "counters": _counters(profile.multiprocessors, profile.memory_gi,
                                          range(start, start + profile.memory_slices))}],
            })
    return devices


def _uuid(node: str, device: str) -> str:
    """A stable UUID per device: the same sandbox publishes the same GPUs."""
    return f"GPU-{uuid.uuid5(_UUIDS, f'{node}/{device}')}"


def _cel(expression: str) -> dict[str, Any]:
    return {"cel": {"expression": expression}}
