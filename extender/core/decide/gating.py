"""Ungating: when the pods Muster's webhook gated may enter kube-scheduler's queue.

A gated pod costs kube-scheduler nothing (its SchedulingGates PreEnqueue plugin keeps it out
of the queue), so a gang that cannot be placed waits behind its gates instead of coming back
to filter on every retry. :func:`decide_ungates` looks at every gated pod this Muster serves:

- a gang whose members have reached its minimum (of the stages that exist) is planned by
  the entry its first member's filter plans it by
  (:meth:`~extender.core.decide.planning.GangPlanner.plan_for_gang`: the same placement, the
  same ledger reservation, at most once per look); once the plan is made, every gated member
  is ungated together;
- a gang that does not fit stays gated with the reason the filter would give, and is looked
  at again only when the cluster changed in a way that could help: free capacity grew
  somewhere (a pod ended, a plan ended, a node came), its own members changed, or its plan
  appeared (its ungated members were filtered). When only free capacity grew, and not
  enough for the gang (:func:`~extender.core.gang.bounds.shortfall`) while it has no one
  to preempt, it is not planned again, and the bound's reason is told;
- a member of a gang already planned or admitted (a later stage of a staged gang) is
  ungated as it appears: its filter is pinned to the plan;
- a gang that does not fit but would by evicting lower-priority units is ungated: only pods in
  kube-scheduler's queue reach its preemption (and the extender's preempt verb, which evicts
  that gang's one preemption plan);
- a pod that turned out to be in no gang is ungated at once; one whose workload Muster cannot
  resolve is ungated after ``gate_bound`` seconds, never stuck for good.

Filter and bind do not trust the gates: an ungated pod is decided exactly as strictly as one
that was never gated. Pure: time is ``now``, effects are values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from extender.core.decide.decisions import FilterOutcome
from extender.core.decide.effects import Ungate
from extender.core.decide.holders import (
    RUNNING,
    Holder,
    running_holders,
    waiting_reason,
)
from extender.core.decide.planning import GangPlanner
from extender.core.decide.preemption import may_preempt, plan_preemption
from extender.core.decide.settings import CoreSettings
from extender.core.gang.bounds import shortfall
from extender.core.gang.capacity import NodeCapacity, gang_priority, gated_of, index_of
from extender.core.gang.ledger import Ledger, free_capacity, per_role, placed_counts
from extender.core.model.notices import PodRef
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import Gang, GangKey, NodeName, PodInfo, PodPhase

_PLACED = (FilterOutcome.PLANNED, FilterOutcome.PINNED, FilterOutcome.SURPLUS)
GATHERING = "GangGathering"
"""The event of a gang whose members are still being created (said on its workload)."""
_TERMINAL = (PodPhase.SUCCEEDED, PodPhase.FAILED)


@dataclass(frozen=True, slots=True)
class StillGated:
    """A gang left behind its gates, and why."""

    gang: GangKey
    pods: tuple[PodInfo, ...]
    reason: str
    event: str
    """``GangWaiting`` (it does not fit; said on its pods too) or ``GangGathering`` (too few
    members exist yet; said on the workload only)."""
    holders: tuple[Holder, ...] = ()
    never: bool = False
    """Not even an empty cluster holds the gang (the filter's ``rejected``)."""


@dataclass
class GateBook:
    """What ungating remembers between looks; owned by the session."""

    since: dict[str, float] = field(default_factory=dict)
    """Pod UID -> when it was first seen gated."""
    asked: dict[str, float] = field(default_factory=dict)
    """Pod UID -> when its ungating was last asked for (until the gate is seen gone)."""
    looked: dict[GangKey, tuple[tuple[object, ...], int | None]] = field(default_factory=dict)
    """Gang -> what it was looked at with when it was left gated, and the free-capacity
    epoch then (``None`` when it was left gathering: capacity does not matter to it)."""
    last: dict[GangKey, StillGated] = field(default_factory=dict)
    """Gang -> what its last full look said, while it is left gated: a look the bound
    answers names the same holders, and leaves a gang no empty cluster holds saying so."""
    epoch: int = 0
    """Bumped whenever free capacity grew anywhere since the last look."""
    free: Mapping[NodeName, NodeCapacity] | None = None
    seen: tuple[int, int, int] | None = None
    """(revision, snapshot identity, ledger version) of the last look."""
    due: float = float("inf")
    """The earliest time a look may decide something although nothing changed."""
    wall_offset: float = 0.0
    """The wall clock's reading less ``now``, set by an adapter whose session runs on a
    monotonic clock before each look: an API timestamp (a pod's ``creationTimestamp``) less
    this is the same instant on the session's clock. 0: ``now`` is wall time (the
    simulator's virtual clock)."""
    evaluated: int = 0
    """Gangs planned (or tried) by looks so far: what the tests count to see a gang looked at
    once."""
    bounded: int = 0
    """Looks at a gang left gated for want of room that free capacity had grown for, but
    not enough to hold it (:func:`~extender.core.gang.bounds.shortfall`): not planned."""


@dataclass(frozen=True, slots=True)
class Ungating:
    ungates: tuple[Ungate, ...] = ()
    gated: tuple[StillGated, ...] = ()
    planned: tuple[GangKey, ...] = ()
    """Gangs this look planned (their plan's reservation is in the ledger now)."""


def _grew(before: Mapping[NodeName, NodeCapacity], now: Mapping[NodeName, NodeCapacity]) -> bool:
    """Whether any node has more of anything free than before (or is new)."""
    for name, cap in now.items():
        old = before.get(name)
        if old is cap:  # the same capacity object: a node nothing changed on
            continue
        if old is None:
            return True
        if any(cap.free.get(k, 0) > old.free.get(k, 0) for k in cap.free):
            return True
        if cap.pods is not None and (old.pods is None or cap.pods > old.pods):
            return True
        if len(cap.devices) > len(old.devices) or any(
                a > b for a, b in zip(cap.devices, old.devices, strict=False)):
            return True
    return False


def _gated(snapshot: ClusterSnapshot, settings: CoreSettings) -> list[PodInfo]:
    """Muster's gated pods: from the gated pods the snapshot's source keeps, not a pass over
    every pod (ungating looks after every burst of pod events)."""
    names, pods = settings.scheduler_names, snapshot.pods
    return [p for p in (pods[u] for u in gated_of(snapshot) if u in pods)
            if settings.gate in p.gates and p.scheduler_name in names]


def _gathered(gang: Gang, snapshot: ClusterSnapshot, uids: tuple[str, ...]) -> tuple[int, int]:
    """(members that exist, members needed) over the stages that exist: a later stage's pods
    are created only after an earlier one is Ready, and the plan holds them all anyway."""
    counts: dict[str, int] = {}
    for uid in uids:
        pod = snapshot.pods[uid]
        if pod.deleting or pod.phase in _TERMINAL:
            continue
        role = snapshot.memberships[uid].role
        counts[role] = counts.get(role, 0) + 1
    stages = [gang.stage_of(r) for r in counts if gang.member(r) is not None]
    last = max(stages, default=0)
    wanted = [m for m in gang.members if m.stage <= last]
    return (sum(min(counts.get(m.role, 0), m.min_count) for m in wanted),
            sum(m.min_count for m in wanted))


def decide_ungates(snapshot: ClusterSnapshot, *, now: float, ledger: Ledger,
                   settings: CoreSettings, book: GateBook,
                   planning: GangPlanner | None = None) -> Ungating:
    """Which gated pods to ungate now, and which gangs stay gated and why (module doc).
    ``planning``: the session's, shared with filter (a look of its own without it)."""
    planning = GangPlanner(settings) if planning is None else planning
    seen = (snapshot.revision, id(snapshot), ledger.version)
    if seen == book.seen and now < book.due:
        return Ungating()
    book.seen, book.due = seen, float("inf")
    gated = _gated(snapshot, settings)
    live = {p.uid for p in gated}
    for table in (book.since, book.asked):
        for uid in [u for u in table if u not in live]:
            del table[uid]
    for key in [k for k in book.looked if k not in snapshot.gangs]:
        del book.looked[key]
        book.last.pop(key, None)
    ungates: list[Ungate] = []
    loose: dict[str, list[PodRef]] = {}
    by_gang: dict[GangKey, list[PodInfo]] = {}
    for pod in sorted(gated, key=lambda p: p.key):
        since = book.since.setdefault(pod.uid, now)
        asked = book.asked.get(pod.uid)
        if asked is not None and now < asked + settings.gate_retry:
            book.due = min(book.due, asked + settings.gate_retry)
            continue
        gang = snapshot.gang_of(pod.uid)
        if gang is not None:
            by_gang.setdefault(gang.key, []).append(pod)
            continue
        ref = PodRef(pod.namespace, pod.name, pod.uid)
        why = snapshot.unresolved.get(pod.uid)
        if why is None:
            loose.setdefault("the pod is in no gang", []).append(ref)
            continue
        start = min(since, pod.created - book.wall_offset) if pod.created > 0 else since
        if now >= start + settings.gate_bound:
            loose.setdefault(f"no gang resolved within {settings.gate_bound:g}s ({why}); "
                             "filter and bind still decide for it", []).append(ref)
        else:
            book.due = min(book.due, start + settings.gate_bound)
    for reason, refs in sorted(loose.items()):
        ungates.append(Ungate(tuple(refs), reason))
    gated_out: list[StillGated] = []
    planned: list[GangKey] = []
    index = index_of(snapshot, gpu=settings.gpu_resource)
    gpu = settings.gpu_resource
    # As kube-scheduler's queue orders pods: higher priority first, then the older gang, so
    # a gang's place does not depend on its name.
    order = sorted(by_gang.items(), key=lambda item: (
        -gang_priority(snapshot.gangs[item[0]], snapshot, gpu=gpu),
        snapshot.gangs[item[0]].created, item[0]))
    looks: list[tuple[GangKey, list[PodInfo], tuple[str, ...], tuple[object, ...]]] = []
    shortfalls: dict[GangKey, tuple[int, int] | None] = {}
    capacity_matters = False
    for key, pods in order:
        uids = index.gang_pods.get(key, ())
        look: tuple[object, ...] = (snapshot.gangs[key], uids, tuple(p.uid for p in pods),
                                    ledger.plan_for(key) is not None,
                                    ledger.admitted_stage(key))
        before = book.looked.get(key)
        if before is not None and before[0] == look:
            if before[1] is None:
                continue  # still gathering, and no member came: capacity cannot change that
            capacity_matters = True  # left gated for want of room: did free capacity grow?
        else:  # changed: it is looked at, and gathers or not whatever the capacity
            shortfalls[key] = _shortfall(snapshot.gangs[key], snapshot, uids, ledger)
            capacity_matters = capacity_matters or shortfalls[key] is None
        looks.append((key, pods, uids, look))
    if capacity_matters:
        # Free capacity before anything is planned in this look; what is left gated is
        # remembered with the epoch, and looked at again once free capacity grew anywhere.
        # Not computed when every gang looked at is still gathering (most looks while a
        # burst of gangs is created): none of them is planned, and none needs the epoch.
        free = free_capacity(snapshot, ledger, gpu=settings.gpu_resource)
        if book.free is None or _grew(book.free, free):
            book.epoch += 1
        book.free = dict(free)
    for key, pods, uids, state in looks:
        gang = snapshot.gangs[key]
        before = book.looked.get(key)
        if before == (state, book.epoch):
            continue  # nothing changed that could let it fit
        why = (_still_cannot_fit(gang, snapshot, ledger, settings)
               if before is not None and before[0] == state and before[1] is not None
               else None)
        if why is not None:
            # Only free capacity grew since it was left gated for want of room, and not
            # enough to hold it: it waits without being planned again, told the bound's
            # reason (and who held the room at its last full look). A gang that would not
            # fit an empty cluster keeps saying so.
            book.looked[key] = (state, book.epoch)
            book.bounded += 1
            last = book.last.get(key)
            if last is None or not last.never:
                # Muster's own promises as at the last full look; the running workloads as
                # they are now (one that ended since is not named).
                promised = () if last is None else tuple(
                    h for h in last.holders if h.kind != RUNNING)
                placed = per_role(placed_counts(key, snapshot, ledger,
                                                gpu=settings.gpu_resource))
                held = promised + running_holders(gang, snapshot=snapshot,
                                                  gpu=settings.gpu_resource, placed=placed)
                reason = waiting_reason(f"gang {key}: does not fit: {why}", held)
                gated_out.append(StillGated(key, tuple(pods), reason, "GangWaiting", held))
            continue
        short = shortfalls[key] if key in shortfalls else _shortfall(gang, snapshot, uids,
                                                                    ledger)
        outcome = _look(gang, pods, short, snapshot=snapshot, now=now, ledger=ledger,
                        settings=settings, book=book, planning=planning)
        if isinstance(outcome, StillGated):
            # Remembered as it was before this look (planning may change the ledger); a
            # gang still gathering waits for its members, whatever the capacity.
            book.looked[key] = (state, None if outcome.event == GATHERING else book.epoch)
            book.last[key] = outcome
            gated_out.append(outcome)
            continue
        book.looked.pop(key, None)
        book.last.pop(key, None)
        ungate, made = outcome
        if made:
            planned.append(key)
        for pod in pods:
            book.asked[pod.uid] = now
        ungates.append(ungate)
    for ungate in ungates:
        for ref in ungate.pods:
            book.asked[ref.uid] = now
    if ungates:
        book.due = min(book.due, now + settings.gate_retry)
    return Ungating(tuple(ungates), tuple(gated_out), tuple(planned))


def _still_cannot_fit(gang: Gang, snapshot: ClusterSnapshot, ledger: Ledger,
                      settings: CoreSettings) -> str | None:
    """Why the gang certainly still does not fit (:func:`shortfall` on the free capacity it
    sees, its own holds included) when it has no one to preempt either; ``None``: plan it."""
    gpu = settings.gpu_resource
    if may_preempt(gang, snapshot, gpu=gpu):
        return None
    free = free_capacity(snapshot, ledger, gpu=gpu, exclude=gang.key)
    return shortfall(gang, snapshot, ledger, free, gpu=gpu)


def _shortfall(gang: Gang, snapshot: ClusterSnapshot, uids: tuple[str, ...],
               ledger: Ledger) -> tuple[int, int] | None:
    """(members that exist, members needed) while the gang is gathering: fewer members than
    its minimum exist, and it has no plan or admitted stage to pin them to; else ``None``."""
    key = gang.key
    if ledger.plan_for(key) is not None or ledger.admitted_stage(key) >= 0:
        return None
    have, need = _gathered(gang, snapshot, uids)
    return (have, need) if have < need else None


def _look(gang: Gang, pods: list[PodInfo], short: tuple[int, int] | None, *,
          snapshot: ClusterSnapshot, now: float, ledger: Ledger, settings: CoreSettings,
          book: GateBook, planning: GangPlanner) -> StillGated | tuple[Ungate, bool]:
    """One gang with gated members: plan it as filter would, or say why it stays gated
    (``short``: its :func:`_shortfall`)."""
    key = gang.key
    if short is not None:
        have, need = short
        return StillGated(key, tuple(pods),
                          f"gang {key}: {have} of its minimum {need} members exist; its pods "
                          "stay gated until the rest are created, then it is planned whole",
                          GATHERING)
    first = min(pods, key=lambda p: (gang.stage_of(snapshot.memberships[p.uid].role), p.key))
    found = planning.plan_for_gang(first, (), snapshot=snapshot, ledger=ledger, now=now)
    if found.planned:
        book.evaluated += 1
    decision = found.decision
    refs = tuple(PodRef(p.namespace, p.name, p.uid) for p in pods)
    if decision.outcome is FilterOutcome.WAITING:
        # Preemption happens only for pods in kube-scheduler's queue (its PostFilter calls the
        # extender's preempt): a gang that could fit by evicting lower-priority units must
        # leave its gates, or it would wait behind them for good.
        victims = plan_preemption(gang, snapshot=snapshot, ledger=ledger, settings=settings,
                                  now=now)
        if victims is not None:
            return Ungate(refs, f"gang {key}: does not fit ({decision.reason}); evicting "
                                f"{len(victims.victims)} lower-priority units would let it "
                                "fit whole: ungated for kube-scheduler's preemption", key), False
    if decision.outcome not in _PLACED:
        return StillGated(key, tuple(pods), decision.reason, "GangWaiting", decision.holders,
                          never=found.never)
    made = found.made
    why = (f"gang {key}: planned whole; ungating {len(refs)} members together" if made else
           f"gang {key}: its plan holds these members; ungating {len(refs)}")
    return Ungate(refs, why, key), made
