"""The error base of ``extender.core.gang``: placement asked for something it cannot do."""

from __future__ import annotations

from extender.core.model.errors import CoreError


class PlacementError(CoreError):
    """A placement setting or request the gang layer refuses (an unknown policy...)."""
