"""A service that cannot take its decision lock in time says so: /healthz fails (a liveness
probe restarts it), and introspection answers "busy" instead of hanging with it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import orjson
import pytest
from flask.testing import FlaskClient

from extender.server.app import create_app
from extender.server.service import GangService
from extender.server.settings import Settings
from tests.unit.server.builders import gpu_node, job_of, jobset, jobset_pod, store_of


@pytest.fixture
def service_and_client() -> tuple[GangService, FlaskClient]:
    store = store_of([gpu_node("n0"), jobset("train", workers=1, gpus=8), job_of("train"),
                      jobset_pod("train", 0, gpus=8)])
    app = create_app(Settings(bind_timeout=0.05), store, time.time)
    service = app.extensions["muster.decider"]
    assert isinstance(service, GangService)
    return service, app.test_client()


@contextmanager
def _wedged(service: GangService) -> Iterator[None]:
    # Stands in for work under the lock that never ends (what a per-GPU loop over a
    # billion-GPU pod used to be): the lock is taken and not given back while we probe.
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with service._cond:
            taken.set()
            done.wait(30)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    taken.wait(5)
    try:
        yield
    finally:
        done.set()
        holder.join(5)


def test_healthz_answers_ok_while_the_service_decides(
        service_and_client: tuple[GangService, FlaskClient]) -> None:
    _, client = service_and_client
    response = client.get("/healthz")
    assert (response.status_code, response.json) == (200, {"status": "ok"})


def test_healthz_fails_fast_when_the_decision_lock_is_held_too_long(
        service_and_client: tuple[GangService, FlaskClient]) -> None:
    service, client = service_and_client
    with _wedged(service):
        started = time.monotonic()
        response = client.get("/healthz")
        assert time.monotonic() - started < 1.0  # inside a probe's default 1 s timeout
        assert response.status_code == 503
        assert orjson.loads(response.data)["reason"] == (
            "the service lock was not free within 0.5s")
    assert client.get("/healthz").status_code == 200  # and recovers with the lock


def test_introspection_says_busy_instead_of_hanging_with_a_wedged_service(
        service_and_client: tuple[GangService, FlaskClient]) -> None:
    service, client = service_and_client
    with _wedged(service):
        response = client.get("/inspect/gangs")
        assert response.status_code == 503
        assert "busy" in orjson.loads(response.data)["error"]
        scrape = client.get("/metrics")
        assert scrape.status_code == 200
        assert b'muster_gangs{state="waiting"} NaN' in scrape.data
    assert client.get("/inspect/gangs").status_code == 200
