"""The error base of ``extender.core.workloads``: a descriptor or workload that cannot be read."""

from __future__ import annotations

from extender.core.model.errors import CoreError


class DescriptionError(CoreError):
    """A descriptor, path or workload object Muster cannot read, or limits on them that cannot
    hold (``WorkloadLimits``)."""
