"""The binder posts pods/binding with a UID precondition, idempotently; events reach pods."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from extender.kube.binder import KubeBinder
from extender.kube.client import connect
from extender.kube.events import KubeEvents
from extender.state.ports import BindError, EventType, PodEvent, PodRef, WorkloadEvent
from tests.unit.kube.fakeapi import FakeApiServer, fake_api


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with fake_api() as server:
        server.cluster.put("/api/v1/pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "w-0", "namespace": "ml", "uid": "u0"}, "spec": {}})
        yield server


def test_binding_carries_the_pod_uid_and_target_node(api: FakeApiServer, tmp_path: Path) -> None:
    binder = KubeBinder(connect(str(api.kubeconfig(tmp_path))))
    binder.bind(PodRef("ml", "w-0", "u0"), "gpu-1")
    [binding] = api.cluster.bindings
    assert binding["kind"] == "Binding"
    assert binding["metadata"] == {"name": "w-0", "namespace": "ml", "uid": "u0"}
    assert binding["target"] == {"apiVersion": "v1", "kind": "Node", "name": "gpu-1"}


def test_a_retried_bind_to_the_same_node_succeeds(api: FakeApiServer, tmp_path: Path) -> None:
    binder = KubeBinder(connect(str(api.kubeconfig(tmp_path))))
    binder.bind(PodRef("ml", "w-0", "u0"), "gpu-1")
    binder.bind(PodRef("ml", "w-0", "u0"), "gpu-1")
    assert len(api.cluster.bindings) == 1
    with pytest.raises(BindError, match="already assigned"):
        binder.bind(PodRef("ml", "w-0", "u0"), "gpu-2")


def test_a_recreated_pod_is_not_bound_by_an_old_uid(api: FakeApiServer, tmp_path: Path) -> None:
    binder = KubeBinder(connect(str(api.kubeconfig(tmp_path))))
    with pytest.raises(BindError, match="Precondition failed"):
        binder.bind(PodRef("ml", "w-0", "old-uid"), "gpu-1")
    assert api.cluster.bindings == []


def test_events_are_written_on_the_pod_in_the_background(api: FakeApiServer,
                                                          tmp_path: Path) -> None:
    events = KubeEvents(connect(str(api.kubeconfig(tmp_path))))
    events.emit(PodEvent(PodRef("ml", "w-0", "u0"), EventType.WARNING, "GangWaiting",
                         "gang ml/train: 3 of 4 pods fit"))
    events.flush()
    [event] = api.cluster.events
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "ml",
                                       "name": "w-0", "uid": "u0"}
    assert (event["type"], event["reason"], event["message"]) == (
        "Warning", "GangWaiting", "gang ml/train: 3 of 4 pods fit")
    assert event["source"] == {"component": "muster"}
    assert events.written == 1


def test_workload_events_are_written_on_the_workload_object(api: FakeApiServer,
                                                             tmp_path: Path) -> None:
    events = KubeEvents(connect(str(api.kubeconfig(tmp_path))))
    events.emit(WorkloadEvent("jobset.x-k8s.io/v1alpha2", "JobSet", "ml", "train", "js-uid",
                              EventType.WARNING, "WorkloadRefused", "too many pods"))
    events.flush()
    [event] = api.cluster.events
    assert event["involvedObject"] == {"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                       "kind": "JobSet", "namespace": "ml", "name": "train",
                                       "uid": "js-uid"}
    assert event["metadata"]["namespace"] == "ml"
    assert (event["reason"], event["message"]) == ("WorkloadRefused", "too many pods")
