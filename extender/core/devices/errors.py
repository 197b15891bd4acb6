"""The devices sub-package's error base."""

from __future__ import annotations

from extender.core.model.errors import CoreError


class DeviceError(CoreError):
    """A DRA object (ResourceSlice, DeviceClass, ResourceClaim, template) Muster cannot count."""
