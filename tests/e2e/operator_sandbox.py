"""A sandbox for one e2e module running the real operators it names, for operators the
shared ``real_box`` fixture does not start (the MPI operator, Kubeflow Trainer, Kueue)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from extender.sandbox.config import GateBy, Ports
from extender.sandbox.sandbox import Sandbox, SandboxSpec


@contextlib.contextmanager
def operator_sandbox(directory: Path, **switches: Any) -> Iterator[Sandbox]:
    """4 nodes x 8 GPUs on free ports, up for the block, with the real operators its
    :class:`SandboxSpec` switches ask for (``jobset=True, trainer=True``); with
    ``gating=True``, Muster's gate by the admission policy, as ``muster sandbox up``."""
    spec = dataclasses.replace(SandboxSpec(directory=directory, nodes=4, gpus_per_node=8,
                                           ports=Ports(), bind_timeout=15.0,
                                           gate_by=GateBy.POLICY), **switches)
    box = Sandbox(spec, say=lambda _m: None)
    box.up()
    try:
        yield box
    finally:
        box.down()
