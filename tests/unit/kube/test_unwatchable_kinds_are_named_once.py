"""A kind Muster may not watch is named by readiness and logged once per change of state, not
at every retry: a descriptor's kind RBAC does not grant (403), and a cluster without the
Workload Map (Karta) CRD. Against the fake API server, with the real client."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from extender.core.workloads.catalog import Catalog
from extender.files.catalog import load_descriptors
from extender.kube.client import connect
from extender.kube.informer import Backoff, Informer
from extender.kube.live import NODE_TYPE, Watches
from extender.state.build import CatalogSnapshots
from extender.state.store import KARTAS, NODES, StateStore
from tests.unit.kube.fakeapi import FakeApiServer, fake_api
from tests.unit.kube.test_informers_follow_the_api_server import empty_snapshot, eventually

ROOT = Path(__file__).resolve().parents[3]
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/jobsets"
JOBSET_SOURCE = "jobset.x-k8s.io/v1alpha2/JobSet"
RETRY = Backoff(initial=0.05, maximum=0.1)
"""Optional kinds are retried every ``maximum`` seconds: 10 s in production, 0.1 s here."""


def _jobset_catalog() -> Catalog:
    return Catalog.of(load_descriptors([str(ROOT / "descriptors" / "jobset.yaml")]))


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with fake_api() as server:
        server.cluster.extra_groups["jobset.x-k8s.io/v1alpha2"] = [
            {"name": "jobsets", "kind": "JobSet", "namespaced": True}]
        server.cluster.put(JOBSETS, {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                     "metadata": {"name": "train", "namespace": "ml"},
                                     "spec": {}})
        yield server


def _records(caplog: pytest.LogCaptureFixture, source: str,
             level: int = logging.INFO) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno >= level and f"source={source} " in r.getMessage()]


def _watches(api: FakeApiServer, tmp_path: Path) -> tuple[Watches, StateStore]:
    snapshots = CatalogSnapshots(_jobset_catalog())
    store = StateStore(snapshots)
    conn = connect(str(api.kubeconfig(tmp_path)), timeout=2.0)
    return Watches(conn, store, snapshots, backoff=RETRY, watch_seconds=5,
                   rediscover=60).start(), store


@pytest.mark.parametrize("denied", ["list", "watch"])
def test_a_kind_rbac_does_not_grant_is_named_by_readiness_and_logged_once(
        api: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        denied: str) -> None:
    caplog.set_level(logging.DEBUG, logger="muster")
    (api.cluster.forbidden if denied == "list" else api.cluster.watch_forbidden).add(JOBSETS)
    watches, store = _watches(api, tmp_path)
    try:
        eventually(lambda: JOBSET_SOURCE in watches.informers)
        eventually(lambda: store.readiness().ready and JOBSET_SOURCE in store.readiness().reason)
        time.sleep(1.0)  # ten retries at least
        ready = store.readiness()
        assert ready.ready  # the other kinds' pods are still served
        assert ready.reason == (f"synced, but cannot watch {JOBSET_SOURCE} (forbidden: RBAC "
                                "does not grant list/watch): their workloads are not "
                                "gang-scheduled")
        assert [o["kind"] for o in store.raw().objects] == []
        warnings = _records(caplog, JOBSET_SOURCE, logging.WARNING)
        assert len(warnings) == 1 and "event=forbidden" in warnings[0]
        assert len(_records(caplog, JOBSET_SOURCE, logging.DEBUG)) >= 5  # it did retry
        # RBAC fixed: the next retry lists it, readiness is plain again, said once.
        api.cluster.forbidden.clear()
        api.cluster.watch_forbidden.clear()
        eventually(lambda: store.readiness().reason == "all sources synced")
        assert [o["kind"] for o in store.raw().objects] == ["JobSet"]
        assert len(_records(caplog, JOBSET_SOURCE, logging.WARNING)) == 1
    finally:
        watches.stop()


def test_a_cluster_without_the_karta_crd_says_so_once_and_rebuilds_nothing(
        api: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="muster")
    watches, store = _watches(api, tmp_path)
    try:
        eventually(lambda: store.readiness().reason == "all sources synced")
        revision = store.raw().descriptors_revision
        time.sleep(1.0)  # ten retries at least
        said = _records(caplog, KARTAS)
        assert len(said) == 1 and "event=not-served" in said[0]
        assert _records(caplog, KARTAS, logging.WARNING) == []
        assert len(_records(caplog, KARTAS, logging.DEBUG)) >= 5
        # Retrying an absent CRD changes no descriptor: no recompile, no rediscovery.
        assert store.raw().descriptors_revision == revision
        assert store.readiness().reason == "all sources synced"
    finally:
        watches.stop()


def test_an_api_server_that_stays_down_is_logged_when_it_breaks_and_when_it_is_back(
        api: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="muster")
    api.cluster.put("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                      "metadata": {"name": "n0"}})
    conn = connect(str(api.kubeconfig(tmp_path)), timeout=1.0)
    store = StateStore(empty_snapshot, expected=[NODES])
    informer = Informer(conn, NODE_TYPE, store, backoff=RETRY, watch_seconds=1).start()
    try:
        eventually(lambda: store.readiness().ready)
        api.stop()
        eventually(lambda: not store.readiness().ready)
        eventually(lambda: len(_records(caplog, NODES, logging.DEBUG)) >= 8)
        broken = [m for m in _records(caplog, NODES, logging.WARNING) if "watch-broken" in m]
        assert len(broken) <= 2  # the watch that dropped, then the list that is refused
        api.start()
        eventually(lambda: store.readiness().ready)
        eventually(lambda: "event=watching" in _records(caplog, NODES)[-1])
    finally:
        informer.stop()


def test_readiness_names_every_unwatchable_source_and_a_full_list_clears_it() -> None:
    store = StateStore(empty_snapshot, expected=[NODES, "a/v1/A", "b/v1/B"])
    for source in (NODES, "a/v1/A", "b/v1/B"):
        store.replace(source, [])
    store.set_unwatchable("b/v1/B", "forbidden")
    store.set_unwatchable("a/v1/A", "forbidden")
    assert store.readiness().reason == ("synced, but cannot watch a/v1/A (forbidden); "
                                        "b/v1/B (forbidden): their workloads are not "
                                        "gang-scheduled")
    store.replace("a/v1/A", [yaml.safe_load("{kind: A, metadata: {name: x}}")])
    assert "a/v1/A" not in store.readiness().reason
    store.forget("b/v1/B")
    assert store.readiness().reason == "all sources synced"
