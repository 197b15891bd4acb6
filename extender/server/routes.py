"""Thin routes: read the body (bounded), parse, ask the decider, serialise, always HTTP 200.

kube-scheduler treats anything but 200 as a failed call, and a 5xx from a bug would fail every
pod in the cycle with an unhelpful message; so every verb answers 200 with a well-formed result
and puts problems in ``Error`` (or, for prioritize and preempt, which have no error field, an
empty answer: scores are then ignored and no preemption happens).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from flask import Blueprint, Response, current_app, request

from extender.server.decider import Busy, Decider
from extender.server.metrics import Metrics
from extender.server.wire import (
    WireError,
    binding_result,
    encode,
    filter_result,
    parse_binding_args,
    parse_extender_args,
    parse_preemption_args,
)

log = logging.getLogger("muster.server")
bp = Blueprint("extender", __name__)

JSON = "application/json"
_CHUNK = 64 * 1024
_DRAIN_BYTES = 256 * 1024 * 1024
"""A refused body is read on and discarded up to this many bytes (or 8 times the limit), so
the connection stays usable (gunicorn drains only 64 KiB itself and otherwise closes a
connection it has just answered with keep-alive, and Go does not retry a POST on it)."""


class _TooLarge(Exception):
    pass


def _read_body(limit: int) -> bytes:
    """The request body, read in chunks of bounded size whatever its framing (Content-Length
    or chunked); raises :class:`_TooLarge` past ``limit`` bytes, after draining the rest."""
    declared = request.content_length
    stream = request.stream
    if declared is not None and declared > limit:
        _drain(stream, max(_DRAIN_BYTES, 8 * limit))
        raise _TooLarge
    parts: list[bytes] = []
    size = 0
    while True:
        data = stream.read(_CHUNK)
        if not data:
            return b"".join(parts)
        size += len(data)
        if size > limit:
            _drain(stream, max(_DRAIN_BYTES, 8 * limit) - size)
            raise _TooLarge
        parts.append(data)


def _drain(stream: Any, budget: int) -> None:
    while budget > 0:
        data = stream.read(min(_CHUNK, budget))
        if not data:
            return
        budget -= len(data)


def _json(value: object, status: int = 200) -> Response:
    return Response(encode(value), status=status, mimetype=JSON)


def _decider() -> Decider:
    decider: Decider = current_app.extensions["muster.decider"]
    return decider


def _metrics() -> Metrics:
    metrics: Metrics = current_app.extensions["muster.metrics"]
    return metrics


def _answer(verb: str, handle: Callable[[bytes], object],
            on_error: Callable[[str], object]) -> Response:
    """Run one verb; turn every failure into a 200 result that names the problem."""
    started = time.perf_counter()
    metrics = _metrics()
    limit: int = current_app.extensions["muster.settings"].max_request_bytes
    try:
        result = handle(_read_body(limit))
    except _TooLarge:
        metrics.bad_requests.labels(verb=verb).inc()
        log.warning("verb=%s error=body-too-large limit=%s", verb, limit)
        result = on_error(f"request body larger than the {limit}-byte limit "
                          "(raise --max-request-bytes or use nodeCacheCapable: true)")
    except WireError as err:
        metrics.bad_requests.labels(verb=verb).inc()
        log.warning("verb=%s error=bad-request reason=%r", verb, str(err))
        result = on_error(f"bad {verb} request: {err}")
    except Exception as err:  # a bug must not become a 5xx for kube-scheduler
        log.exception("verb=%s error=internal", verb)
        metrics.count(verb, "internal_error")
        result = on_error(f"muster internal error in {verb}: {type(err).__name__}: {err}")
    metrics.latency.labels(verb=verb).observe(time.perf_counter() - started)
    return _json(result)


@bp.post("/filter")
def filter_() -> Response:
    return _answer("filter", lambda b: _decider().filter(parse_extender_args(b)),
                   lambda e: filter_result(None, error=e))


@bp.post("/prioritize")
def prioritize() -> Response:
    return _answer("prioritize", lambda b: _decider().prioritize(parse_extender_args(b)),
                   lambda e: [])


@bp.post("/bind")
def bind() -> Response:
    return _answer("bind", lambda b: _decider().bind(parse_binding_args(b)),
                   binding_result)


@bp.post("/preempt")
def preempt() -> Response:
    return _answer("preempt", lambda b: _decider().preempt(parse_preemption_args(b)),
                   lambda e: {"NodeNameToMetaVictims": {}})


_LIVENESS_WAIT = 0.5
"""Seconds /healthz waits for the decision lock; inside a probe's default 1 s timeout."""


@bp.get("/healthz")
def healthz() -> Response:
    alive, reason = _decider().liveness(_LIVENESS_WAIT)
    if not alive:
        log.error("probe=healthz alive=false reason=%r", reason)
        return _json({"status": "wedged", "reason": reason}, 503)
    return _json({"status": "ok"})


@bp.get("/readyz")
def readyz() -> Response:
    ready, reason = _decider().readiness()
    return _json({"ready": ready, "reason": reason}, 200 if ready else 503)


@bp.get("/metrics")
def metrics() -> Response:
    return Response(_metrics().render(), mimetype="text/plain; version=0.0.4")


@bp.get("/inspect/gangs")
def inspect_gangs() -> Response:
    try:
        gangs: list[dict[str, Any]] = _decider().inspect_gangs()
    except Busy as err:
        return _json({"gangs": None, "error": f"muster is busy: {err}"}, 503)
    return _json({"gangs": gangs})
