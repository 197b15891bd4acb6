"""The gang service's filter, prioritize and preempt verbs: a request's pod, decided, answered.

Each verb checks that the cluster state is trusted, reads the request's pod (reusing the parsed
one when the informer holds the same version), answers a pod that takes no devices as
kube-scheduler alone would, and otherwise asks the session under the service's lock, applies
its effects there and translates the decision into the wire answer. It must not decide
anything itself (the session does), block under the lock, or post a Binding.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, cast

from extender.core.model.objects import pod_from_api
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import NodeName, PodInfo
from extender.server.service_parts import ServiceParts
from extender.server.wire import (
    ExtenderArgs,
    ExtenderFilterResultJSON,
    ExtenderPreemptionResultJSON,
    HostPriorityJSON,
    PreemptionArgs,
    filter_result,
    preemption_result,
    priority_list,
)
from extender.state.ports import PodRef

log = logging.getLogger("muster.service")


class FilterVerbs(ServiceParts):
    """``filter``, ``prioritize``, ``preempt`` of :class:`~extender.server.service.GangService`."""

    def _request_pod(self, raw: Mapping[str, Any]) -> tuple[PodInfo | None, str]:
        """The pod of a request, made visible to the core; or why it cannot be read."""
        raw = _with_identity(raw)
        meta = raw.get("metadata") or {}
        stored = self._state.pod(str(meta.get("namespace")), str(meta.get("name")))
        if stored is not None and _same_version(stored, raw):
            # The informer already holds this very version: reuse the parsed pod (kube-
            # scheduler sends every pending pod again on each retry).
            known = self._state.snapshot().pods.get(str(meta.get("uid")))
            if known is not None:
                return known, ""
        try:
            pod = pod_from_api(self._state.lowered_pod(raw))
        except ValueError as err:
            return None, f"cannot read pod {_pod_key(raw)}: {err}"
        self._state.upsert_pod(raw)
        return pod, ""

    def filter(self, args: ExtenderArgs) -> ExtenderFilterResultJSON:
        ready = self._state.readiness()
        if not ready.ready:
            self._count("filter", "not_ready")
            self._turn_away(args.pod)
            return filter_result(args, error=f"muster: cluster state not trusted ({ready.reason});"
                                             " refusing to place pods until it is resynced")
        pod, problem = self._request_pod(args.pod)
        if pod is None:
            self._count("filter", "bad_pod")
            return filter_result(args, error=problem)
        if not self._takes_devices(pod):
            self._count("filter", "no_devices")
            return filter_result(args, args.node_names)
        with self._cond:
            snapshot = self._state.snapshot()
            # Names Muster has not seen yet pass through the core harmlessly (it never passes
            # a node it does not know); they are named only when an answer gives reasons.
            candidates = cast(tuple[NodeName, ...], args.node_names)
            step = self.session.filter(pod, candidates, snapshot=snapshot, now=self._clock())
            self._apply(step.effects)
        decision = step.decision
        self._count("filter", str(decision.outcome))
        log.debug("verb=filter pod=%s gang=%s outcome=%s passed=%d reason=%r", pod.key,
                  decision.gang, decision.outcome, len(decision.passed), decision.reason)
        passed = decision.passed
        known = _node_names(snapshot)
        if not known.issuperset(passed):  # cheap: few names, except for pods without a gang
            # A node Muster has not seen fails: it cannot vouch for its GPUs.
            passed = tuple(n for n in passed if n in known)
        if passed:
            # kube-scheduler will place the pod on one of the passed nodes; per-node reasons
            # for the others only feed a FitError message that cannot happen now. A pinned
            # member of a big gang would otherwise ship one reason per node (hundreds of KB
            # at 5,000 nodes) for kube-scheduler to decode on every cycle.
            return filter_result(args, passed)
        # NodeName is str at run time; the casts only tell mypy what Mapping's invariance hides.
        failed = cast(Mapping[str, str], decision.failed)
        unresolvable = cast(Mapping[str, str], decision.unresolvable)
        unknown = _unknown(args.node_names, snapshot)
        if unknown:
            failed = {**failed, **unknown}
            unresolvable = {n: r for n, r in unresolvable.items() if n not in unknown}
        return filter_result(args, passed, failed=failed, unresolvable=unresolvable)

    def prioritize(self, args: ExtenderArgs) -> list[HostPriorityJSON]:
        if not self._state.readiness().ready:
            self._count("prioritize", "not_ready")
            return []
        pod, _ = self._request_pod(args.pod)
        if pod is None:
            self._count("prioritize", "bad_pod")
            return []
        if not self._takes_devices(pod):
            self._count("prioritize", "no_devices")
            return priority_list([(n, 0) for n in args.node_names])
        with self._cond:
            snapshot = self._state.snapshot()
            known = _node_names(snapshot)
            candidates = cast(tuple[NodeName, ...], tuple(n for n in args.node_names
                                                         if n in known))
            scores = self.session.prioritize(pod, candidates, snapshot=snapshot,
                                             now=self._clock())
        self._count("prioritize", "scored")
        return priority_list([(str(n), max(0, min(10, int(s)))) for n, s in scores])

    def preempt(self, args: PreemptionArgs) -> ExtenderPreemptionResultJSON:
        if not self._state.readiness().ready:
            self._count("preempt", "not_ready")
            return preemption_result({})
        pod, _ = self._request_pod(args.pod)
        if pod is None:
            self._count("preempt", "bad_pod")
            return preemption_result({})
        if not self._takes_devices(pod):  # kube-scheduler's own choice, as if never asked
            self._count("preempt", "no_devices")
            return preemption_result(args.victims, args.pdb_violations)
        with self._cond:
            victims = {NodeName(n): v for n, v in args.victims.items()}
            step = self.session.preempt(
                pod, victims, snapshot=self._state.snapshot(), now=self._clock(),
                pdb_violations={NodeName(n): c for n, c in args.pdb_violations.items()})
            self._apply(step.effects)
        chosen = step.victims
        self._count("preempt", "victims" if chosen else "none")
        return preemption_result({str(n): list(v) for n, v in chosen.items()},
                                 args.pdb_violations)

    def _turn_away(self, raw: Mapping[str, Any]) -> None:
        """Remember a pod turned away while the cluster state is not trusted (requeued once
        it is)."""
        meta = _with_identity(raw).get("metadata") or {}
        ref = PodRef(str(meta.get("namespace")), str(meta.get("name")), str(meta.get("uid")))
        with self._cond:
            self.session.turn_away(ref, untrusted=True)


_NAMES: dict[int, tuple[object, frozenset[str]]] = {}


def _node_names(snapshot: ClusterSnapshot) -> frozenset[str]:
    """The snapshot's node names as a frozenset, built once per version of its nodes: a
    snapshot advanced by pod events keeps the previous one's node map, and a copy of 10,000
    names per pod event was most of the first filter's cost after it."""
    nodes = snapshot.nodes
    hit = _NAMES.get(id(nodes))
    if hit is not None and hit[0] is nodes:
        return hit[1]
    names = frozenset(nodes)
    _NAMES.clear()  # one live node map at a time is all the cache is for
    _NAMES[id(nodes)] = (nodes, names)
    return names


