"""Informers against a fake API server on loopback: list, watch, 410 Gone, drops, outages."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from extender.core.model.snapshot import ClusterSnapshot
from extender.kube.client import connect
from extender.kube.informer import Backoff, Informer
from extender.kube.live import NODE_TYPE, POD_TYPE
from extender.state.store import NODES, PODS, RawState, StateStore
from tests.unit.kube.fakeapi import FakeApiServer, fake_api

FAST = Backoff(initial=0.05, maximum=0.2)


def eventually(check: Callable[[], bool], *, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError(f"condition not met within {timeout}s")


def empty_snapshot(raw: RawState) -> ClusterSnapshot:
    return ClusterSnapshot.of((), (), revision=raw.revision)


def node(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}}}


def pod(name: str, uid: str = "") -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "uid": uid or f"uid-{name}"},
            "spec": {"containers": []}}


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with fake_api() as server:
        yield server


def names(store: StateStore) -> list[str]:
    return [n["metadata"]["name"] for n in store.raw().nodes]


def start(api: FakeApiServer, tmp_path: Path, store: StateStore, *, page: int = 500,
          watch_seconds: int = 5) -> Informer:
    conn = connect(str(api.kubeconfig(tmp_path)), timeout=2.0)
    store.expect(NODES)
    return Informer(conn, NODE_TYPE, store, backoff=FAST, watch_seconds=watch_seconds,
                    page_size=page).start()


def test_lists_in_pages_then_follows_watch_events(api: FakeApiServer, tmp_path: Path) -> None:
    for i in range(5):
        api.cluster.put("/api/v1/nodes", node(f"n{i}"))
    store = StateStore(empty_snapshot)
    informer = start(api, tmp_path, store, page=2)
    try:
        eventually(lambda: store.readiness().ready)
        assert names(store) == ["n0", "n1", "n2", "n3", "n4"]
        api.cluster.put("/api/v1/nodes", node("n5"))
        api.cluster.delete("/api/v1/nodes", "/n0")
        eventually(lambda: names(store) == ["n1", "n2", "n3", "n4", "n5"])
    finally:
        informer.stop()


@pytest.mark.parametrize("as_event", [False, True], ids=["http-410", "error-event-410"])
def test_410_gone_triggers_a_relist_that_repairs_missed_changes(
        api: FakeApiServer, tmp_path: Path, as_event: bool) -> None:
    api.cluster.put("/api/v1/nodes", node("a"))
    api.cluster.gone_as_event = as_event
    store = StateStore(empty_snapshot)
    informer = start(api, tmp_path, store, watch_seconds=1)
    try:
        eventually(lambda: names(store) == ["a"])
        # History is compacted while the watch is between timeouts: the next watch from
        # the old resourceVersion is refused and only a relist can see "b".
        api.cluster.compact()
        api.cluster.objects["/api/v1/nodes"]["/b"] = node("b")
        eventually(lambda: names(store) == ["a", "b"], timeout=15)
        assert informer.relists >= 2
        assert store.readiness().ready
    finally:
        informer.stop()


def test_a_dropped_watch_connection_is_resumed(api: FakeApiServer, tmp_path: Path) -> None:
    store = StateStore(empty_snapshot)
    informer = start(api, tmp_path, store)
    try:
        eventually(lambda: store.readiness().ready)
        api.cluster.drop_watches = 1
        api.cluster.wake()
        eventually(lambda: api.cluster.drop_watches == 0)
        api.cluster.put("/api/v1/nodes", node("after-drop"))
        eventually(lambda: names(store) == ["after-drop"])
        assert informer.alive
    finally:
        informer.stop()


def test_not_ready_while_the_api_server_is_gone_and_ready_again_after(
        api: FakeApiServer, tmp_path: Path) -> None:
    store = StateStore(empty_snapshot)
    conn = connect(str(api.kubeconfig(tmp_path)), timeout=1.0)
    informers = [Informer(conn, t, store, backoff=FAST, watch_seconds=5).start()
                 for t in (NODE_TYPE, POD_TYPE)]
    store.expect(NODES)
    store.expect(PODS)
    try:
        eventually(lambda: store.readiness().ready)
        api.stop()
        eventually(lambda: not store.readiness().ready)
        assert "watch broken" in store.readiness().reason
        api.cluster.put("/api/v1/pods", pod("born-during-outage"))
        api.start()  # same port, same data: the informers reconnect and relist
        eventually(lambda: store.readiness().ready, timeout=30)
        # Nothing created during the outage is lost. A watch resumed from its last
        # resourceVersion is ready once it is open and brings the pod a moment later, so the
        # pod is waited for, not read at the instant readiness returned.
        eventually(lambda: [p["metadata"]["name"] for p in store.raw().pods]
                   == ["born-during-outage"], timeout=10)
    finally:
        for informer in informers:
            informer.stop()
