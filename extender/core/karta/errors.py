"""The error base of ``extender.core.karta.compile``: a Workload Map Muster cannot translate."""

from __future__ import annotations

from extender.core.workloads.errors import DescriptionError


class KartaError(DescriptionError):
    """A Karta document, or part of one, Muster cannot read or translate."""
