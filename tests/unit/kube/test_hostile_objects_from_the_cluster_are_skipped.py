"""Hostile objects arriving from the cluster (issue 16): each is skipped with one log line naming
it, the watch goes on, and every other object is still scheduled."""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import orjson
import pytest

from extender.files.catalog import packaged_catalog, yaml_documents
from extender.kube.client import connect
from extender.kube.informer import Informer
from extender.kube.live import POD_TYPE
from extender.state.build import CatalogSnapshots
from extender.state.store import PODS, StateStore
from tests.unit.cli.helpers import DATA
from tests.unit.kube.fakeapi import fake_api

LWS = "leaderworkerset.x-k8s.io/v1/LeaderWorkerSet"


def _pod(name: str, **meta: object) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", **meta},
            "spec": {"containers": [{"name": "c"}]}}


def _lws(name: str, replicas: int) -> dict[str, Any]:
    file = DATA / "hostile" / "lws-million-replicas.yaml"
    [(_, obj), *_] = list(yaml_documents(file.read_text(), str(file)))
    obj = copy.deepcopy(obj)
    obj["metadata"].update(name=name, namespace="ml")
    obj["spec"]["replicas"] = replicas
    return obj


def test_hostile_objects_are_left_out_once_each_with_a_log_line(caplog):
    store = StateStore(CatalogSnapshots(packaged_catalog()))
    store.apply(PODS, "ADDED", _pod("fine"))
    store.apply(PODS, "ADDED", _pod("odd", annotations={"note": ["a", "b"]}))
    store.apply(PODS, "ADDED", _pod("half") | {"spec": {"containers": [
        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "0.5"}}}]}})
    store.apply(LWS, "ADDED", _lws("small", 1))
    store.apply(LWS, "ADDED", _lws("huge", 1_000_000))
    store.apply(LWS, "ADDED", _lws("beyond", 2**31))
    with caplog.at_level(logging.WARNING, logger="muster.state"):
        snapshot = store.snapshot()
    assert [p.name for p in snapshot.pods.values()] == ["fine"]
    assert sorted(w.ref.name for w in snapshot.workloads.values()) == ["fine", "small"]
    skipped = [r.getMessage() for r in caplog.records]
    assert len(skipped) == 4 and all("event=object-skipped" in m for m in skipped)
    text = "\n".join(skipped)
    assert "pod ml/odd: metadata.annotations: note: expected a string value" in text
    assert "pod ml/half: spec.containers[0].resources.limits[nvidia.com/gpu]" in text
    assert "LeaderWorkerSet/huge: 5000000 pods is more than the limit" in text
    assert "LeaderWorkerSet/beyond: role 'leader' (spec.roles[0]): $.spec.replicas: " \
           "2147483648 is beyond int32" in text
    caplog.clear()
    store.apply(PODS, "ADDED", _pod("second"))
    with caplog.at_level(logging.WARNING, logger="muster.state"):
        store.snapshot()
    assert caplog.records == []  # unchanged hostile objects are not reported again


def test_an_unreadable_watch_event_is_skipped_and_the_watch_goes_on(caplog, tmp_path: Path):
    deep = b'{"a":' * 2000 + b"1" + b"}" * 2000
    with fake_api() as api:
        store = StateStore(CatalogSnapshots(packaged_catalog()))
        informer = Informer(connect(str(api.kubeconfig(tmp_path)), timeout=2.0), POD_TYPE, store)
        with caplog.at_level(logging.WARNING, logger="muster.informer"):
            line = b'{"type":"ADDED","object":{"metadata":{"name":"p"},"spec":' + deep + b"}}"
            assert informer._event(line, "41") == "41"
            assert informer._event(b"[1, 2]", "41") == "41"
            good = {"type": "ADDED", "object": _pod("ok", resourceVersion="42")}
            assert informer._event(orjson.dumps(good), "41") == "42"
    assert [p["metadata"]["name"] for p in store.raw().pods] == ["ok"]
    # Only the skipped-event lines: this informer's watch never runs (its events are fed
    # in), while an informer of an earlier test may still be winding down (its watch ends
    # when its server is gone) and log `event=watch-broken` for the same source meanwhile.
    messages = [r.getMessage() for r in caplog.records
                if r.name == "muster.informer" and "source=v1/Pod event=skipped" in r.getMessage()]
    assert len(messages) == 2
    assert "unreadable watch event" in messages[0]
    assert "not an object" in messages[1]


@pytest.mark.parametrize("meta", ["a string", ["a", "list"]])
def test_a_watch_event_with_odd_metadata_does_not_break_the_watch(tmp_path: Path, meta: object):
    with fake_api() as api:
        store = StateStore(CatalogSnapshots(packaged_catalog()))
        informer = Informer(connect(str(api.kubeconfig(tmp_path)), timeout=2.0), POD_TYPE, store)
        event = {"type": "ADDED", "object": {"kind": "Pod", "metadata": meta}}
        assert informer._event(orjson.dumps(event), "7") == "7"
