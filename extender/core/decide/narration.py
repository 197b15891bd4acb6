"""The session's narration: what it tells about gangs and pods, once per change.

The verbs say what they decided; the :class:`Narrator` turns that into effects: events on
pods, events on a gang's workload object (so ``kubectl describe jobset`` says why the gang
waits, or that it was admitted, timed out...), ``WorkloadRefused`` for a workload Muster
cannot schedule. It keeps the last reason and holders per gang and the journal of every
verb's decision, and never says the same thing twice in a row. It decides nothing. Pure: no
clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from extender.core.decide.decisions import FilterDecision, FilterOutcome
from extender.core.decide.effects import BindStep, Effect, Emit, WorkloadRefused
from extender.core.decide.gating import GATHERING, Ungating
from extender.core.decide.holders import Holder
from extender.core.decide.podnews import PodNews
from extender.core.decide.preemption import PreemptionPlan
from extender.core.decide.settings import CoreSettings
from extender.core.model.notices import EventType, PodEvent, PodRef, WorkloadEvent
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import GangKey, NodeName, PodInfo

_STALE_REASONS = 256
"""Reasons kept for gangs that are gone before they are forgotten in one pass."""


def told(gang: GangKey, reason: str) -> str:
    """What a gang's events say of ``reason``: the reason, naming the gang once (most core
    reasons start with it already)."""
    return reason if reason.startswith(f"gang {gang}") else f"gang {gang}: {reason}"


@dataclass(frozen=True, slots=True)
class Entry:
    """One line of the session's journal: a verb, who asked, what it decided, its effects."""

    verb: str
    now: float
    pod: str
    outcome: str
    reason: str
    effects: tuple[Effect, ...] = field(default=())


