"""``muster_oldest_waiting_gang_seconds`` and ``muster_waiting_gang_gpus``, read from a real
scrape: a gang that never fits ages with the clock, and the GPUs it asks for are counted; a
gang that fits leaves both at 0."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
from flask.testing import FlaskClient

from extender.core.model.snapshot import ClusterSnapshot
from extender.server.app import create_app
from extender.server.metrics import waiting_gangs
from extender.server.settings import Settings
from extender.state.memory import MemoryBinder
from extender.state.store import StateStore
from tests.unit.server.builders import (
    Clock,
    filter_body,
    gpu_node,
    job_of,
    jobset,
    jobset_pod,
    store_of,
)

NODES = ["n0", "n1"]
CREATED = 1000.0


def stamped(obj: dict[str, Any], at: float) -> dict[str, Any]:
    iso = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    obj["metadata"]["creationTimestamp"] = iso
    return obj


class Cluster:
    """Two 8-GPU nodes and a two-pod JobSet asking ``gpus`` a pod, created at ``CREATED``."""

    def __init__(self, *, gpus: int, pods_created: float | None = None) -> None:
        self.gpus = gpus
        pods = [jobset_pod("train", i, gpus=gpus) for i in range(2)]
        if pods_created is not None:
            pods = [stamped(p, pods_created) for p in pods]
        self.store: StateStore = store_of([
            *(gpu_node(n) for n in NODES), stamped(jobset("train", workers=2, gpus=gpus),
                                                   CREATED),
            job_of("train"), *pods])
        self.clock = Clock()
        self.clock.now = CREATED
        app = create_app(Settings(bind_timeout=5.0), self.store, self.clock,
                         binder=MemoryBinder(self.store))
        self.client: FlaskClient = app.test_client()

    def filter_both(self) -> None:
        for i in (0, 1):
            self.client.post("/filter", data=filter_body(jobset_pod("train", i, gpus=self.gpus),
                                                         NODES))

    def gauge(self, name: str) -> float:
        for line in self.client.get("/metrics").data.decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split(" ")[1])
        raise AssertionError(f"{name} is not exported")


def test_a_gang_that_never_fits_ages_with_the_clock_from_its_workloads_creation() -> None:
    cluster = Cluster(gpus=16)  # a pod asks more than any node has
    cluster.filter_both()
    cluster.clock.now = CREATED + 7200
    cluster.filter_both()
    assert cluster.gauge("muster_oldest_waiting_gang_seconds") == 7200
    assert cluster.gauge("muster_waiting_gang_gpus") == 32
    cluster.clock.now += 600
    assert cluster.gauge("muster_oldest_waiting_gang_seconds") == 7800


def test_a_gang_waits_from_its_pods_creation_when_they_came_later() -> None:
    cluster = Cluster(gpus=16, pods_created=CREATED + 3000)  # pods recreated after a restart
    cluster.filter_both()
    cluster.clock.now = CREATED + 3600
    assert cluster.gauge("muster_oldest_waiting_gang_seconds") == 600


def test_a_gang_that_fits_leaves_no_waiting_age_and_no_waiting_gpus() -> None:
    cluster = Cluster(gpus=8)
    cluster.filter_both()
    [gang] = orjson.loads(cluster.client.get("/inspect/gangs").data)["gangs"]
    assert gang["state"] == "planned"
    cluster.clock.now = CREATED + 7200
    assert cluster.gauge("muster_oldest_waiting_gang_seconds") == 0
    assert cluster.gauge("muster_waiting_gang_gpus") == 0


def test_gangs_not_waiting_or_gone_from_the_snapshot_are_left_out() -> None:
    cluster = Cluster(gpus=16)
    snapshot: ClusterSnapshot = cluster.store.snapshot()
    [key] = snapshot.gangs
    views = [{"gang": key, "state": "planned"}, {"gang": "ml/gone", "state": "waiting"},
             {"gang": key, "state": "waiting"}]
    assert waiting_gangs(views, snapshot) == [(CREATED, 32.0)]
