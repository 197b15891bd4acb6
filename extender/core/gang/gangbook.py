"""The ledger's book of gangs: one :class:`GangRecord` per gang it promises something to,
and what is looked up across the records.

Every write of a record's plan, hold, barrier or members held goes through the book, so its
indexes stay true: the pods held at barriers, by pod (a pod observed bound or gone is found
at once), and the plans, holds and barriers sorted by gang (read on every decision, sorted
again only when one of them changed). A record is written only once taken with
:meth:`GangBook.writable` (or ``owned``, ``open``): a copy of the book shares its records until
either side writes one. :meth:`GangBook.moved` drops a record left empty and says whether its
state changed. Pure, like the ledger that owns it: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from extender.core.gang.lifecycle import GangRecord, GangState, Reservation, Transition
from extender.core.model.values import GangKey, NodeName

STALE_ADMITTED = 256
"""Admitted gangs whose workload is gone that settling lets pile up before it forgets them in
one pass (:meth:`GangBook.forget_admitted`)."""


class GangBook:
    """The records, by gang, and their indexes."""

    def __init__(self) -> None:
        self._records: dict[GangKey, GangRecord] = {}
        self._held_in: dict[str, frozenset[GangKey]] = {}
        """Pod uid -> the gangs whose barrier holds it (one, unless its gang changed)."""
        self._plans: list[tuple[GangKey, Reservation]] | None = None
        self._holds: list[tuple[GangKey, Reservation]] | None = None
        self._barriers: list[tuple[GangKey, float]] | None = None
        self._holding: frozenset[GangKey] | None = None
        self._owned: set[GangKey] = set()
        """The gangs whose record this book may write in place; any other record is shared
        with a copy of the book, and copied before it is written (:meth:`writable`)."""

    def copy(self) -> GangBook:
        """An independent copy. Records are shared until either book writes one: a what-if
        copy writes a few, and copying every record up front was most of its cost."""
        twin = GangBook()
        twin._records = dict(self._records)
        twin._held_in = dict(self._held_in)
        twin._plans, twin._holds = self._plans, self._holds
        twin._barriers, twin._holding = self._barriers, self._holding
        self._owned = set()
        return twin

    def clear(self) -> None:
        self._records.clear()
        self._held_in.clear()
        self._plans = self._holds = self._barriers = self._holding = None
        self._owned.clear()

    # reading -------------------------------------------------------------------------------
    def get(self, gang: GangKey) -> GangRecord | None:
        return self._records.get(gang)

    def state(self, gang: GangKey) -> GangState | None:
        record = self._records.get(gang)
        return None if record is None else record.state

    def items(self) -> list[tuple[GangKey, GangRecord]]:
        """Every record, sorted by gang."""
        return sorted(self._records.items())

    def admitted(self) -> list[tuple[GangKey, GangRecord]]:
        """The records of admitted gangs, unsorted (read, do not write)."""
        return [(g, r) for g, r in self._records.items() if r.admitted is not None]

    # Each sorted view is kept (never changed in place: callers get copies) until a record's
    # plan, hold or barrier changes; a copy of the book shares them.
    def plans(self) -> list[tuple[GangKey, Reservation]]:
        if self._plans is None:
            self._plans = sorted((g, r.plan) for g, r in self._records.items()
                                 if r.plan is not None)
        return self._plans

    def holds(self) -> list[tuple[GangKey, Reservation]]:
        if self._holds is None:
            self._holds = sorted((g, r.hold) for g, r in self._records.items()
                                 if r.hold is not None)
        return self._holds

    def barriers(self) -> list[tuple[GangKey, float]]:
        if self._barriers is None:
            self._barriers = sorted((g, r.barrier) for g, r in self._records.items()
                                    if r.barrier is not None)
        return self._barriers

    def holding(self) -> frozenset[GangKey]:
        if self._holding is None:
            self._holding = frozenset(g for g, r in self._records.items()
                                      if r.plan is not None or r.hold is not None)
        return self._holding

    # writing -------------------------------------------------------------------------------
    def writable(self, gang: GangKey) -> GangRecord | None:
        """The gang's record, if it has one, to write (its own copy, if it was shared)."""
        record = self._records.get(gang)
        if record is None or gang in self._owned:
            return record
        record = self._records[gang] = record.copy()
        self._owned.add(gang)
        return record

    def owned(self, gang: GangKey) -> GangRecord:
        """The record of a gang known to have one, to write."""
        record = self.writable(gang)
        assert record is not None, gang
        return record

    def open(self, gang: GangKey) -> GangRecord:
        """The gang's record to write, made if it has none."""
        record = self.writable(gang)
        if record is None:
            record = self._records[gang] = GangRecord()
            self._owned.add(gang)
        return record

    def moved(self, gang: GangKey, before: GangState | None, why: str) -> Transition | None:
        """After a change to the gang's record: drop it if empty, say if its state changed."""
        record = self._records.get(gang)
        after = None if record is None else record.state
        if record is not None and record.empty():
            del self._records[gang]
            self._owned.discard(gang)
        return None if after is before else Transition(gang, before, after, why)

    def set_plan(self, record: GangRecord, plan: Reservation | None) -> None:
        record.plan = plan
        self._plans = self._holding = None

    def set_hold(self, record: GangRecord, hold: Reservation | None) -> None:
        record.hold = hold
        self._holds = self._holding = None

    def set_barrier(self, record: GangRecord, started: float | None) -> None:
        record.barrier = started
        self._barriers = None

    def hold_member(self, gang: GangKey, record: GangRecord, pod_uid: str,
                    node: NodeName) -> None:
        """Hold a member at the gang's barrier."""
        record.waiting[pod_uid] = node
        self._held_in[pod_uid] = self._held_in.get(pod_uid, frozenset()) | {gang}

    def unwait(self, gang: GangKey, record: GangRecord) -> dict[str, NodeName]:
        """Take every member off the gang's barrier; return them."""
        held, record.waiting = record.waiting, {}
        for uid in held:
            gangs = self._held_in.get(uid, frozenset()) - {gang}
            if gangs:
                self._held_in[uid] = gangs
            else:
                self._held_in.pop(uid, None)
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
        for gang, shared in sorted(self._records.items()):
            if shared.admitted is not None and gang not in gangs:
                before, record = shared.state, self.owned(gang)
                record.admitted, record.stage = None, -1
                self.moved(gang, before, "settle")
        return True

    def unhold_pod(self, pod_uid: str) -> list[GangKey]:
        """Take the pod off every barrier holding it; return those gangs (the records'
        barriers are the caller's to end)."""
        gangs = sorted(self._held_in.pop(pod_uid, ()))
        for gang in gangs:
            self.owned(gang).waiting.pop(pod_uid, None)
        return gangs
