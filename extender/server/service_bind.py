"""The gang service's bind verb: the gang barrier, held binds, and binds Muster posts itself.

A bind request is checked against the cached pod (known, same UID, not bound yet); a pod that
takes no devices is bound at once, as kube-scheduler's DefaultBinder would. Any other goes
through the session's barrier: while the session says HOLD, the request thread waits on the
service's condition variable, in real time, until it is woken (``Release``/``FailHeld``), its
deadline passes or leadership changes; then it polls. The Binding is posted outside the lock,
only while this replica leads, and its result told back to the session. Parked members of a
gang just admitted are bound on the service's small pool. It must not decide whether a pod
binds (the session does) nor post a Binding while holding the lock.
"""

from __future__ import annotations

import logging

from extender.core.decide.effects import BindParked, BindStep, Step
from extender.core.devices.reservation import pod_claim_names
from extender.core.model.values import NodeName
from extender.server.service_parts import ServiceParts
from extender.server.wire import BindingArgs, ExtenderBindingResultJSON, binding_result
from extender.state.ports import BindError, PodRef

log = logging.getLogger("muster.service")


class BindVerbs(ServiceParts):
    """``bind`` of :class:`~extender.server.service.GangService`, and its parked binds."""

    def bind(self, args: BindingArgs) -> ExtenderBindingResultJSON:
        ref = PodRef(args.pod_namespace, args.pod_name, args.pod_uid)
        if not self._state.readiness().ready:
            self._count("bind", "not_ready")
            return binding_result(f"muster: cluster state not trusted; not binding {ref.key}")
        raw = self._state.pod(ref.namespace, ref.name)
        if raw is None:
            self._count("bind", "unknown_pod")
            return binding_result(f"pod {ref.key} not found in Muster's cache")
        meta, spec = raw.get("metadata") or {}, raw.get("spec") or {}
        if meta.get("uid") and meta.get("uid") != ref.uid:
            self._count("bind", "stale_uid")
            return binding_result(f"pod {ref.key} has UID {meta.get('uid')}, bind asked for "
                                  f"{ref.uid}: the pod was recreated; not binding")
        if spec.get("nodeName"):
            if spec["nodeName"] == args.node:
                self._count("bind", "already_bound")
                return binding_result()  # a retry of a bind that already happened
            self._count("bind", "bound_elsewhere")
            return binding_result(f"pod {ref.key} is already bound to {spec['nodeName']}")
        known = self._state.snapshot().pods.get(ref.uid)
        if known is not None and not self._takes_devices(known):
            return self._bind_at_once(ref, args.node)
        step, parked = self._pass_barrier(ref, NodeName(args.node))
        for member in parked:  # parked members of the gang this bind completed
            self._binds.submit(self._bind_parked, member.pod, member.node)
        if step.step is Step.REFUSE:
            self._count("bind", step.outcome)
            log.info("verb=bind pod=%s node=%s outcome=%s reason=%r", ref.key, args.node,
                     step.outcome, step.reason)
            return binding_result(step.reason)
        if not self._may_act():
            with self._cond:
                self.session.bind_failed(ref.uid, current=self._state.snapshot)
            self._count("bind", "not_leader")
            return binding_result(f"muster: no longer the leader; not binding {ref.key}")
        try:
            self._binder.bind(ref, args.node)
        except BindError as err:
            with self._cond:
                self.session.bind_failed(ref.uid, current=self._state.snapshot)
            self._count("bind", "error")
            log.warning("verb=bind pod=%s node=%s outcome=error reason=%r", ref.key, args.node,
                        str(err))
            return binding_result(f"binding {ref.key} to {args.node} failed: {err}")
        self._state.assume_bound(ref.namespace, ref.name, args.node)
        with self._cond:
            self.session.bound(ref.uid, NodeName(args.node), current=self._state.snapshot)
        self._count("bind", step.outcome)
        log.info("verb=bind pod=%s node=%s outcome=%s", ref.key, args.node, step.outcome)
        return binding_result()

    def _pass_barrier(self, ref: PodRef, node: NodeName) -> tuple[BindStep, list[BindParked]]:
        """The session's answer for this request, after waiting (in real time, on the
        condition variable) for as long as it says HOLD; and the parked binds to post."""
        with self._cond:
            term = self._term
            step = self.session.bind(ref, node, snapshot=self._state.snapshot(),
                                     now=self._clock())
            parked = self._apply(step.effects)
            if step.step is not Step.HOLD:
                return step, parked
            ticket, deadline = step.ticket, step.deadline
            session = self.session
            try:
                while True:
                    self._cond.wait(timeout=max(deadline - self._clock(), 0.001))
                    if self._term != term:  # leadership changed while it was held
                        return BindStep(Step.REFUSE, "not_leader", reason=(
                            f"muster: leadership changed while {ref.key} was held at the "
                            "gang barrier; not binding it (the new leader decides)"),
                            gang=step.gang), []
                    step = self.session.poll(ticket, snapshot=self._state.snapshot(),
                                             now=self._clock())
                    parked += self._apply(step.effects)
                    if step.step is not Step.HOLD:
                        return step, parked
                    deadline = step.deadline
            finally:
                session.close(ticket)

    def _bind_parked(self, ref: PodRef, node: str) -> None:
        """Bind a parked member of a gang that just completed (on the bind pool), only
        while its ResourceClaims are still allocated to ``node``, and reserved for it first
        (kube-scheduler unreserved them when the member's request was refused)."""
        if not self._may_act():
            self._count("bind", "parked_not_leader")
            log.warning("verb=bind pod=%s node=%s outcome=parked-not-leader", ref.key, node)
            return
        try:
            raw = self._state.pod(ref.namespace, ref.name)
            claims = pod_claim_names(raw) if raw is not None else []
            if claims:
                self._binder.reserve_claims(ref, node, claims)
            self._binder.bind(ref, node)
        except BindError as err:
            with self._cond:
                self.session.bind_failed(ref.uid, current=self._state.snapshot)
            self._count("bind", "parked_error")
            log.warning("verb=bind pod=%s node=%s outcome=parked-error reason=%r", ref.key,
                        node, str(err))
            return
        except Exception:  # the pool thread must survive; the pod is retried by the scheduler
            log.exception("verb=bind pod=%s node=%s outcome=parked-error", ref.key, node)
            return
        self._state.assume_bound(ref.namespace, ref.name, node)
        with self._cond:
            self.session.bound(ref.uid, NodeName(node), current=self._state.snapshot)
        self._count("bind", "parked_bound")
        log.info("verb=bind pod=%s node=%s outcome=parked-bound", ref.key, node)

    def _bind_at_once(self, ref: PodRef, node: str) -> ExtenderBindingResultJSON:
        """A pod that takes no devices, bound as kube-scheduler's DefaultBinder would."""
        if not self._may_act():
            self._count("bind", "not_leader")
            return binding_result(f"muster: no longer the leader; not binding {ref.key}")
        try:
            self._binder.bind(ref, node)
        except BindError as err:
            self._count("bind", "error")
            return binding_result(f"binding {ref.key} to {node} failed: {err}")
        self._state.assume_bound(ref.namespace, ref.name, node)
        self._count("bind", "no_devices")
        return binding_result()

