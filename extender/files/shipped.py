"""Where the files an installed ``muster`` reads are: the descriptor catalog and the manifests.

In a wheel they are package data (pyproject force-includes ``descriptors/`` as
``extender/_catalog`` and ``manifests/`` as ``extender/_manifests``); in a source or editable
checkout they are the repository's own folders. Nothing here reads a file, it only finds it.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[2]

#: Folder inside the installed ``extender`` package -> the checkout folder it is made from.
CATALOG = ("_catalog", "descriptors")
MANIFESTS = ("_manifests", "manifests")


def shipped_dir(which: tuple[str, str]) -> Path:
    """The installed copy of a shipped folder if there is one, else the checkout's."""
    packaged, source = which
    inside = resources.files("extender").joinpath(packaged)
    if inside.is_dir():
        return Path(str(inside))
    return _CHECKOUT / source


def manifests_dir() -> Path:
    """``manifests/``: the descriptor CRD, the install manifests, and ``sandbox/kwok``."""
    return shipped_dir(MANIFESTS)
