"""What the ledger holds, read: the gangs' records, plans, holds, claims, pods in flight and
barriers (:class:`LedgerView`).

:class:`~extender.core.gang.ledger.Ledger` adds the verbs that change them; everything here
only reads, and what it returns is the ledger's own (read, do not write). Pure: no clock, no
I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from extender.core.gang.freeview import CapacityMemo
from extender.core.gang.gangbook import GangBook
from extender.core.gang.lifecycle import GangRecord, GangState, InFlight, Reservation
from extender.core.gang.placement import Plan
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import GangKey, NodeName

_NO_CLAIMS: Mapping[str, tuple[NodeName, str]] = MappingProxyType({})
_NOT_HELD: Mapping[str, NodeName] = MappingProxyType({})


class LedgerView:
    """The ledger's state, and every question about it that changes nothing."""

    def __init__(self) -> None:
        self._book = GangBook()
        self._inflight: dict[str, InFlight] = {}
        self.version = 0
        """Bumped on every change, so callers may cache what they derive from the ledger."""
        self.plans_ended = 0
        """Bumped whenever a plan ends (expired, withdrawn, settled, forgotten): capacity went
        back, and pods turned away while it held it may fit now."""
        self._placed_memo: dict[GangKey, tuple[ClusterSnapshot, int, dict[
            tuple[NodeName, str], int]]] = {}
        self._capacity_memo: tuple[ClusterSnapshot | None, int, CapacityMemo] = (
            None, -1, CapacityMemo({}, {}))
        self._short_memo: dict[GangKey, tuple[ClusterSnapshot, Plan, NodeName | None]] = {}

    def capacity_memo(self, snapshot: ClusterSnapshot) -> CapacityMemo:
        """Free-capacity changes derived from this snapshot and this ledger, kept until either
        changes (:func:`free_capacity`; every filter asks, most with nothing changed since)."""
        known, version, memo = self._capacity_memo
        if known is not snapshot or version != self.version:
            memo = CapacityMemo({}, {})
            self._capacity_memo = (snapshot, self.version, memo)
        return memo

    # the gangs' records --------------------------------------------------------------------
    def state(self, gang: GangKey) -> GangState | None:
        """The gang's state in the ledger (``None``: it promises the gang nothing)."""
        return self._book.state(gang)

    def records(self) -> list[tuple[GangKey, GangRecord]]:
        """Every gang's record, sorted by gang (the records themselves: read, do not write)."""
        return self._book.items()

    def admitted(self) -> list[tuple[GangKey, GangRecord]]:
        """The admitted gangs' records, unsorted (read, do not write)."""
        return self._book.admitted()

    def record(self, gang: GangKey) -> GangRecord | None:
        """The gang's record (read, do not write), if the ledger keeps one."""
        return self._book.get(gang)

    # plans and preemptors' holds -----------------------------------------------------------
    def plan_for(self, gang: GangKey) -> Plan | None:
        res = self.reservation(gang)
        return None if res is None else res.plan

    def reservation(self, gang: GangKey) -> Reservation | None:
        record = self._book.get(gang)
        return None if record is None else record.plan

    def reservations(self) -> list[tuple[GangKey, Reservation]]:
        return list(self._book.plans())

    def holds(self) -> list[tuple[GangKey, Reservation]]:
        """Preemptors' holds, sorted by gang."""
        return list(self._book.holds())

    def holding(self) -> frozenset[GangKey]:
        """The gangs holding capacity others may not use: by a plan, or by a hold."""
        return self._book.holding()

    def claims(self, gang: GangKey) -> Mapping[str, tuple[NodeName, str]]:
        """Pod uid -> (node, role) claimed on the gang's plan (no copy)."""
        record = self._book.get(gang)
        return _NO_CLAIMS if record is None else record.claims

    # pods in flight and barriers -----------------------------------------------------------
    def in_flight(self) -> Mapping[str, InFlight]:
        return self._inflight

    def waiting(self, gang: GangKey) -> tuple[tuple[str, NodeName], ...]:
        record = self._book.get(gang)
        return () if record is None else tuple(sorted(record.waiting.items()))

    def held(self, gang: GangKey) -> Mapping[str, NodeName]:
        """Pod UID -> node of the gang's members held at the barrier (unsorted, no copy: for
        checks on every arrival)."""
        record = self._book.get(gang)
        return _NOT_HELD if record is None else MappingProxyType(record.waiting)

    def barrier_started(self, gang: GangKey) -> float | None:
        """When the gang's latest new member reached the barrier (``None``: no barrier)."""
        record = self._book.get(gang)
        return None if record is None else record.barrier

    def barriers(self) -> list[tuple[GangKey, float]]:
        return list(self._book.barriers())

    def is_admitted(self, gang: GangKey) -> bool:
        """Whether the gang's barrier released (its first stage at least)."""
        record = self._book.get(gang)
        return record is not None and record.admitted is not None

    def admitted_stage(self, gang: GangKey) -> int:
        """The last stage of the gang its barrier released; -1 before the first."""
        record = self._book.get(gang)
        return -1 if record is None or record.admitted is None else record.stage
