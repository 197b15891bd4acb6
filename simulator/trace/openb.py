"""Read the openb CSV files (nodes and pods) into column tables.

The trace is the Alibaba GPU cluster trace published with the FGD paper (ATC'23): one CSV of
nodes (``sn,cpu_milli,memory_mib,gpu,model``) and one of pods (``name,cpu_milli,memory_mib,
num_gpu,gpu_milli,gpu_spec,...``). Tables are numpy columns because the replay scores every
node for every pod; a Python object per node would be two orders of magnitude slower.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from extender.core.model.resources import CPU, GPU, MEMORY, Resources
from extender.core.model.values import NodeInfo, NodeName, freeze_labels

IntArray = npt.NDArray[np.int64]

MILLI = 1000
MAX_GPUS_PER_NODE = 8
GPU_MODEL_LABEL = "alibabacloud.com/gpu-card-model"

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


class TraceError(ValueError):
    """A trace file is missing, malformed or inconsistent; the message names file and line."""


@dataclass(frozen=True)
class NodeTable:
    names: tuple[str, ...]
    cpu: IntArray
    """Allocatable milli-CPU."""
    memory: IntArray
    """Allocatable MiB."""
    gpus: IntArray
    """GPU devices (0..8)."""
    models: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.names)

    @property
    def total_gpus(self) -> int:
        return int(self.gpus.sum())

    def node_infos(self) -> list[NodeInfo]:
        """The same nodes as the core's values (GPU model as a label)."""
        return [
            NodeInfo(
                name=NodeName(name),
                allocatable=Resources(
                    {CPU: int(cpu), MEMORY: int(mem) * 1024 * 1024 * 1000, GPU: int(g) * MILLI}
                ),
                labels=freeze_labels({GPU_MODEL_LABEL: model} if model else {}),
            )
            for name, cpu, mem, g, model in zip(
                self.names, self.cpu, self.memory, self.gpus, self.models, strict=True
            )
        ]


@dataclass(frozen=True)
class PodTable:
    names: tuple[str, ...]
    cpu: IntArray
    memory: IntArray
    gpus: IntArray
    """GPU devices requested (0 for CPU-only pods)."""
    gpu_milli: IntArray
    """Milli of each device (1000 for whole GPUs, less for a GPU-sharing pod, 0 without GPU)."""
    gpu_spec: tuple[str, ...]
    """Allowed GPU models joined by ``|``; empty means any."""

    def __len__(self) -> int:
        return len(self.names)

    @property
    def total_gpu_milli(self) -> IntArray:
        return self.gpus * self.gpu_milli

    def take(self, order: IntArray) -> PodTable:
        idx = [int(i) for i in order]
        return PodTable(
            names=tuple(self.names[i] for i in idx),
            cpu=self.cpu[order],
            memory=self.memory[order],
            gpus=self.gpus[order],
            gpu_milli=self.gpu_milli[order],
            gpu_spec=tuple(self.gpu_spec[i] for i in idx),
        )


def _rows(path: Path, required: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as err:
        raise TraceError(f"{path}: cannot read ({err.strerror})") from None
    with handle:
        reader = csv.DictReader(handle)
        missing = [c for c in required if c not in (reader.fieldnames or ())]
        if missing:
            raise TraceError(f"{path}: missing column(s) {', '.join(missing)}")
        return [(number, row) for number, row in enumerate(reader, start=2)]


def _int(path: Path, line: int, row: dict[str, str], column: str) -> int:
    raw = (row.get(column) or "").strip()
    try:
        value = int(float(raw)) if raw else 0
    except ValueError:
        raise TraceError(f"{path}:{line}: column {column!r} is not a number: {raw!r}") from None
    if value < 0:
        raise TraceError(f"{path}:{line}: column {column!r} is negative: {value}")
    return value


def load_nodes(path: Path) -> NodeTable:
    """Nodes from ``openb_node_list_*.csv``, sorted by name (the paper sorts them too)."""
    rows = _rows(path, NODE_COLUMNS)
    if not rows:
        raise TraceError(f"{path}: no nodes")
    parsed = []
    for line, row in rows:
        gpus = _int(path, line, row, "gpu")
        if gpus > MAX_GPUS_PER_NODE:
            raise TraceError(f"{path}:{line}: {gpus} GPUs; at most {MAX_GPUS_PER_NODE} supported")
        model = (row.get("model") or "").strip()
        parsed.append(
            (
                row["sn"],
                _int(path, line, row, "cpu_milli"),
                _int(path, line, row, "memory_mib"),
                gpus,
                "" if model == "nan" else model,
            )
        )
    parsed.sort(key=lambda r: r[0])
    return NodeTable(
        names=tuple(r[0] for r in parsed),
        cpu=np.array([r[1] for r in parsed], dtype=np.int64),
        memory=np.array([r[2] for r in parsed], dtype=np.int64),
        gpus=np.array([r[3] for r in parsed], dtype=np.int64),
        models=tuple(r[4] for r in parsed),
    )


def load_pods(path: Path) -> PodTable:
    """Pods from ``openb_pod_list_*.csv``, sorted by name.

    As the paper's converter does, a per-device milli above 1000 is capped at 1000 and the
    per-device milli of a CPU-only pod is 0. Creation and deletion times are not read: the
    paper's method places pods one after another and never removes them.
    """
    rows = _rows(path, POD_COLUMNS)
    if not rows:
        raise TraceError(f"{path}: no pods")
    parsed = []
    for line, row in rows:
        gpus = _int(path, line, row, "num_gpu")
        milli = min(_int(path, line, row, "gpu_milli"), MILLI) if gpus else 0
        if gpus and milli == 0:
            raise TraceError(f"{path}:{line}: pod asks for {gpus} GPU(s) of 0 milli each")
        if gpus > 1 and milli < MILLI:
            raise TraceError(f"{path}:{line}: a pod sharing a GPU must ask for exactly one")
        spec = (row.get("gpu_spec") or "").strip()
        parsed.append(
            (
                row["name"],
                _int(path, line, row, "cpu_milli"),
                _int(path, line, row, "memory_mib"),
                gpus,
                milli,
                "" if spec == "nan" else spec,
            )
        )
    parsed.sort(key=lambda r: r[0])
    return PodTable(
        names=tuple(r[0] for r in parsed),
        cpu=np.array([r[1] for r in parsed], dtype=np.int64),
        memory=np.array([r[2] for r in parsed], dtype=np.int64),
        gpus=np.array([r[3] for r in parsed], dtype=np.int64),
        gpu_milli=np.array([r[4] for r in parsed], dtype=np.int64),
        gpu_spec=tuple(r[5] for r in parsed),
    )
