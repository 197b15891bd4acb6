"""Every error the core raises on bad input derives from its sub-package's base, under
CoreError, so adapters can catch one class and name what is wrong."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable

import pytest

import extender.core
from extender.core.decide.errors import DecisionError
from extender.core.decide.settings import CoreSettings
from extender.core.devices.cel import SelectorError, compile_selector
from extender.core.devices.errors import DeviceError
from extender.core.gang.errors import PlacementError
from extender.core.gang.scoring import UnknownPolicyError, policy_named
from extender.core.karta.compile import compile_karta
from extender.core.karta.errors import KartaError
from extender.core.model.errors import CoreError, ModelError
from extender.core.model.objects import ObjectError, pod_from_api
from extender.core.workloads.descriptor import compile_descriptor
from extender.core.workloads.errors import DescriptionError
from extender.core.workloads.expressions import DescriptorError
from extender.core.workloads.workload import WorkloadLimits

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


@pytest.mark.parametrize(("bad_input", "raised"), [
    pytest.param(lambda: pod_from_api({"metadata": {}}), ObjectError,
                 id="model-a-pod-without-a-name"),
    pytest.param(lambda: compile_descriptor({}), DescriptorError,
                 id="workloads-a-descriptor-without-its-apiversion"),
    pytest.param(lambda: WorkloadLimits(pods=0), DescriptionError,
                 id="workloads-limits-of-no-pods"),
    # A Karta is a descriptor document: its faults name the field, as any descriptor's do.
    pytest.param(lambda: compile_karta({"apiVersion": "x", "kind": "Karta"}), DescriptorError,
                 id="karta-a-document-of-another-api"),
    pytest.param(lambda: policy_named("fastest"), UnknownPolicyError,
                 id="gang-an-unknown-scoring-policy"),
    pytest.param(lambda: CoreSettings(max_held=0), DecisionError,
                 id="decide-settings-holding-no-request"),
    pytest.param(lambda: CoreSettings(plan_ttl=-1.0), DecisionError,
                 id="decide-settings-with-a-negative-ttl"),
    pytest.param(lambda: CoreSettings(pod_events_after=float("inf")), DecisionError,
                 id="decide-settings-telling-pods-never"),
    pytest.param(lambda: CoreSettings(scoring="fastest"), UnknownPolicyError,
                 id="decide-settings-naming-an-unknown-policy"),
    pytest.param(lambda: compile_selector("device.("), SelectorError,
                 id="devices-a-cel-selector-that-does-not-parse"),
])
def test_bad_input_raises_its_layers_error_which_an_adapter_catches_as_core_error(
        bad_input: Callable[[], object], raised: type[CoreError]) -> None:
    with pytest.raises(CoreError) as caught:
        bad_input()
    assert type(caught.value) is raised
    assert str(caught.value)  # says what is wrong