class Narrator:
    """What the session has told, per pod and per gang, and its journal."""

    def __init__(self, settings: CoreSettings, *, journal: list[Entry] | None = None) -> None:
        self.settings = settings
        self.journal = journal
        """When a list is given, every verb appends what it decided (the conformance test
        compares the server's and the simulator's)."""
        self.last_reason: dict[GangKey, str] = {}
        self.reasons_version = 0
        """Bumped whenever a gang's last reason changes (what shows it may be written again)."""
        self.holders: dict[GangKey, tuple[Holder, ...]] = {}
        """Gang -> who held what it needed at its last filter (empty once it fits)."""
        self._last_event: dict[str, tuple[str, str]] = {}
        self._refusals_told: dict[str, str] = {}
        self._workload_told: dict[GangKey, tuple[str, str]] = {}
        """Gang -> the last state event on its workload (reason, message)."""

    def remember_reason(self, gang: GangKey, reason: str) -> None:
        if self.last_reason.get(gang) != reason:
            self.reasons_version += 1
        self.last_reason[gang] = reason

    def forget(self, gang: GangKey) -> None:
        """The gang's workload is gone: its last reason goes too."""
        self.last_reason.pop(gang, None)

    def keep_only(self, snapshot: ClusterSnapshot) -> None:
        """Forget what was told about pods and gangs the cluster no longer has."""
        for uid in [u for u in self._last_event if u not in snapshot.pods]:
            del self._last_event[uid]
        if len(self.last_reason) > len(snapshot.gangs) + _STALE_REASONS:
            # Reasons of gangs whose workload went without a plan to forget them by.
            for gang in [g for g in self.last_reason if g not in snapshot.gangs]:
                del self.last_reason[gang]
        for key in [k for k in self._workload_told if k not in snapshot.gangs]:
            del self._workload_told[key]
        for key in [k for k in self.holders if k not in snapshot.gangs]:
            del self.holders[key]

    def event(self, pod: PodInfo, type_: EventType, reason: str, message: str,
              out: list[Effect]) -> None:
        # Filter runs on every retry of a pending pod; record a change, not a repetition.
        if self._last_event.get(pod.uid) == (reason, message):
            return
        self._last_event[pod.uid] = (reason, message)
        out.append(Emit(PodEvent(PodRef(pod.namespace, pod.name, pod.uid), type_, reason,
                                 message)))

    def tell_workload(self, gang: GangKey, type_: EventType, reason: str, message: str, *,
                      snapshot: ClusterSnapshot) -> tuple[Effect, ...]:
        """The gang's state on its workload object, so ``kubectl describe jobset`` says why
        it waits (or that it was admitted, timed out...): once per change, as for pods."""
        found = snapshot.gangs.get(gang)
        told = self._workload_told.get(gang)
        if found is None or told == (reason, message):
            return ()
        if reason == GATHERING and told is not None and told[0] == GATHERING:
            # Said once while a gang's members are created, not once per member ("3 of 16
            # exist", "4 of 16 exist"...: an Event per pod created); the count is in its
            # last reason (`muster describe`, the Gang object).
            return ()
        self._workload_told[gang] = (reason, message)
        ref = found.workload
        return (Emit(WorkloadEvent(ref.api_version, ref.kind, ref.namespace, ref.name, ref.uid,
                                   type_, reason, message, gang=gang)),)

    def tell_refusals(self, snapshot: ClusterSnapshot, out: list[Effect]) -> None:
        """A workload Muster cannot schedule gets one Warning event saying why, on the
        workload itself (its pods only say they wait), once per change of the reason."""
        told = self._refusals_told
        for key in [k for k in told if k not in snapshot.refused]:
            del told[key]
        for key, (ref, why) in snapshot.refused.items():
            if told.get(key) == why:
                continue
            told[key] = why
            out.append(WorkloadRefused(key, why))
            out.append(Emit(WorkloadEvent(ref.api_version, ref.kind, ref.namespace, ref.name,
                                          ref.uid, EventType.WARNING, "WorkloadRefused",
                                          f"Muster cannot schedule this workload: {why}")))

    def tell_filter(self, pod: PodInfo, decision: FilterDecision, *,
                    snapshot: ClusterSnapshot, out: list[Effect]) -> None:
        """What a filter decided about a gang member, on the member when it waits and on its
        gang's workload."""
        gang = decision.gang
        if gang is None:
            return
        self.remember_reason(gang, decision.reason)
        self.holders[gang] = decision.holders
        message = told(gang, decision.reason)
        # A passing member says nothing on itself: kube-scheduler's Scheduled event will,
        # and its gang's story is told once on the workload, not once per pod (two Events
        # a member were most of the API server's writes in a burst of gangs).
        if not decision.passed:
            self.event(pod, EventType.WARNING, "GangWaiting", message, out)
            out += self.tell_workload(gang, EventType.WARNING, "GangWaiting", message,
                                      snapshot=snapshot)
        if decision.outcome is FilterOutcome.PLANNED and decision.plan is not None:
            nodes = sorted({n for n, _, _ in decision.plan.slots})
            where = ", ".join(nodes[:8]) + (f" and {len(nodes) - 8} more"
                                            if len(nodes) > 8 else "")
            out += self.tell_workload(gang, EventType.NORMAL, "GangPlanned",
                                      f"gang {gang}: planned on {where}; waiting for its "
                                      "members to reach bind", snapshot=snapshot)

    def tell_ungating(self, found: Ungating, news: PodNews, *, snapshot: ClusterSnapshot,
                      now: float, out: list[Effect]) -> None:
        """Why gangs stay gated (on their workload, and on their pods when ``news`` says it
        is time), and that others were ungated; the ungates themselves go into ``out``."""
        for still in found.gated:
            self.remember_reason(still.gang, still.reason)
            self.holders[still.gang] = still.holders
            message = told(still.gang, still.reason)
            kind = EventType.WARNING if still.event == "GangWaiting" else EventType.NORMAL
            if still.event == "GangWaiting":
                if news.waits(still.gang, still.pods, message, now=now,
                              after=self.settings.pod_events_after):
                    self.tell_pods(still.pods, message, snapshot, out)
            else:
                news.settled(still.gang)
            out += self.tell_workload(still.gang, kind, still.event, message,
                                      snapshot=snapshot)
        for ungate in found.ungates:
            if ungate.gang is not None:
                news.settled(ungate.gang)
                self.remember_reason(ungate.gang, ungate.reason)
                self.holders[ungate.gang] = ()
                out += self.tell_workload(ungate.gang, EventType.NORMAL, "GangUngated",
                                          ungate.reason, snapshot=snapshot)
            out.append(ungate)
        for tell in news.due(now):
            self.tell_pods(tell.pods, tell.message, snapshot, out)

    def tell_pods(self, pods: Sequence[PodInfo], message: str, snapshot: ClusterSnapshot,
                  out: list[Effect]) -> None:
        """``GangWaiting`` on each of ``pods`` still behind Muster's gate."""
        for pod in pods:
            current = snapshot.pods.get(pod.uid)
            if current is not None and self.settings.gate in current.gates:
                self.event(current, EventType.WARNING, "GangWaiting", message, out)

    def tell_preemption(self, pod: PodInfo, gang: GangKey, plan: PreemptionPlan | None,
                        chosen: Mapping[NodeName, Sequence[str]], out: list[Effect]) -> None:
        """Say on the preemptor's pod whom its gang evicts, or that it evicts nobody."""
        if plan is None:
            self.event(pod, EventType.NORMAL, "GangNotPreempting",
                       f"gang {gang}: evicting every lower-priority gang and pod it may "
                       "evict would still not let it fit whole, or its pods may not "
                       "preempt (preemptionPolicy: Never); nothing is evicted", out)
            return
        names = ", ".join(v.key for v in plan.victims[:20])
        more = f" and {len(plan.victims) - 20} more" if len(plan.victims) > 20 else ""
        here = ", ".join(f"{n} ({len(u)} pods)" for n, u in sorted(chosen.items()))
        self.event(pod, EventType.NORMAL, "GangPreempting",
                   f"gang {gang} (priority {plan.preemptor_priority}) preempts "
                   f"{len(plan.victims)} whole victims to fit whole: {names}{more}; "
                   f"evicting now on {here or 'no offered node'}", out)

    def done(self, verb: str, now: float, ref: PodRef, step: BindStep,
             out: list[Effect]) -> BindStep:
        """``step`` with its effects, journaled."""
        effects = tuple(out)
        self.log(Entry(verb, now, ref.key, step.outcome, step.reason, effects))
        return BindStep(step.step, step.outcome, step.reason, step.gang, step.ticket,
                        step.deadline, effects)

    def log(self, entry: Entry) -> None:
        """Journal ``entry``, unless it decided nothing worth a line."""
        if self.journal is None:
            return
        quiet = entry.verb in ("tick", "prioritize", "ungate") or (
            entry.verb, entry.outcome) == ("poll", "held")
        if not entry.effects and quiet:
            return  # nothing decided: a tick with nothing due, a held request still waiting
        self.journal.append(entry)
