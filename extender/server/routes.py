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
from werkzeug.exceptions import RequestEntityTooLarge

from extender.server.decider import Decider
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
    try:
        body = request.get_data(cache=False)
        result = handle(body)
    except RequestEntityTooLarge:
        limit = current_app.config["MAX_CONTENT_LENGTH"]
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


@bp.get("/healthz")
def healthz() -> Response:
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
    gangs: list[dict[str, Any]] = _decider().inspect_gangs()
    return _json({"gangs": gangs})
