"""The bind requests a session holds open at the gang barrier, keyed by ticket.

The ledger counts *pods* at the barrier (``Ledger.held``: what the gang has reached); this
table tracks *requests*: kube-scheduler's bind calls waiting for an answer. They differ: a
parked member is counted by the ledger but has no request open, and a pod may have had
several requests (kube-scheduler gave up on one and retried). What happens to a request is
keyed by its ticket, never by pod UID, so nothing meant for one request is taken by another
for the same pod.

A request's life::

    open ──release──▶ released ──poll──▶ BIND (posted by the adapter)
      │ ├──fail─────▶ failed   ──poll──▶ REFUSE (timed out, yielded, node or pod gone)
      │ └──newer────▶ superseded ─poll─▶ REFUSE
      └──deadline───▶ extended (the gang still gathers) / parked / timed out
    every end ──close──▶ forgotten
"""

from __future__ import annotations

from dataclasses import dataclass

from extender.core.model.notices import PodRef
from extender.core.model.values import GangKey, NodeName


@dataclass(slots=True)
class Hold:
    """One open request: the pod, where it asked to bind, and how long it may wait."""

    pod: PodRef
    gang: GangKey | None
    node: NodeName
    ticket: int
    deadline: float
    """Poll by then: the barrier may have timed out."""
    limit: float
    """The request may be extended while its gang gathers, but not past this (the HTTP
    request would time out in kube-scheduler first)."""


class HeldBinds:
    """Open requests and what was decided for each."""

    def __init__(self) -> None:
        self._next = 0
        self.by_pod: dict[str, Hold] = {}
        """Pod UID -> its one open request (a newer request supersedes the older)."""
        self.by_ticket: dict[int, Hold] = {}
        """Ticket -> the request, while it is open or has an answer not yet polled."""
        self.superseded: set[int] = set()
        self.released: dict[int, NodeName] = {}
        """Ticket -> the node the ledger charged: bind there and nowhere else."""
        self.failed: dict[int, tuple[str, str]] = {}
        """Ticket -> (outcome, reason)."""
        self.releasing: dict[GangKey, set[str]] = {}
        """Gang -> UIDs released to bind whose Binding is not done yet; the last one done
        settles the gang's plan (once per gang, not once per member)."""

    def open(self, pod: PodRef, gang: GangKey | None, node: NodeName, *, deadline: float,
             limit: float) -> Hold:
        self._next += 1
        hold = Hold(pod, gang, node, self._next, deadline, limit)
        self.by_pod[pod.uid] = hold
        self.by_ticket[hold.ticket] = hold
        return hold

    def find(self, ticket: int) -> Hold | None:
        return self.by_ticket.get(ticket)

    def close(self, ticket: int) -> None:
        """Forget everything about ``ticket`` (idempotent: called on every way out)."""
        hold = self.by_ticket.pop(ticket, None)
        if hold is not None and self.by_pod.get(hold.pod.uid) is hold:
            del self.by_pod[hold.pod.uid]
        self.released.pop(ticket, None)
        self.failed.pop(ticket, None)
        self.superseded.discard(ticket)

    def done_releasing(self, uid: str) -> GangKey | None:
        """``uid``'s Binding is done or failed; the gang whose last release that was."""
        for gang, uids in list(self.releasing.items()):
            if uid in uids:
                uids.discard(uid)
                if not uids:
                    del self.releasing[gang]
                    return gang
                return None
        return None

    def gangs_of_open(self) -> dict[str, GangKey | None]:
        """Pod UID -> gang of every open request (for introspection)."""
        return {uid: h.gang for uid, h in self.by_pod.items()}
