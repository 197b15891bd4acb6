"""Bringing the session up to the cluster before each verb decides.

After a restart the ledger is rebuilt from what the cluster shows; then, at each new snapshot,
what the cluster no longer has is forgotten (a deleted workload's plan, a deleted pod in
flight or held at bind, the barrier of a gang whose node is gone), plans the cluster filled
are settled, and what an admitted gang's departed members used is held for their
replacements; at each new instant, barriers past their timeout are withdrawn and plans past
their TTL expire. Each of these is told (:mod:`extender.core.decide.narration`). Pure: time
is ``now``, effects are values.
"""

from __future__ import annotations

from collections.abc import Mapping

from extender.core.decide.barrier import barriers_on_lost_nodes, expired_barriers, withdraw
from extender.core.decide.bindverbs import BindDesk
from extender.core.decide.effects import Effect, Emit, PlanExpired
from extender.core.decide.podnews import PodNews
from extender.core.decide.preemption import PreemptionPlan
from extender.core.model.notices import EventType, WorkloadEvent
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import GangKey


class Upkeep:
    """What the session's look at the cluster remembers between verbs."""

    def __init__(self, desk: BindDesk, *, news: PodNews,
                 preemptions: Mapping[GangKey, PreemptionPlan]) -> None:
        self.settings, self.ledger, self.narrator = desk.settings, desk.ledger, desk.narrator
        self.desk = desk
        self.pod_news = news
        self.preemptions = preemptions
        """The session's preemption plans (read only: their victims hold nothing)."""
        self.expired_total = 0
        self._rebuilt = False
        self._swept_revision = -1
        self._prepared: tuple[int, int, int, float] | None = None
        """(revision, snapshot identity, ledger version, now) of the last complete look."""

    def prepare(self, snapshot: ClusterSnapshot, now: float, out: list[Effect]) -> None:
        """Rebuild the ledger once (after a restart), forget what the cluster no longer has,
        withdraw barriers nobody waits on any more, expire plans past their TTL."""
        seen = (snapshot.revision, id(snapshot), self.ledger.version, now)
        if seen == self._prepared:
            return  # nothing changed since the last look at this very instant: all no-ops
        if not self._rebuilt:
            # After a restart the ledger is empty but pods Muster planned may be half bound.
            self.ledger.rebuild(snapshot, now=now, ttl=self.settings.plan_ttl,
                                gpu=self.settings.gpu_resource,
                                stage_ttl=self.settings.stage_ttl)
            self._rebuilt = True
        if snapshot.revision != self._swept_revision:
            self._sweep(snapshot, out)
            self._keep_for_replacements(snapshot, now, out)
        for gang in expired_barriers(ledger=self.ledger, now=now, settings=self.settings):
            gone = withdraw(gang, ledger=self.ledger)
            self.desk.fail_held(gone, snapshot, out)
        for gang in self.ledger.expire(now):
            self.expired_total += 1
            out.append(PlanExpired(gang))
            if self._stage_expired(gang, snapshot, out):
                continue
            if self.ledger.is_admitted(gang):
                why = (f"gang {gang}: no member came to take the capacity held for the rest "
                       "of it (replacements for members that went) within its TTL; that "
                       "capacity is free again")
                self.narrator.remember_reason(gang, why)
                out += self.narrator.tell_workload(gang, EventType.WARNING, "GangPlanExpired",
                                                   why, snapshot=snapshot)
                continue
            self.narrator.remember_reason(gang, "plan expired: no new member arrived within the "
                                        "plan's TTL")
            for pod in snapshot.pods_of_gang(gang):
                if pod.node_name is None:
                    self.narrator.event(pod, EventType.WARNING, "GangPlanExpired",
                                f"gang {gang}: plan expired before all members arrived; "
                                "the gang backs off and is planned again", out)
            out += self.narrator.tell_workload(
                gang, EventType.WARNING, "GangPlanExpired",
                f"gang {gang}: plan expired before all members arrived; it is planned again",
                snapshot=snapshot)
        self._prepared = (snapshot.revision, id(snapshot), self.ledger.version, now)

    def _stage_expired(self, gang_key: GangKey, snapshot: ClusterSnapshot,
                       out: list[Effect]) -> bool:
        """A staged gang's plan ran out while a released stage waited for the next one to be
        created (its dependency never became Ready, or the operator failed): say so on the
        workload, whose pods are all bound and would otherwise say nothing."""
        gang = snapshot.gangs.get(gang_key)
        stage = self.ledger.admitted_stage(gang_key)
        if gang is None or stage < 0 or stage >= gang.last_stage:
            return False
        roles = ", ".join(m.role for m in gang.members if m.stage == stage + 1)
        why = (f"gang {gang_key}: stage {stage + 1} ({roles}) did not appear within "
               f"{self.settings.stage_ttl:g}s of stage {stage} being released; the capacity held "
               "for it is given back, and it is planned again when its pods appear")
        self.narrator.remember_reason(gang_key, why)
        ref = gang.workload
        out.append(Emit(WorkloadEvent(ref.api_version, ref.kind, ref.namespace, ref.name,
                                      ref.uid, EventType.WARNING, "GangStageExpired", why,
                                      gang=gang_key)))
        return True

    def _sweep(self, snapshot: ClusterSnapshot, out: list[Effect]) -> None:
        """Forget what the cluster no longer has: a deleted workload's plan would otherwise
        hold its GPUs until the plan's TTL, and a deleted pod in flight until its own."""
        self._swept_revision = snapshot.revision
        for gang, _ in self.ledger.reservations():
            if gang not in snapshot.gangs:
                self.ledger.forget_gang(gang)
                self.narrator.forget(gang)
        for uid in [u for u in self.ledger.in_flight() if u not in snapshot.pods]:
            self.ledger.forget_pod(uid)
        for uid, hold in list(self.desk.held.by_pod.items()):
            if uid in snapshot.pods or hold.ticket in self.desk.held.failed:
                continue
            # Fail a deleted pod's held request now: held until its timeout, its failure would
            # reach kube-scheduler later, perhaps once a newer pod of the same name exists,
            # and kube-scheduler writes the failure's PodScheduled=False onto a pod by name.
            self.ledger.forget_pod(uid)
            self.desk.fail_ticket(hold, "pod_gone", f"pod uid {uid} was deleted while its bind "
                                                "was held; not binding it", out)
        for gang, reason in barriers_on_lost_nodes(snapshot=snapshot, ledger=self.ledger):
            gone = withdraw(gang, ledger=self.ledger, reason=reason)
            self.desk.fail_held(gone, snapshot, out, outcome="node_gone", event="GangNodeLost")
        # Plans filled by bound pods end here; otherwise they would reserve those pods'
        # capacity again once the pods finish or are deleted.
        self.ledger.settle(snapshot, gpu=self.settings.gpu_resource)
        self.narrator.keep_only(snapshot)
        self.pod_news.keep_only(snapshot.gangs)
        self.narrator.tell_refusals(snapshot, out)

    def _keep_for_replacements(self, snapshot: ClusterSnapshot, now: float,
                               out: list[Effect]) -> None:
        """Hold what an admitted gang's members that went used for their replacements
        (:meth:`~extender.core.gang.ledger.Ledger.keep_for_replacements`), and say so on its
        workload; a preemption's victims hold nothing."""
        spare = frozenset(v.gang for p in self.preemptions.values() for v in p.victims
                          if v.gang is not None)
        for moved in self.ledger.keep_for_replacements(
                snapshot, now=now, ttl=self.settings.replacement_ttl,
                gpu=self.settings.gpu_resource, spare=spare):
            gang, res = moved.gang, self.ledger.reservation(moved.gang)
            if moved.why == "keep_for_replacements" and res is not None:
                nodes = ", ".join(sorted({n for n, _, _ in res.plan.slots}))
                why = (f"gang {gang}: {len(res.replacing)} member(s) went and it is below its "
                       f"minimum; what they used on {nodes} is held for their replacements "
                       f"for up to {self.settings.replacement_ttl:g}s")
                self.narrator.remember_reason(gang, why)
                out += self.narrator.tell_workload(gang, EventType.NORMAL,
                                                   "GangHoldingForReplacement", why,
                                                   snapshot=snapshot)
            elif moved.why == "drop_plan":
                self.narrator.remember_reason(
                    gang, f"gang {gang}: no member is left, or it is ending; the capacity "
                          "held for replacements is free again")
