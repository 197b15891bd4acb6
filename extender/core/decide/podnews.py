"""When the pods of a gang kept behind its gates for want of room hear why.

A gang that does not fit is said to wait on its workload at once (``GangWaiting``, and on its
Gang object). Its pods are told too, for ``kubectl describe pod``, but only once the gang has
waited :attr:`~extender.core.decide.settings.CoreSettings.pod_events_after` seconds. A gang
that waits a moment, for room the plans made before it are about to use or release, is
ungated within that, and an Event on each of its pods would be news nobody needed. A gang
that really waits has its pods told a few seconds later.

Once a gang's pods were told, a new reason is told to them at once, as before. A gang that
is ungated, gathers members again, or is gone starts over.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass

from extender.core.model.values import GangKey, PodInfo


@dataclass(slots=True)
class _Waiting:
    due: float
    pods: tuple[PodInfo, ...]
    message: str


@dataclass(frozen=True, slots=True)
class Tell:
    """Tell these pods of one gang why it waits."""

    gang: GangKey
    pods: tuple[PodInfo, ...]
    message: str


class PodNews:
    def __init__(self) -> None:
        self._waiting: dict[GangKey, _Waiting] = {}
        """Gangs waiting whose pods are not told yet: when they will be, and what."""
        self._told: set[GangKey] = set()
        """Gangs waiting whose pods were told: a new reason is told at once."""

    def waits(self, gang: GangKey, pods: tuple[PodInfo, ...], message: str, *, now: float,
              after: float) -> bool:
        """The gang waits for room, for this reason: whether its pods are told now (they
        were told before); if not, they will be by :meth:`due`."""
        if gang in self._told:
            return True
        known = self._waiting.get(gang)
        due = known.due if known is not None else now + after
        self._waiting[gang] = _Waiting(due, pods, message)
        return False

    def settled(self, gang: GangKey) -> None:
        """The gang no longer waits for room (ungated, or gathering members again)."""
        self._waiting.pop(gang, None)
        self._told.discard(gang)

    def due(self, now: float) -> list[Tell]:
        """What is due to be told by ``now``, by gang; those gangs count as told since."""
        ready = sorted(g for g, w in self._waiting.items() if w.due <= now)
        out = []
        for gang in ready:
            waiting = self._waiting.pop(gang)
            self._told.add(gang)
            out.append(Tell(gang, waiting.pods, waiting.message))
        return out

    def keep_only(self, gangs: Container[GangKey]) -> None:
        """Forget the gangs that no longer exist."""
        for gang in [g for g in self._waiting if g not in gangs]:
            del self._waiting[gang]
        self._told = {g for g in self._told if g in gangs}
