"""A sandbox for one e2e module running the real operators it names, for operators the
shared ``real_box`` fixture does not start (the MPI operator, Kubeflow Trainer)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from extender.sandbox.config import Ports
from extender.sandbox.sandbox import Sandbox, SandboxSpec


@contextlib.contextmanager
def operator_sandbox(directory: Path, *, mpi_operator: bool = False, trainer: bool = False,
                     jobset: bool = False) -> Iterator[Sandbox]:
    """4 nodes x 8 GPUs on free ports, up for the block, with the real operators asked for."""
    spec = SandboxSpec(directory=directory, nodes=4, gpus_per_node=8, ports=Ports(),
                       bind_timeout=15.0, mpi_operator=mpi_operator, trainer=trainer,
                       jobset=jobset)
    box = Sandbox(spec, say=lambda _m: None)
    box.up()
    try:
        yield box
    finally:
        box.down()
