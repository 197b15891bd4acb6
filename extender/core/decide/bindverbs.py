"""The barrier's verbs: bind requests held, released, parked, refused and failed.

Each bind request that reaches the barrier (:func:`decide_bind`) is bound, refused, or held
open (:mod:`extender.core.decide.held`) until its gang's minimum has arrived or its deadline
passes; a member whose request cannot be held is *parked* and bound by the adapter when its
gang completes. The :class:`BindDesk` keeps the held requests; the session brings the ledger
up to date first and journals what the desk decided. Pure: time is ``now``, effects are
values.
"""

from __future__ import annotations

from collections.abc import Callable

from extender.core.decide.barrier import BindDecision, BindOutcome, decide_bind, withdraw
from extender.core.decide.effects import (
    BindParked,
    BindStep,
    Effect,
    FailHeld,
    Release,
    Step,
    Withdrawn,
)
from extender.core.decide.held import HeldBinds, Hold
from extender.core.decide.narration import Narrator
from extender.core.decide.settings import CoreSettings
from extender.core.gang.ledger import Ledger
from extender.core.model.notices import EventType, PodRef
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import GangKey, NodeName


class BindDesk:
    """The bind requests held at the barrier, and the verbs that answer them."""

    def __init__(self, settings: CoreSettings, ledger: Ledger, narrator: Narrator) -> None:
        self.settings = settings
        self.ledger = ledger
        self.narrator = narrator
        self.held = HeldBinds()

    def bind(self, ref: PodRef, node: NodeName, snapshot: ClusterSnapshot, now: float,
             out: list[Effect]) -> BindStep:
        """A bind request reaches the barrier: BIND it, REFUSE it, or HOLD it."""
        held = self.held
        earlier = held.by_pod.get(ref.uid)
        if earlier is not None:
            if earlier.ticket in held.released:
                # The earlier request binds the pod where the ledger charged it; this one
                # must bind it neither elsewhere nor twice.
                return BindStep(Step.REFUSE, "rejected",
                                f"pod {ref.key} is being bound to "
                                f"{held.released[earlier.ticket]} by an earlier request; not "
                                "binding it again", earlier.gang)
            # kube-scheduler gave up on the earlier request and retried: this one decides.
            held.superseded.add(earlier.ticket)
            held.failed.pop(earlier.ticket, None)
            out.append(FailHeld(earlier.ticket, earlier.pod, "superseded",
                                f"a newer bind request for pod {ref.key} replaced this one"))
        decision = decide_bind(ref.uid, node, snapshot=snapshot, ledger=self.ledger, now=now,
                               settings=self.settings)
        gang = decision.gang
        if gang is not None:
            self.narrator.remember_reason(gang, decision.reason)
        if decision.outcome is BindOutcome.REJECT:
            self.fail_held(decision, snapshot, out)
            return BindStep(Step.REFUSE, "rejected", decision.reason, gang)
        if decision.outcome is BindOutcome.BIND:
            releasing: set[str] = {ref.uid}
            for uid, member_node in decision.release:
                if uid == ref.uid:
                    continue
                hold = held.by_pod.get(uid)
                if hold is not None:
                    held.released[hold.ticket] = member_node
                    out.append(Release(hold.ticket, hold.pod, member_node))
                    releasing.add(uid)
                    continue
                parked = snapshot.pods.get(uid)
                if parked is not None and parked.node_name is None:
                    out.append(BindParked(PodRef(parked.namespace, parked.name, uid),
                                          member_node))
                    releasing.add(uid)
            if gang is not None:
                held.releasing.setdefault(gang, set()).update(releasing)
                out += self.narrator.tell_workload(
                    gang, EventType.NORMAL, "GangAdmitted",
                    f"gang {gang}: minimum reached; binding all members", snapshot=snapshot)
            return BindStep(Step.BIND, "bound", decision.reason, gang)
        # WAIT. Each held request takes one of the adapter's threads (and kube-scheduler's
        # HTTP request); with as many held as it allows, the member is *parked* instead: its
        # request fails now (kube-scheduler retries it after a backoff), but it stays counted
        # at the barrier with its node in flight, and when its gang completes the adapter
        # binds it itself (BindParked). No thread waits, so gangs of any size can gather.
        limit = self.settings.max_held
        if gang is not None and limit is not None and len(held.by_pod) >= limit:
            return BindStep(Step.REFUSE, "parked",
                            f"{decision.reason}; not held (every server thread that may hold "
                            "a bind is in use): Muster binds this pod when its gang completes",
                            gang)
        # The barrier's clock restarts with every new member (see Ledger.arrive), but one
        # request is held about bind_timeout (kube-scheduler's httpTimeout is at least 1.5
        # times it): a little longer if the barrier ends soon after, else it is parked.
        timeout = self.settings.bind_timeout
        hold = held.open(ref, gang, node, deadline=now + timeout,
                         limit=now + timeout * self.settings.hold_grace)
        return BindStep(Step.HOLD, "held", decision.reason, gang, hold.ticket, hold.deadline)

    def poll(self, hold: Hold, snapshot: ClusterSnapshot, now: float,
             out: list[Effect]) -> BindStep:
        """What became of a held request: BIND (released), REFUSE, or HOLD again."""
        held, ref, gang = self.held, hold.pod, hold.gang
        released_to = held.released.get(hold.ticket)
        if released_to is not None:
            return self._released(hold, released_to, snapshot)
        if hold.ticket in held.superseded:
            return BindStep(Step.REFUSE, "superseded",
                            f"a newer bind request for pod {ref.key} replaced this one", gang)
        failed = held.failed.get(hold.ticket)
        if failed is not None:
            return BindStep(Step.REFUSE, failed[0], failed[1], gang)
        if gang is None:
            return BindStep(Step.HOLD, "held", "", gang, hold.ticket, hold.limit)
        return self._waiting(hold, gang, snapshot, now, out)

    def _waiting(self, hold: Hold, gang: GangKey, snapshot: ClusterSnapshot, now: float,
                 out: list[Effect]) -> BindStep:
        """A request held for its gang, neither released nor failed: held on while its
        barrier runs, parked past what one request may be held, failed with its gang's
        barrier at the deadline."""
        timeout = self.settings.bind_timeout
        if now >= hold.deadline:
            started = self.ledger.barrier_started(gang)
            if started is not None and started + timeout > now:
                if started + timeout > hold.limit:
                    # The gang is still gathering: stop holding, keep counting.
                    return BindStep(Step.REFUSE, "parked",
                                    f"gang {gang}: held {timeout:g}s while the gang gathers; "
                                    "not held longer: Muster binds this pod when its gang "
                                    "completes", gang)
                hold.deadline = started + timeout
        if now >= hold.deadline:
            timed_out = withdraw(gang, ledger=self.ledger, also=(hold.pod.uid, hold.node))
            self.fail_held(timed_out, snapshot, out)
            return BindStep(Step.REFUSE, "timed_out", timed_out.reason, gang)
        return BindStep(Step.HOLD, "held", "", gang, hold.ticket, hold.deadline)

    def _released(self, hold: Hold, released_to: NodeName,
                  snapshot: ClusterSnapshot) -> BindStep:
        """A member its gang released binds to the node it was released to (the one the
        ledger charged), only while that node still exists, and never elsewhere."""
        ref, node = hold.pod, hold.node
        if released_to != node:
            # Cannot happen while one request per pod is held (the ledger charged the node this
            # request named); if it did, binding here would use room nobody checked.
            self.bind_failed(ref.uid, current=lambda: snapshot)
            return BindStep(Step.REFUSE, "rejected",
                            f"pod {ref.key} was released to bind to {released_to}, not {node}; "
                            "not binding it elsewhere", hold.gang)
        if node not in snapshot.nodes:
            self.bind_failed(ref.uid, current=lambda: snapshot)
            return BindStep(Step.REFUSE, "node_gone",
                            f"node {node} was deleted before pod {ref.key} could bind there",
                            hold.gang)
        return BindStep(Step.BIND, "released", "", hold.gang)

    def bound(self, uid: str, node: NodeName, *,
              current: Callable[[], ClusterSnapshot]) -> None:
        """The adapter posted the pod's Binding. ``current`` gives the snapshot with it, and
        is called only when this Binding ends its gang's release (the plan is settled then):
        bringing the snapshot up to date after every Binding of a burst would make one
        snapshot per Binding where the next request makes one for them all."""
        self.ledger.confirm_bound(uid, node)
        self._done_releasing(uid, current)

    def bind_failed(self, uid: str, *, current: Callable[[], ClusterSnapshot]) -> None:
        """The adapter's Binding failed: the pod holds nothing (``current``: as for
        :meth:`bound`)."""
        self.ledger.forget_pod(uid)
        self._done_releasing(uid, current)

    def _done_releasing(self, uid: str, current: Callable[[], ClusterSnapshot]) -> None:
        # The gang's last Binding ends its plan now, not at the next request, which may come
        # only after these pods are gone.
        if self.held.done_releasing(uid) is not None:
            self.ledger.settle(current(), gpu=self.settings.gpu_resource)

    def fail_held(self, failed: BindDecision, snapshot: ClusterSnapshot, out: list[Effect], *,
                  outcome: str = "timed_out", event: str = "GangBindTimeout") -> None:
        """Fail every held request of the members the core failed (``failed.rejected``, its
        gang's barrier withdrawn or a bind refused), so kube-scheduler requeues them all."""
        rejected, reason, gang = failed.rejected, failed.reason, failed.gang
        if not rejected:
            return
        for uid, _node in rejected:
            hold = self.held.by_pod.get(uid)
            if hold is not None:
                self.fail_ticket(hold, outcome, reason, out)
        if gang is not None:
            out.append(Withdrawn(gang, len(rejected), outcome, reason))
            self.narrator.remember_reason(gang, reason)
            for pod in snapshot.pods_of_gang(gang):
                if pod.node_name is None:
                    self.narrator.event(pod, EventType.WARNING, event, reason, out)
            out += self.narrator.tell_workload(gang, EventType.WARNING, event, reason,
                                               snapshot=snapshot)

    def fail_ticket(self, hold: Hold, outcome: str, reason: str, out: list[Effect]) -> None:
        self.held.failed[hold.ticket] = (outcome, reason)
        out.append(FailHeld(hold.ticket, hold.pod, outcome, reason))


    def open_requests(self) -> dict[str, GangKey | None]:
        """Pod UID -> gang of every bind request held open."""
        return self.held.gangs_of_open()
