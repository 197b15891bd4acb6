"""Read a snapshot file into raw API objects.

A snapshot file is what ``kubectl get nodes,pods -A -o yaml`` prints: one ``List`` (or
``v1/NodeList``, ``PodList``...) whose ``items`` are objects, or a multi-document YAML/JSON stream
of objects and lists, possibly mixed with workload objects (JobSets, RayClusters...) and
``WorkloadDescriptor`` objects. Lists are flattened; each object keeps its own ``kind``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from extender.files.yamlsafe import load_all


class SnapshotFileError(ValueError):
    """A snapshot file that cannot be read; the message names the file and the document."""


def _flatten(doc: object, where: str) -> Iterator[dict[str, Any]]:
    if doc is None:
        return
    if not isinstance(doc, dict):
        raise SnapshotFileError(f"{where}: expected an object, got {type(doc).__name__}")
    kind = doc.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and "items" in doc:
        items = doc.get("items")
        items = [] if items is None else items
        if not isinstance(items, list):
            raise SnapshotFileError(f"{where}.items: expected a list")
        item_kind = kind[: -len("List")] if kind != "List" else None
        for i, item in enumerate(items):
            yield from _flatten(_typed(item, item_kind, doc), f"{where}.items[{i}]")
        return
    if not isinstance(kind, str) or not kind:
        raise SnapshotFileError(f"{where}: object has no kind")
    meta = doc.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
        raise SnapshotFileError(f"{where}: {kind} has no metadata.name")
    yield doc


def _typed(item: object, kind: str | None, doc: Mapping[str, Any]) -> object:
    """Typed lists (``PodList``) may omit kind/apiVersion on their items; restore them."""
    if kind and isinstance(item, dict) and not item.get("kind"):
        return {"apiVersion": doc.get("apiVersion", "v1"), "kind": kind, **item}
    return item


def parse_snapshot(text: str, *, source: str = "<snapshot>") -> list[dict[str, Any]]:
    """Every object in ``text``, in file order."""
    try:
        docs = list(load_all(text))
    except yaml.YAMLError as err:
        raise SnapshotFileError(f"{source}: not valid YAML or JSON: {err}") from err
    objects: list[dict[str, Any]] = []
    for n, doc in enumerate(docs):
        objects.extend(_flatten(doc, f"{source}: document {n + 1}"))
    return objects


def load_snapshot(path: str | Path) -> list[dict[str, Any]]:
    """Read a snapshot file (``-`` is not accepted: the server reads it once at start)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as err:
        raise SnapshotFileError(f"{file}: cannot read: {err.strerror or err}") from err
    return parse_snapshot(text, source=str(file))