def _unknown(names: tuple[str, ...], snapshot: ClusterSnapshot) -> dict[str, str]:
    """Offered names Muster has not seen, with the reason they fail."""
    nodes = _node_names(snapshot)
    if nodes.issuperset(names):  # the usual case: one C-level pass, no copy
        return {}
    return {n: "node unknown to Muster (not yet seen by its node informer)"
            for n in names if n not in nodes}


def _same_version(stored: Mapping[str, Any], sent: Mapping[str, Any]) -> bool:
    a, b = stored.get("metadata") or {}, sent.get("metadata") or {}
    if a.get("uid") != b.get("uid"):
        return False
    version = b.get("resourceVersion")
    # Without versions (snapshot files, tests) only an identical spec counts as the same pod.
    return (version == a.get("resourceVersion") if version
            else stored.get("spec") == sent.get("spec"))


def _pod_key(raw: Mapping[str, Any]) -> str:
    meta = raw.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def _with_identity(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """A request pod with namespace and uid filled in, so it can be indexed like any other."""
    meta = dict(raw.get("metadata") or {})
    if meta.get("namespace") and meta.get("uid"):
        return raw
    meta.setdefault("namespace", "default")
    meta["namespace"] = meta["namespace"] or "default"
    meta["uid"] = meta.get("uid") or f"request:{meta['namespace']}/{meta.get('name')}"
    return {**raw, "metadata": meta}
