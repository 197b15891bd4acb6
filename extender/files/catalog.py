"""Load descriptor catalogs from YAML files and directories, and find the built-in catalog.

Every problem is reported as ``FILE:DOC: field.path: message`` (``DOC`` counts documents from 1
in a multi-document file), all problems of a load at once, never as a traceback.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from extender.core.karta.compile import compile_karta
from extender.core.karta.model import is_karta_document
from extender.core.workloads.catalog import Catalog
from extender.core.workloads.descriptor import Descriptor, DescriptorError, compile_descriptor
from extender.files.shipped import CATALOG, shipped_dir
from extender.files.yamlsafe import load_all


@dataclass(frozen=True, slots=True)
class Problem:
    file: str
    doc: int
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        return f"{self.file}:{self.doc}: {where}{self.message}"


class CatalogError(ValueError):
    """One or more descriptor documents that do not load; ``problems`` lists each."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems


def yaml_documents(text: str, file: str) -> Iterator[tuple[int, Any]]:
    """The documents of a YAML stream, numbered from 1; empty documents are skipped.

    A YAML syntax error raises :class:`CatalogError` pointing at the document it is in.
    """
    doc = 0
    try:
        for doc, data in enumerate(load_all(text), start=1):
            if data is not None:
                yield doc, data
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).split("\n", 1)[0]
        raise CatalogError([Problem(file, doc + 1, "", f"not valid YAML{line}: {problem}")]
                           ) from err


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    return [path]


def load_descriptor_text(text: str, file: str) -> tuple[list[Descriptor], list[Problem]]:
    """Compile every descriptor document of one YAML text: WorkloadDescriptors, and Workload
    Map ``Karta`` objects read as descriptors of format ``karta``."""
    out: list[Descriptor] = []
    problems: list[Problem] = []
    try:
        for doc, data in yaml_documents(text, file):
            try:
                if isinstance(data, dict) and is_karta_document(data):
                    out.append(compile_karta(data, source=file))
                    continue
                out.append(compile_descriptor(data))
            except DescriptorError as err:
                problems.append(Problem(file, doc, err.path, err.message))
    except CatalogError as err:
        problems.extend(err.problems)
    return out, problems


def load_descriptors(paths: Iterable[str | Path]) -> list[Descriptor]:
    """Compile descriptors from files and directories (``*.yaml``/``*.yml``, sorted).

    Raises :class:`CatalogError` with every problem found, if there are any.
    """
    out: list[Descriptor] = []
    problems: list[Problem] = []
    for raw in paths:
        for file in _files(Path(raw)):
            try:
                text = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as err:
                problems.append(Problem(str(file), 0, "", f"cannot read: {err}"))
                continue
            found, trouble = load_descriptor_text(text, str(file))
            out.extend(found)
            problems.extend(trouble)
    if problems:
        raise CatalogError(problems)
    return out


def load_catalog(paths: Iterable[str | Path]) -> Catalog:
    return Catalog.of(load_descriptors(paths))


def packaged_catalog_dir() -> Path:
    """The built-in catalog's folder.

    In a wheel it is ``extender/_catalog``; in a source or editable checkout, ``descriptors/``.
    """
    return shipped_dir(CATALOG)


def packaged_catalog() -> Catalog:
    """The built-in catalog, compiled (raises :class:`CatalogError` if a file is broken)."""
    return load_catalog([packaged_catalog_dir()])
