"""The mutating admission webhook: Muster's scheduling gate on new gang pods.

The API server sends an ``AdmissionReview`` for every pod created in the namespaces the
``MutatingWebhookConfiguration`` selects; :class:`Admission` answers each with a well-formed
review that always allows the pod, with a JSON patch adding the gate when
:func:`~extender.core.workloads.admission.gate_verdict` says so, and without one otherwise (a
malformed review, a pod of another scheduler or of no gang, any fault of ours). The
configuration has ``failurePolicy: Ignore``: when Muster is down pods are created ungated,
and filter and bind hold their gangs as strictly as before. Only the adapter's parts live
here (parse, ask, render); the decision is the core's, and Muster removes the gate itself
(:mod:`extender.core.decide.gating`).
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import orjson
from flask import Blueprint, Response, current_app, request

from extender.core.workloads.admission import GateVerdict, gate_verdict
from extender.core.workloads.catalog import Catalog
from extender.core.workloads.membership import ObjectIndex
from extender.server.settings import Settings
from extender.state.store import StateStore

log = logging.getLogger("muster.admission")

admission_bp = Blueprint("admission", __name__)
PATH = "/admission/gate"
REVIEW_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
MAX_BODY = 8 * 1024 * 1024
"""A pod's review is a few KB; the API server caps objects at 3 MiB (1.5 MiB in etcd)."""


class _StoreObjects(Mapping[tuple[str, str, str], Mapping[str, Any]]):
    """The store's objects as an :class:`ObjectIndex` reads them, looked up one at a time
    (an owner walk needs two or three, not an index of every object)."""

    def __init__(self, state: StateStore) -> None:
        self._state = state

    def __getitem__(self, key: tuple[str, str, str]) -> Mapping[str, Any]:
        found = self._state.find_object(*key)
        if found is None:
            raise KeyError(key)
        return found

    def __iter__(self) -> Iterator[tuple[str, str, str]]:
        return iter(())

    def __len__(self) -> int:
        return 0


class Admission:
    def __init__(self, state: StateStore, *, catalog: Callable[[], Catalog], settings: Settings,
                 gate: str, count: Callable[[str, str], None] | None = None) -> None:
        self._state = state
        self._catalog = catalog
        self._settings = settings
        self._gate = gate
        self._count = count or (lambda _verb, _outcome: None)

    def count_with(self, count: Callable[[str, str], None]) -> None:
        """Count each review as ``muster_decisions_total{verb="admission",outcome}``
        (gated, not_gated, malformed, internal_error)."""
        self._count = count

    def review(self, body: bytes) -> dict[str, Any]:
        """The answer to one AdmissionReview body; never raises."""
        try:
            review = orjson.loads(body)
        except orjson.JSONDecodeError:
            self._count("admission", "malformed")
            log.warning("verb=admission outcome=malformed reason='body is not JSON'")
            return answer(REVIEW_VERSIONS[0], "")
        if not isinstance(review, dict) or not isinstance(review.get("request"), dict):
            self._count("admission", "malformed")
            log.warning("verb=admission outcome=malformed reason='no request object'")
            return answer(REVIEW_VERSIONS[0], "")
        version = review.get("apiVersion")
        version = version if version in REVIEW_VERSIONS else REVIEW_VERSIONS[0]
        req: dict[str, Any] = review["request"]
        raw_uid = req.get("uid")
        uid = raw_uid if isinstance(raw_uid, str) else ""
        try:
            verdict = self._verdict(req)
        except Exception:  # a bug must never fail a pod's creation
            self._count("admission", "internal_error")
            log.exception("verb=admission uid=%s outcome=internal-error", uid)
            return answer(version, uid)
        self._count("admission", "gated" if verdict.gate else "not_gated")
        log.debug("verb=admission uid=%s gate=%s reason=%r", uid, verdict.gate, verdict.reason)
        if not verdict.gate:
            return answer(version, uid)
        pod = req["object"]
        gates = (pod.get("spec") or {}).get("schedulingGates")
        op: dict[str, Any] = (
            {"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": self._gate}}
            if isinstance(gates, list) and gates else
            {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": self._gate}]})
        return answer(version, uid, patch=[op])

    def _verdict(self, req: Mapping[str, Any]) -> GateVerdict:
        raw_kind = req.get("kind")
        kind: Mapping[str, Any] = raw_kind if isinstance(raw_kind, Mapping) else {}
        if (req.get("operation") != "CREATE" or kind.get("kind") != "Pod"
                or kind.get("group") not in ("", None) or req.get("subResource")):
            return GateVerdict(False, "not the creation of a pod")
        pod = req.get("object")
        if not isinstance(pod, Mapping) or not isinstance(pod.get("spec"), Mapping):
            return GateVerdict(False, "no pod object in the request")
        raw_meta = pod.get("metadata")
        meta: Mapping[str, Any] = raw_meta if isinstance(raw_meta, Mapping) else {}
        namespace = meta.get("namespace") or req.get("namespace") or "default"
        seen = {**pod, "metadata": {**meta, "namespace": namespace}}
        snapshot = self._state.snapshot()
        return gate_verdict(seen, objects=ObjectIndex(by_key=_StoreObjects(self._state)),
                            catalog=self._catalog(), workloads=snapshot.workloads,
                            refused=snapshot.refused,
                            scheduler_names=self._settings.scheduler_names, gate=self._gate,
                            limits=self._settings.workload_limits)


def answer(version: str, uid: str, *, patch: list[dict[str, Any]] | None = None,
           ) -> dict[str, Any]:
    """An AdmissionReview response that allows the object, with ``patch`` if given."""
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(patch)).decode()
    return {"apiVersion": version, "kind": "AdmissionReview", "response": response}


@admission_bp.post(PATH)
def gate() -> Response:
    started = time.perf_counter()
    try:
        return _gate()
    finally:
        metrics = current_app.extensions.get("muster.metrics")
        if metrics is not None:  # muster_request_seconds{verb="admission"}
            metrics.latency.labels(verb="admission").observe(time.perf_counter() - started)


def _gate() -> Response:
    admission: Admission | None = current_app.extensions.get("muster.admission")
    if request.content_length is not None and request.content_length > MAX_BODY:
        result = answer(REVIEW_VERSIONS[0], "")
    else:
        body = request.get_data(cache=False)
        if len(body) > MAX_BODY:
            result = answer(REVIEW_VERSIONS[0], "")
        elif admission is None:  # the app serves no webhook: allow, change nothing
            result = answer(REVIEW_VERSIONS[0], _uid_of(body))
        else:
            result = admission.review(body)
    return Response(orjson.dumps(result), status=200, mimetype="application/json")


def _uid_of(body: bytes) -> str:
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ""
    req = review.get("request") if isinstance(review, dict) else None
    uid = req.get("uid") if isinstance(req, dict) else None
    return uid if isinstance(uid, str) else ""
