"""The core's error bases: one per sub-package, all under :class:`CoreError`.

Every error the core raises on bad input (an object, a descriptor, a setting) derives from the
base of the sub-package that raised it, and says what is wrong and where; adapters catch
:class:`CoreError` to turn any of them into a clear message, never a traceback.
"""

from __future__ import annotations


class CoreError(ValueError):
    """Bad input the core refuses."""


class ModelError(CoreError):
    """A Kubernetes object or value that cannot be read (``extender.core.model.values``)."""
