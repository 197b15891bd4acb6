"""The error base of ``extender.core.decide``: a decision's input it refuses."""

from __future__ import annotations

from extender.core.model.errors import CoreError


class DecisionError(CoreError):
    """Settings or a gang graph the decisions refuse."""
