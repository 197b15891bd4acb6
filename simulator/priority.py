"""Pod priority as the API server's Priority admission plugin sets it, for the simulator.

In a cluster, ``spec.priority`` is filled in when a pod is created: the value of the
PriorityClass named by ``spec.priorityClassName``, or else of the one class marked
``globalDefault`` (the lowest, should there be several), or else 0. kube-scheduler then orders
its queue by that number. :mod:`extender.core.model.podspec` reads only ``spec.priority``, which is
all a pod observed in a cluster needs; pods the simulator creates from workload templates, and
pods written by hand, carry only the class name, so the simulator resolves it here.

Does not read files or touch the cluster: it is given the PriorityClass objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

KIND = "PriorityClass"

#: The two classes every API server creates (``scheduling.k8s.io`` system priority classes).
SYSTEM_CLASSES: Mapping[str, int] = MappingProxyType({
    "system-cluster-critical": 2_000_000_000,
    "system-node-critical": 2_000_001_000,
})


class PriorityError(ValueError):
    """A PriorityClass that cannot be read, or a pod naming a class that does not exist."""


@dataclass(frozen=True, slots=True)
class PriorityClasses:
    values: Mapping[str, int] = field(default_factory=lambda: dict(SYSTEM_CLASSES))
    """Class name -> value (the system classes included)."""
    default: int | None = None
    """The ``globalDefault`` class's value; ``None`` when no class is the default."""

    @classmethod
    def of(cls, objects: Iterable[Mapping[str, Any]]) -> PriorityClasses:
        """Read ``PriorityClass`` objects (others are ignored)."""
        values = dict(SYSTEM_CLASSES)
        defaults: list[int] = []
        for obj in objects:
            if obj.get("kind") != KIND:
                continue
            meta = obj.get("metadata")
            name = meta.get("name") if isinstance(meta, Mapping) else None
            if not isinstance(name, str) or not name:
                raise PriorityError("PriorityClass: metadata.name is required")
            value = obj.get("value")
            if isinstance(value, bool) or not isinstance(value, int):
                raise PriorityError(f"PriorityClass {name}: value must be an integer, "
                                    f"got {value!r}")
            values[name] = value
            if obj.get("globalDefault") is True:
                defaults.append(value)
        # Several defaults can only come from a race; admission then takes the lowest.
        return cls(values=values, default=min(defaults) if defaults else None)

    def resolve(self, spec: Mapping[str, Any], *, where: str) -> int | None:
        """The priority admission gives a pod with this spec; ``None`` leaves the spec's own.

        A spec that already holds ``priority`` (a pod recorded from a cluster, admitted there)
        keeps it. ``where`` names the pod or template in errors.
        """
        if isinstance(spec.get("priority"), int):
            return None
        name = spec.get("priorityClassName")
        if name:
            if not isinstance(name, str) or name not in self.values:
                known = ", ".join(sorted(self.values))
                raise PriorityError(f"{where}: priorityClassName {name!r} is not a "
                                    f"PriorityClass of the snapshot (known: {known})")
            return self.values[name]
        return self.default


def admitted_spec(spec: Mapping[str, Any], classes: PriorityClasses, *,
                  where: str) -> Mapping[str, Any]:
    """``spec`` with ``priority`` filled in as admission would (the same object if unchanged)."""
    priority = classes.resolve(spec, where=where)
    return spec if priority is None else {**spec, "priority": priority}
