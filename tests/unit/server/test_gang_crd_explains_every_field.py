"""``kubectl explain gang``, ``gang.status`` and each of its fields answer: every node of the
Gang CRD's schema carries a description (and the chart's copy is the same file)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]


def _fields(node: Mapping[str, Any], path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    yield path, node
    for name, child in (node.get("properties") or {}).items():
        yield from _fields(child, f"{path}.{name}")
    if isinstance(node.get("items"), Mapping):
        yield from _fields(node["items"], f"{path}[]")


def test_every_field_of_the_gang_crd_has_a_description() -> None:
    crd = yaml.safe_load((ROOT / "manifests" / "crd-gang.yaml").read_text())
    [version] = crd["spec"]["versions"]
    fields = dict(_fields(version["schema"]["openAPIV3Schema"], "gang"))
    assert {"gang", "gang.status", "gang.status.state", "gang.status.heldBy"} <= set(fields)
    assert [path for path, node in fields.items()
            if not str(node.get("description") or "").strip()] == []
