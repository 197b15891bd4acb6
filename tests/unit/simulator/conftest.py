from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from simulator.trace.openb import NodeTable

TRACE = Path(__file__).resolve().parents[4] / "shared" / "traces" / "openb" / "csv"


def nodes(*specs: tuple[int, int], models: Sequence[str] | None = None) -> NodeTable:
    """Nodes from (milli-CPU, GPUs) pairs; memory is plentiful."""
    return NodeTable(
        names=tuple(f"n{i}" for i in range(len(specs))),
        cpu=np.array([c for c, _ in specs], dtype=np.int64),
        memory=np.full(len(specs), 1 << 20, dtype=np.int64),
        gpus=np.array([g for _, g in specs], dtype=np.int64),
        models=tuple(models) if models else ("G",) * len(specs),
    )


@pytest.fixture(scope="session")
def openb_paths() -> tuple[Path, Path]:
    node_csv, pod_csv = TRACE / "openb_node_list_gpu_node.csv", TRACE / "openb_pod_list_default.csv"
    if not node_csv.exists():
        pytest.skip(f"openb trace not found at {TRACE}")
    return node_csv, pod_csv


@pytest.fixture(scope="session")
def small_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """30 nodes and 150 pods in the openb CSV format, some sharing a GPU, some CPU-only."""
    rng = random.Random(5)
    folder = tmp_path_factory.mktemp("trace")
    nodes, pods = folder / "nodes.csv", folder / "pods.csv"
    node_rows = ["sn,cpu_milli,memory_mib,gpu,model"]
    for i in range(30):
        gpus = rng.choice([0, 2, 4, 8])
        node_rows.append(f"node-{i:02d},{rng.choice([32, 64, 96]) * 1000},262144,{gpus},"
                         f"{rng.choice(['T4', 'V100']) if gpus else ''}")
    pod_rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec"]
    for i in range(150):
        kind = rng.random()
        gpus, milli = (0, 0) if kind < 0.15 else (1, rng.choice([250, 500])) if kind < 0.5 \
            else (rng.choice([1, 2, 4]), 1000)
        spec = "V100" if rng.random() < 0.1 and gpus else ""
        pod_rows.append(f"pod-{i:03d},{rng.choice([1, 2, 4, 8]) * 1000},4096,{gpus},{milli},"
                        f"{spec}")
    nodes.write_text("\n".join(node_rows) + "\n", encoding="utf-8")
    pods.write_text("\n".join(pod_rows) + "\n", encoding="utf-8")
    return nodes, pods
