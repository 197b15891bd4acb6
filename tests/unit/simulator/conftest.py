from __future__ import annotations

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
