"""Every error the core raises on bad input derives from its sub-package's base, under
CoreError, so adapters can catch one class and name what is wrong."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import extender.core
from extender.core.decide.errors import DecisionError
from extender.core.devices.errors import DeviceError
from extender.core.gang.errors import PlacementError
from extender.core.karta.errors import KartaError
from extender.core.model.errors import CoreError, ModelError
from extender.core.workloads.errors import DescriptionError

BASES: dict[str, type[CoreError]] = {
    "model": ModelError, "workloads": DescriptionError, "karta": KartaError,
    "gang": PlacementError, "decide": DecisionError, "devices": DeviceError,
}
CONTROL_FLOW = {"_UnsupportedAt", "Unsupported", "UnknownKind"}
"""Raised and caught inside one module (or a lookup miss answered as "no descriptor"), never
shown to a user as an error."""


def _errors() -> list[tuple[str, type[BaseException]]]:
    found = []
    for info in pkgutil.walk_packages(extender.core.__path__, "extender.core."):
        module = importlib.import_module(info.name)
        for name, obj in inspect.getmembers(module, inspect.isclass):
            if (issubclass(obj, BaseException) and obj.__module__ == info.name
                    and name not in CONTROL_FLOW):
                found.append((info.name, obj))
    return found


def test_every_core_error_derives_from_the_base_of_its_sub_package() -> None:
    errors = _errors()
    assert len(errors) >= 10
    for module, error in errors:
        layer = module.split(".")[2]
        if error.__name__ in ("CoreError",):
            continue
        base = BASES[layer]
        assert issubclass(error, base), (
            f"{module}.{error.__name__} does not derive from {base.__name__}")
