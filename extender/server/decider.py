"""The contract between the routes and whatever decides: parsed arguments in, wire results out.

:class:`PassThrough` is a real, do-nothing extender (every node passes, every bind succeeds in
memory). It exists so the load benchmark can measure Muster's own cost against the same server
stack, and so the protocol layer can be exercised on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from extender.server.wire import (
    BindingArgs,
    ExtenderArgs,
    ExtenderBindingResultJSON,
    ExtenderFilterResultJSON,
    ExtenderPreemptionResultJSON,
    HostPriorityJSON,
    PreemptionArgs,
    binding_result,
    filter_result,
    preemption_result,
    priority_list,
)


class Busy(Exception):
    """The decider could not take its lock in time: something holds it far too long."""


class Decider(Protocol):
    def readiness(self) -> tuple[bool, str]: ...
    def liveness(self, timeout: float) -> tuple[bool, str]:
        """Whether requests can still be decided: the lock is free within ``timeout``."""
        ...
    def filter(self, args: ExtenderArgs) -> ExtenderFilterResultJSON: ...
    def prioritize(self, args: ExtenderArgs) -> list[HostPriorityJSON]: ...
    def bind(self, args: BindingArgs) -> ExtenderBindingResultJSON: ...
    def preempt(self, args: PreemptionArgs) -> ExtenderPreemptionResultJSON: ...
    def inspect_gangs(self) -> list[dict[str, Any]]: ...
    def gang_counts(self) -> Mapping[str, int]: ...
    def reserved_gpus(self) -> float: ...
    def binds_waiting(self) -> int: ...


class PassThrough:
    """Answers filter with its input, scores nothing, binds nothing: the baseline."""

    def readiness(self) -> tuple[bool, str]:
        return True, "pass-through extender"

    def liveness(self, timeout: float) -> tuple[bool, str]:
        return True, "pass-through extender"

    def filter(self, args: ExtenderArgs) -> ExtenderFilterResultJSON:
        return filter_result(args, args.node_names)

    def prioritize(self, args: ExtenderArgs) -> list[HostPriorityJSON]:
        return priority_list([(n, 0) for n in args.node_names])

    def bind(self, args: BindingArgs) -> ExtenderBindingResultJSON:
        return binding_result()

    def preempt(self, args: PreemptionArgs) -> ExtenderPreemptionResultJSON:
        return preemption_result(args.victims, args.pdb_violations)

    def inspect_gangs(self) -> list[dict[str, Any]]:
        return []

    def gang_counts(self) -> Mapping[str, int]:
        return {}

    def reserved_gpus(self) -> float:
        return 0.0

    def binds_waiting(self) -> int:
        return 0
