"""Planning a gang: the one entry filter and ungating plan a gang by, at most once per look.

A gang without a plan is planned by its member's filter (:func:`decide_filter`: the whole
gang placed and reserved, or why not) and by ungating's look at its gated members. Both ask
:meth:`GangPlanner.plan_for_gang`. A *look* is one state of the cluster and the ledger: the
same snapshot, the same ledger version, and nothing in the ledger falling due. Within a look
a gang that does not fit is planned once; every other member filtered in it (kube-scheduler
tries the members of a gang one after another), and a look by ungating, get the answer that
planning gave, for their own offered nodes. Planning again could only answer the same: the
planning reads nothing else, and a member not placed yet (not bound, not in flight) changes
nothing in it. A gang that fits is planned and reserved, which ends the look.

Planning a gang that does not fit asks, inside :func:`decide_filter`, whether it would fit an
empty cluster and whom to name as holding what it needs: one planning, up to three placement
searches.

Pure: time is ``now``; the memory is the :class:`GangPlanner`'s, owned by the session.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from extender.core.decide.decisions import FilterDecision, FilterOutcome, decide_filter
from extender.core.decide.settings import CoreSettings
from extender.core.gang.ledger import Ledger
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, GangKey, NodeName, PodInfo

_UNFIT = (FilterOutcome.WAITING, FilterOutcome.REJECTED)


@dataclass
class GangPlanner:
    """Plans gangs for filter and ungating alike, and remembers the gangs found not to fit in
    the current look; one per session."""

    settings: CoreSettings
    planned: int = 0
    """Gangs planned (or tried) so far: what the tests count to see a gang planned once per
    look."""
    look: tuple[ClusterSnapshot, int] | None = None
    """(snapshot, ledger version) of the look the answers belong to."""
    unfit: dict[GangKey, FilterDecision] = field(default_factory=dict)
    """Gang -> the decision planning gave in this look, when the gang did not fit."""

    def plan_for_gang(self, pod: PodInfo, candidates: Sequence[NodeName], *,
                      snapshot: ClusterSnapshot, ledger: Ledger, now: float) -> GangPlanning:
        """Filter ``pod`` over ``candidates``: a member of a planned gang pinned to its plan,
        the gang of one without a plan planned whole, or told why it does not fit (from this
        look's planning when there was one: module doc). A pod in no gang is only filtered
        (:func:`decide_filter`)."""
        gang = snapshot.gang_of(pod.uid)
        if gang is None:
            return GangPlanning(decide_filter(pod, candidates, snapshot=snapshot, ledger=ledger,
                                              now=now, settings=self.settings), planned=False)
        current = (snapshot, ledger.version)
        if self.look is None or self.look[0] is not snapshot or self.look[1] != ledger.version:
            self.look, self.unfit = current, {}
        member = _unplaced_member(gang, pod, snapshot, ledger)
        known = self.unfit.get(gang.key)
        if known is not None and member and not _due(ledger, now):
            return GangPlanning(_offered(known, candidates), planned=False)
        before = ledger.plan_for(gang.key)
        decision = decide_filter(pod, candidates, snapshot=snapshot, ledger=ledger, now=now,
                                 settings=self.settings)
        after = ledger.plan_for(gang.key)
        role = snapshot.memberships[pod.uid].role
        # A member of one of its roles told it does not fit was told so by a planning.
        planned = after is not before or (decision.outcome in _UNFIT and
                                          gang.member(role) is not None)
        if planned:
            self.planned += 1
        if planned and decision.outcome in _UNFIT and member and after is None:
            # Filed under the ledger's version after planning (which may have dropped a plan
            # that lost its room): the state any later member of this look finds.
            if ledger.version != current[1]:
                self.unfit = {}
            self.look = (snapshot, ledger.version)
            self.unfit[gang.key] = decision
        return GangPlanning(decision, planned)


@dataclass(frozen=True, slots=True)
class GangPlanning:
    """The filter's answer for one pod, and whether its gang was planned to give it."""

    decision: FilterDecision
    planned: bool
    """The gang was planned (or tried) by this call, not answered from the look."""

    @property
    def made(self) -> bool:
        """This call made the gang's plan (and reserved it)."""
        return self.decision.outcome is FilterOutcome.PLANNED

    @property
    def never(self) -> bool:
        """Not even an empty cluster holds the gang."""
        return self.decision.outcome is FilterOutcome.REJECTED


def _unplaced_member(gang: Gang, pod: PodInfo, snapshot: ClusterSnapshot,
                     ledger: Ledger) -> bool:
    """``pod`` is one of ``gang``'s roles and is neither bound nor in flight: planning the
    gang for it is planning the gang for any such member."""
    member = snapshot.memberships.get(pod.uid)
    return (member is not None and gang.member(member.role) is not None
            and pod.node_name is None and pod.uid not in ledger.in_flight())


def _due(ledger: Ledger, now: float) -> bool:
    """Whether something in the ledger falls due by ``now`` (filter expires it first: the
    look has moved on)."""
    return (any(r.deadline <= now for _, r in ledger.reservations())
            or any(r.deadline <= now for _, r in ledger.holds())
            or any(f.deadline <= now for f in ledger.in_flight().values()))


def _offered(known: FilterDecision, candidates: Sequence[NodeName]) -> FilterDecision:
    """``known`` said about ``candidates``: every one fails with the gang's reason (one
    preemption could help with while it waits, none could when it never fits)."""
    failed = MappingProxyType(dict.fromkeys(candidates, known.reason))
    if known.outcome is FilterOutcome.REJECTED:
        return replace(known, unresolvable=failed)
    return replace(known, failed=failed)
