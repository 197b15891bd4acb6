"""A workload's status mapped onto the common :class:`~extender.core.model.values.Phase`.

The descriptor's ``status.rules`` are tried in order; the first whose condition holds gives the
phase, else ``status.default``. Conditions read ``status.conditions`` (``type``/``status``/
``reason``), the kind's phase field, or any path of the object.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.core.model.values import Phase
from extender.core.workloads.descriptor import StatusSpec
from extender.core.workloads.expressions import ITEM, OBJECT, Scope


def status_scope(obj: Mapping[str, Any], status: StatusSpec) -> Scope:
    """The scope status rules are evaluated in: the object, its conditions and phase field."""
    # Rule paths default to the ``item`` scope like role paths; here the item is the object.
    values = {OBJECT: obj, ITEM: obj}
    scope = Scope(values)
    conditions: tuple[Mapping[str, Any], ...] = ()
    if status.conditions is not None:
        found = status.conditions.find(scope)
        raw = found[0] if found else []
        if isinstance(raw, list):
            conditions = tuple(c for c in raw if isinstance(c, Mapping))
    phase = None
    if status.phase_field is not None:
        found = status.phase_field.find(scope)
        if found and isinstance(found[0], str):
            phase = found[0]
    return Scope(values, conditions=conditions, phase=phase)


def phase_of(obj: Mapping[str, Any], status: StatusSpec) -> Phase:
    """The phase of ``obj`` under ``status`` (``Undefined`` when nothing matches)."""
    scope = status_scope(obj, status)
    for rule in status.rules:
        if rule.when.holds(scope):
            return rule.phase
    return status.default
