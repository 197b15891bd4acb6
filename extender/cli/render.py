"""Rendering for people (rich tables) and for scripts (JSON, YAML), in one place."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import orjson
import yaml
from rich.console import Console
from rich.table import Table
from rich.tree import Tree


def console() -> Console:
    # Plain output when piped, so scripts and tests read stable text.
    return Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)


def emit_data(data: Any, fmt: str) -> None:
    """Print ``data`` as JSON (sorted keys, indented) or YAML."""
    if fmt == "json":
        sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
                         .decode() + "\n")
    else:
        sys.stdout.write(yaml.safe_dump(data, sort_keys=False, default_flow_style=False))


def table(columns: Sequence[str], rows: Sequence[Sequence[object]], *,
          title: str | None = None, total: Sequence[object] | None = None,
          headers: bool = True) -> Table:
    """``headers=False``: the rows alone, as ``kubectl get --no-headers`` prints them."""
    t = Table(title=title, box=None, pad_edge=False, show_footer=total is not None,
              header_style="bold", title_justify="left", show_header=headers)
    for i, name in enumerate(columns):
        footer = "" if total is None else str(total[i])
        t.add_column(name, footer=footer, justify="right" if i and _numeric(rows, i) else "left")
    for row in rows:
        t.add_row(*(str(c) for c in row))
    return t


def _numeric(rows: Sequence[Sequence[object]], i: int) -> bool:
    return bool(rows) and all(isinstance(r[i], int | float) for r in rows)


__all__ = ["Tree", "console", "emit_data", "table"]
