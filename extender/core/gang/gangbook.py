"""The ledger's book of gangs: one :class:`GangRecord` per gang it promises something to,
and what is looked up across the records.

Every write of a record's plan, hold, barrier or members held goes through the book, so its
indexes stay true: the pods held at barriers, by pod (a pod observed bound or gone is found
at once), and the plans, holds and barriers sorted by gang (read on every decision, sorted
again only when one of them changed). :meth:`GangBook.moved` drops a record left empty and
says whether its state changed. Pure, like the ledger that owns it: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from extender.core.gang.lifecycle import GangRecord, GangState, Reservation, Transition
from extender.core.model.values import GangKey, NodeName

STALE_ADMITTED = 256
"""Admitted gangs whose workload is gone that settling lets pile up before it forgets them in
one pass (:meth:`GangBook.forget_admitted`)."""


@dataclass(frozen=True, slots=True)
class _Views:
    plans: list[tuple[GangKey, Reservation]]
    holds: list[tuple[GangKey, Reservation]]
    barriers: list[tuple[GangKey, float]]
    holding: frozenset[GangKey]


class GangBook:
    """The records, by gang, and their indexes."""

    def __init__(self) -> None:
        self._records: dict[GangKey, GangRecord] = {}
        self._held_in: dict[str, set[GangKey]] = {}
        """Pod uid -> the gangs whose barrier holds it (one, unless its gang changed)."""
        self._views: _Views | None = None

    def copy(self) -> GangBook:
        """An independent copy (the records' settle memos dropped)."""
        twin = GangBook()
        twin._records = {g: r.copy() for g, r in self._records.items()}
        twin._held_in = {uid: set(gangs) for uid, gangs in self._held_in.items()}
        return twin

    def clear(self) -> None:
        self._records.clear()
        self._held_in.clear()
        self._views = None

    # reading -------------------------------------------------------------------------------
    def get(self, gang: GangKey) -> GangRecord | None:
        return self._records.get(gang)

    def __getitem__(self, gang: GangKey) -> GangRecord:
        return self._records[gang]

    def state(self, gang: GangKey) -> GangState | None:
        record = self._records.get(gang)
        return None if record is None else record.state

    def items(self) -> list[tuple[GangKey, GangRecord]]:
        """Every record, sorted by gang."""
        return sorted(self._records.items())

    def plans(self) -> list[tuple[GangKey, Reservation]]:
        return self._view().plans

    def holds(self) -> list[tuple[GangKey, Reservation]]:
        return self._view().holds

    def barriers(self) -> list[tuple[GangKey, float]]:
        return self._view().barriers

    def holding(self) -> frozenset[GangKey]:
        return self._view().holding

    def _view(self) -> _Views:
        views = self._views
        if views is None:
            items = sorted(self._records.items())
            plans = [(g, r.plan) for g, r in items if r.plan is not None]
            holds = [(g, r.hold) for g, r in items if r.hold is not None]
            views = self._views = _Views(
                plans=plans, holds=holds,
                barriers=[(g, r.barrier) for g, r in items if r.barrier is not None],
                holding=frozenset(g for g, _ in plans) | frozenset(g for g, _ in holds))
        return views

    # writing -------------------------------------------------------------------------------
    def open(self, gang: GangKey) -> GangRecord:
        """The gang's record, made if it has none."""
        record = self._records.get(gang)
        if record is None:
            record = self._records[gang] = GangRecord()
        return record

    def moved(self, gang: GangKey, before: GangState | None, why: str) -> Transition | None:
        """After a change to the gang's record: drop it if empty, say if its state changed."""
        record = self._records.get(gang)
        after = None if record is None else record.state
        if record is not None and record.empty():
            del self._records[gang]
        return None if after is before else Transition(gang, before, after, why)

    def set_plan(self, record: GangRecord, plan: Reservation | None) -> None:
        record.plan = plan
        self._views = None

    def set_hold(self, record: GangRecord, hold: Reservation | None) -> None:
        record.hold = hold
        self._views = None

    def set_barrier(self, record: GangRecord, started: float | None) -> None:
        record.barrier = started
        self._views = None

    def hold_member(self, gang: GangKey, record: GangRecord, pod_uid: str,
                    node: NodeName) -> None:
        """Hold a member at the gang's barrier."""
        record.waiting[pod_uid] = node
        self._held_in.setdefault(pod_uid, set()).add(gang)

    def unwait(self, gang: GangKey, record: GangRecord) -> dict[str, NodeName]:
        """Take every member off the gang's barrier; return them."""
        held, record.waiting = record.waiting, {}
        for uid in held:
            gangs = self._held_in.get(uid)
            if gangs is not None:
                gangs.discard(gang)
                if not gangs:
                    del self._held_in[uid]
        return held

    def forget_admitted(self, gangs: Mapping[GangKey, object]) -> bool:
        """Once there are :data:`STALE_ADMITTED` more admitted gangs than ``gangs``, forget
        the admission of every one not in ``gangs`` (its workload is gone); whether it did.
        Now and then rather than on every call: settling runs after every bind, and a
        recreated gang is caught by
        :meth:`~extender.core.gang.ledger.Ledger.recheck_admitted`."""
        limit = len(gangs) + STALE_ADMITTED
        if len(self._records) <= limit or sum(
                r.admitted is not None for r in self._records.values()) <= limit:
            return False
        for gang, record in sorted(self._records.items()):
            if record.admitted is not None and gang not in gangs:
                before = record.state
                record.admitted, record.stage = None, -1
                self.moved(gang, before, "settle")
        return True

    def unhold_pod(self, pod_uid: str) -> list[GangKey]:
        """Take the pod off every barrier holding it; return those gangs (the records'
        barriers are the caller's to end)."""
        gangs = sorted(self._held_in.pop(pod_uid, ()))
        for gang in gangs:
            self._records[gang].waiting.pop(pod_uid, None)
        return gangs
