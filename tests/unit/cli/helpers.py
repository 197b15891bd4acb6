"""Run the ``muster`` command in-process and read what it printed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from extender.cli.main import main

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO.parent / "shared" / "examples"
DATA = Path(__file__).resolve().parent / "data"


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return orjson.loads(self.out)


def muster(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> Ran:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return Ran(code, captured.out, captured.err)


#: A kubeconfig whose server port nothing listens on (connection refused at once).
DEAD_KUBECONFIG = """
apiVersion: v1
kind: Config
clusters:
- name: dead
  cluster: {server: "https://127.0.0.1:9"}
contexts:
- name: dead
  context: {cluster: dead, user: u, namespace: ml}
current-context: dead
users:
- name: u
  user: {token: abc}
"""


def dead_kubeconfig(directory: Path) -> Path:
    path = directory / "dead.kubeconfig"
    path.write_text(DEAD_KUBECONFIG)
    return path
