"""What the gang service's verbs share: its state, declared once, and how effects are applied.

:class:`ServiceParts` is the base of :class:`~extender.server.service.GangService` and of the
verb groups it is made of (:mod:`extender.server.service_filter`,
:mod:`extender.server.service_bind`). It declares the attributes ``GangService.__init__`` sets,
so each group is type-checked against them, and holds the two steps every group takes: carry
out the session's effects under the lock (waking held requests when one was released or
failed), and tell whether a pod is Muster's to decide at all. It sets no state and takes no
lock of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from extender.core.decide.effects import BindParked, Effect
from extender.core.decide.session import GangSession
from extender.core.model.values import PodInfo
from extender.server.service_effects import ServiceEffects
from extender.server.settings import Settings
from extender.state.ports import Binder, Clock
from extender.state.store import StateStore

Count = Callable[[str, str], None]
"""Called with (verb, outcome) once per answered request: the decision counter."""


class ServiceParts:
    """The state the service's verb groups share (set by ``GangService.__init__``)."""

    _state: StateStore
    _settings: Settings
    _clock: Clock
    """The session's clock (its ``now``), monotonic: every TTL and deadline runs on it, so
    stepping the wall clock neither expires nor extends one."""
    _wall: Clock
    """The wall clock: API timestamps (a pod's ``creationTimestamp``) are read against it,
    and ``/inspect`` shows deadlines in its time; it times nothing."""
    _count: Count
    _binder: Binder
    _binds: ThreadPoolExecutor
    """Binds Muster makes itself, for parked members, off the request threads."""
    _cond: threading.Condition
    session: GangSession
    """The gang decisions; touched only under ``_cond``."""
    _may_act: Callable[[], bool]
    """Checked just before each Binding is posted: False once this replica is no longer
    the leader (leader election), so a bind decided in its term is not posted after it."""
    _effects: ServiceEffects
    _term: int
    """Bumped when leadership is gained or lost: a bind held in an older term fails."""

    def _apply(self, effects: Sequence[Effect]) -> list[BindParked]:
        """Under the lock: carry out what the session decided (:class:`ServiceEffects`);
        returns the parked binds to post (off the lock, on the pool)."""
        wake, parked = self._effects.apply(effects)
        if wake:
            self._cond.notify_all()
        return parked

    def _takes_devices(self, pod: PodInfo) -> bool:
        """Only pods that take GPUs or other devices are Muster's to decide; the others are
        answered as kube-scheduler alone would place them (the extender block names no
        ``managedResources``, so that claim-only pods reach Muster: docs/dra.md)."""
        return pod.shape.takes_devices(self.session.settings.gpu_resource)

