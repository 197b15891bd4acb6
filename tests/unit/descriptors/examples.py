"""Shared helpers for the descriptor tests: where the upstream examples are, and resolving them."""

from __future__ import annotations

import re
from pathlib import Path

from extender.core.model.values import WorkloadTree
from extender.core.workloads.catalog import Catalog, UnknownKind
from extender.core.workloads.workload import resolve_workload
from extender.files.catalog import packaged_catalog, yaml_documents

REPO = Path(__file__).resolve().parents[3]
#: CI places ``shared/`` beside the clone; the examples live in ``<repo>/../shared/examples``.
EXAMPLES = REPO.parent / "shared" / "examples"
_CATALOG: list[Catalog] = []


def catalog() -> Catalog:
    if not _CATALOG:
        _CATALOG.append(packaged_catalog())
    return _CATALOG[0]


def resolve_file(path: Path) -> tuple[list[WorkloadTree], list[UnknownKind]]:
    """Resolve every workload document of a file; a later document with the same kind,
    namespace and name replaces an earlier one, as ``kubectl apply`` would."""
    trees: dict[tuple[str, str, str], WorkloadTree] = {}
    unknown: list[UnknownKind] = []
    for _, obj in yaml_documents(path.read_text(encoding="utf-8"), str(path)):
        try:
            descriptor = catalog().require(obj)
        except UnknownKind as err:
            unknown.append(err)
            continue
        tree = resolve_workload(obj, descriptor)
        trees[(tree.ref.kind, tree.ref.namespace, tree.ref.name)] = tree
    return list(trees.values()), unknown


def index_rows() -> list[tuple[str, str]]:
    """``(row number, file)`` for every row of ``INDEX.md``'s table."""
    out = []
    for line in (EXAMPLES / "INDEX.md").read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\| (\d+[ab]?) \|", line)
        if match:
            cols = [c.strip() for c in line.strip().strip("|").split("|")]
            out.append((match.group(1), cols[4].split(" ")[0]))
    return out
