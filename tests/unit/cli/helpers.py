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
