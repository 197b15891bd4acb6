"""A plan ends once the cluster shows its members bound, and not before, whatever other pod
events come in between.

Settling keeps, per planned gang, what it last found, for as long as the gang's pods, its
pods in flight and the plan stay the same (the snapshot source stamps each gang whose pods
changed). A stamp that missed a change would keep a filled plan reserving its nodes a
second time, or end a plan early and let another pod take what the gang's next member needs.
"""

from __future__ import annotations

import time
from typing import Any

from flask.testing import FlaskClient

from extender.core.gang.capacity import gang_stamps
from extender.server.app import create_app
from extender.server.settings import Settings
from extender.state.store import PODS, StateStore
from tests.unit.server.builders import (
    Clock,
    filter_body,
    gpu_node,
    job_of,
    jobset,
    jobset_pod,
    plain_pod,
    plan_nodes,
    store_of,
)

NODES = ["n0", "n1", "n2", "n3"]


def _train_store() -> StateStore:
    """Four 8-GPU nodes and a JobSet of two 8-GPU workers, both pending."""
    return store_of([gpu_node(n, gpus=8) for n in NODES]
                    + [jobset("train", workers=2, gpus=8), job_of("train"),
                       jobset_pod("train", 0, gpus=8), jobset_pod("train", 1, gpus=8)])


def _filter(client: FlaskClient, pod: dict[str, Any]) -> Any:
    response = client.post("/filter", data=filter_body(pod, NODES),
                           headers={"Content-Type": "application/json"})
    assert response.status_code == 200
    return response.get_json()


def _bound(name: str, node: str) -> dict[str, Any]:
    pod = plain_pod(name, gpus=1)
    pod["spec"]["nodeName"] = node
    return pod


def test_a_plan_settles_when_its_last_member_binds_and_other_events_change_nothing() -> None:
    store = _train_store()
    client = create_app(Settings(), store, time.time).test_client()

    def post(pod: dict[str, Any]) -> Any:
        return _filter(client, pod)

    def plan() -> list[dict[str, Any]] | None:
        [gang] = [g for g in client.get("/inspect/gangs").get_json()["gangs"]
                  if g["gang"] == "ml/train"]
        found: list[dict[str, Any]] | None = gang["plan"]
        return found

    def look() -> None:  # any request settles what the cluster caught up with
        post(plain_pod("probe", gpus=1))

    post(jobset_pod("train", 0, gpus=8))
    planned = plan_nodes(client.get("/inspect/gangs").get_json()["gangs"], "ml/train")
    assert len(planned) == 2
    first = gang_stamps(store.snapshot())
    assert first is not None and "ml/train" in first

    elsewhere = next(n for n in NODES if n not in planned)
    for i in range(3):  # pods of no gang come and go: the gang's stamp stays
        store.apply(PODS, "ADDED", _bound(f"other-{i}", elsewhere))
        look()
        assert plan() is not None
    stamps = gang_stamps(store.snapshot())
    assert stamps is not None and stamps["ml/train"] == first["ml/train"]

    store.apply(PODS, "MODIFIED", jobset_pod("train", 0, gpus=8, node=planned[0]))
    look()
    assert plan() is not None, "one of two members bound: the plan still holds the other's"
    stamps = gang_stamps(store.snapshot())
    assert stamps is not None and stamps["ml/train"] != first["ml/train"]

    store.apply(PODS, "ADDED", plain_pod("later", gpus=0))
    look()
    assert plan() is not None

    store.apply(PODS, "MODIFIED", jobset_pod("train", 1, gpus=8, node=planned[1]))
    look()
    assert plan() is None, "both members bound: the plan has done its job"


def test_what_settling_keeps_goes_with_the_plan() -> None:
    """Kept per plan, never past it: a server plans gang after gang for months."""
    store = _train_store()
    clock = Clock()
    app = create_app(Settings(plan_ttl=30), store, clock)
    client = app.test_client()
    ledger = app.extensions["muster.decider"].session.ledger

    def post(pod: dict[str, Any]) -> None:
        _filter(client, pod)

    post(jobset_pod("train", 0, gpus=8))
    store.apply(PODS, "ADDED", plain_pod("later", gpus=0))
    post(plain_pod("probe", gpus=1))  # a new revision: settling looks at the plan
    settled = [gang for gang, record in ledger.records() if record.settled is not None]
    assert ledger.plan_for("ml/train") is not None and settled == ["ml/train"]
    clock.now += 31  # the plan expires: no member came within its TTL
    post(plain_pod("probe", gpus=1))
    assert ledger.plan_for("ml/train") is None
    assert all(record.settled is None for _, record in ledger.records())
