"""Every kind of effect reaches its own handler method, in the order the session gave them."""

from __future__ import annotations

import re
from typing import get_args

from extender.core.decide import effects as fx
from extender.core.model.notices import EventType, PodEvent, PodRef
from extender.core.model.values import GangKey, NodeName

POD = PodRef("ml", "w-0", "uid-w-0")
GANG = GangKey("ml/train")


def _method(kind: type) -> str:
    """The handler method for an effect kind: its name in snake case."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", kind.__name__).lower()


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def __getattr__(self, name: str) -> object:
        return lambda effect: self.calls.append((name, effect))


ONE_OF_EACH: tuple[fx.Effect, ...] = (
    fx.Emit(PodEvent(POD, EventType.NORMAL, "GangPlanned", "planned")),
    fx.Release(1, POD, NodeName("n0")),
    fx.FailHeld(2, POD, "timed_out", "the barrier timed out"),
    fx.BindParked(POD, NodeName("n1")),
    fx.Requeue((POD,), "a plan ended"),
    fx.Ungate((POD,), "planned whole", GANG),
    fx.Evict(GANG, (POD,), "preempted"),
    fx.Withdrawn(GANG, 1, "timed_out", "the barrier timed out"),
    fx.PlanExpired(GANG),
    fx.WorkloadRefused("ml/train", "no descriptor"),
)


def test_each_effect_kind_goes_to_its_own_method_in_order() -> None:
    recorder = _Recorder()
    effects = ONE_OF_EACH + ONE_OF_EACH[::-1]
    fx.dispatch(effects, recorder)  # type: ignore[arg-type]
    assert recorder.calls == [(_method(type(e)), e) for e in effects]


def test_the_handler_protocol_has_one_method_per_effect_kind_and_no_other() -> None:
    kinds = get_args(fx.Effect)
    assert {type(e) for e in ONE_OF_EACH} == set(kinds)
    methods = {n for n in vars(fx.EffectHandler) if not n.startswith("_")}
    assert methods == {_method(k) for k in kinds}
