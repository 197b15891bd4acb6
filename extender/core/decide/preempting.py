"""The preemption plans the session keeps: one per gang that does not fit, from its members'
first preempt call until its deadline or until the gang fits.

kube-scheduler preempts for one pod at a time; every preempt call of a gang's members is
answered from the gang's one plan (:func:`plan_preemption`), whose victims are all evicted at
once (:class:`Evict`) and whose freed capacity is held for the gang in the ledger
(:meth:`Ledger.hold`) so others do not take it meanwhile. Pure: time is ``now``, effects are
values.
"""

from __future__ import annotations

from collections.abc import Mapping

from extender.core.decide.effects import Effect, Evict
from extender.core.decide.preemption import PreemptionPlan, plan_preemption
from extender.core.decide.settings import CoreSettings
from extender.core.gang.ledger import Ledger
from extender.core.model.notices import PodRef
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import GangKey, NodeName, PodInfo


class PreemptionDesk:
    """Each preempting gang's plan, and the ledger holds that go with them."""

    def __init__(self, settings: CoreSettings, ledger: Ledger) -> None:
        self.settings = settings
        self.ledger = ledger
        self.plans: dict[GangKey, PreemptionPlan] = {}
        """Gang -> its preemption plan, kept until its deadline or until the gang fits."""

    def plan_for(self, pod: PodInfo, snapshot: ClusterSnapshot, now: float,
                 pdb_violations: Mapping[NodeName, int],
                 out: list[Effect]) -> PreemptionPlan | None:
        """The pod's gang's preemption plan: the one kept, or a new one past its deadline.
        A new plan's victims are all evicted at once (:class:`Evict`), and what they free is
        held for the gang."""
        for key in [k for k, p in self.plans.items()
                    if p.deadline <= now or k not in snapshot.gangs]:
            del self.plans[key]
            self.ledger.unhold(key)
        gang = snapshot.gang_of(pod.uid)
        if gang is None or self.ledger.plan_for(gang.key) is not None:
            if gang is not None and self.plans.pop(gang.key, None) is not None:
                self.ledger.unhold(gang.key)  # it fits now: nothing more to evict
            return None
        kept = self.plans.get(gang.key)
        if kept is not None:
            return kept
        plan = plan_preemption(gang, snapshot=snapshot, ledger=self.ledger,
                               settings=self.settings, now=now,
                               pdb_nodes={n for n, c in pdb_violations.items() if c > 0})
        if plan is not None:
            self.plans[gang.key] = plan
            # What its victims free is the gang's: others see it taken until it is planned.
            self.ledger.hold(plan.placement, now=now, deadline=plan.deadline)
            pods = tuple(PodRef(p.namespace, p.name, p.uid) for p in (
                snapshot.pods[u] for u in sorted(plan.pods())))
            out.append(Evict(gang.key, pods, f"preempted by gang {gang.key} (priority "
                                              f"{plan.preemptor_priority}), which evicts "
                                              f"{len(plan.victims)} whole victims to fit"))
        return plan
