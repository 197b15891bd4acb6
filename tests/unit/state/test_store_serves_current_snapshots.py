"""The state store: sources, readiness, overlays, and snapshot files loaded into it."""

from __future__ import annotations

from pathlib import Path

import pytest

from extender.core.model.snapshot import ClusterSnapshot
from extender.files.snapshot import SnapshotFileError, load_snapshot, parse_snapshot
from extender.state.store import DESCRIPTORS, NODES, PODS, RawState, StateStore


def counting_builder(calls: list[RawState]):  # type: ignore[no-untyped-def]
    def build(raw: RawState) -> ClusterSnapshot:
        calls.append(raw)
        return ClusterSnapshot.of((), (), revision=raw.revision)
    return build


def pod(name: str, *, uid: str = "", node: str = "", ns: str = "ml") -> dict[str, object]:
    spec: dict[str, object] = {"containers": []}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "uid": uid or f"uid-{name}"},
            "spec": spec}


def node(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}


def test_not_ready_until_every_expected_source_has_listed() -> None:
    store = StateStore(counting_builder([]), expected=[NODES, PODS])
    assert store.readiness().ready is False
    assert "v1/Node not listed yet" in store.readiness().reason
    store.replace(NODES, [node("n1")])
    store.replace(PODS, [])
    assert store.readiness().ready is True


def test_a_broken_watch_makes_the_store_not_ready_until_relisted() -> None:
    store = StateStore(counting_builder([]), expected=[NODES])
    store.replace(NODES, [])
    store.set_health(NODES, healthy=False, problem="API server unreachable")
    assert store.readiness() .reason == "v1/Node: API server unreachable"
    store.replace(NODES, [node("n1")])
    assert store.readiness().ready is True


def test_snapshot_is_rebuilt_only_when_something_changed() -> None:
    calls: list[RawState] = []
    store = StateStore(counting_builder(calls))
    store.replace(NODES, [node("b"), node("a")])
    first = store.snapshot()
    assert store.snapshot() is first
    store.apply(NODES, "DELETED", node("a"))
    store.snapshot()
    assert len(calls) == 2
    assert [n["metadata"]["name"] for n in calls[0].nodes] == ["a", "b"]
    assert [n["metadata"]["name"] for n in calls[1].nodes] == ["b"]


def test_a_pod_from_a_request_is_visible_until_the_informer_reports_it() -> None:
    calls: list[RawState] = []
    store = StateStore(counting_builder(calls))
    store.replace(PODS, [])
    store.upsert_pod(pod("w-0"))
    assert store.pod("ml", "w-0") is not None
    store.snapshot()
    assert [p["metadata"]["name"] for p in calls[-1].pods] == ["w-0"]
    store.apply(PODS, "ADDED", pod("w-0"))
    store.snapshot()
    assert len(calls[-1].pods) == 1


def test_a_bound_pod_stays_on_its_node_until_the_informer_catches_up() -> None:
    store = StateStore(counting_builder([]))
    store.replace(PODS, [pod("w-0")])
    store.assume_bound("ml", "w-0", "n1")
    store.apply(PODS, "MODIFIED", pod("w-0"))  # an older event, still unbound
    assert store.pod("ml", "w-0")["spec"]["nodeName"] == "n1"  # type: ignore[index]
    store.apply(PODS, "MODIFIED", pod("w-0", node="n1"))
    store.apply(PODS, "MODIFIED", pod("w-0"))  # the assumption is gone once confirmed
    assert "nodeName" not in store.pod("ml", "w-0")["spec"]  # type: ignore[index]


def test_descriptor_changes_notify_listeners() -> None:
    store = StateStore(counting_builder([]))
    seen: list[int] = []
    store.on_descriptors_changed(lambda: seen.append(store.raw().descriptors_revision))
    store.apply(DESCRIPTORS, "ADDED", {"apiVersion": "muster.dev/v1alpha1",
                                       "kind": "WorkloadDescriptor", "metadata": {"name": "x"}})
    assert seen == [1]


KUBECTL_LIST = """\
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: gpu-1}
- apiVersion: v1
  kind: Pod
  metadata: {name: w-0, namespace: ml, uid: u0}
  spec: {containers: []}
---
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: train, namespace: ml}
---
kind: PodList
apiVersion: v1
items:
- metadata: {name: w-1, namespace: ml, uid: u1}
"""


def test_snapshot_files_flatten_lists_and_streams_into_sources(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(KUBECTL_LIST)
    objects = load_snapshot(path)
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("Node", "gpu-1"), ("Pod", "w-0"), ("JobSet", "train"), ("Pod", "w-1")]
    calls: list[RawState] = []
    store = StateStore(counting_builder(calls), expected=[NODES, PODS])
    store.load(objects)
    assert store.readiness().ready
    store.snapshot()
    assert len(calls[0].pods) == 2 and len(calls[0].objects) == 1


@pytest.mark.parametrize(("text", "message"), [
    ("a: [unclosed", "not valid YAML"),
    ("- 1\n- 2\n", "document 1: expected an object"),
    ("metadata: {name: x}\n", "document 1: object has no kind"),
    ("kind: Pod\nmetadata: {}\n", "Pod has no metadata.name"),
    ("kind: List\nitems: {}\n", "items: expected a list"),
])
def test_bad_snapshot_files_say_where(text: str, message: str) -> None:
    with pytest.raises(SnapshotFileError, match=message):
        parse_snapshot(text, source="f.yaml")


def test_a_missing_snapshot_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SnapshotFileError, match="cannot read"):
        load_snapshot(tmp_path / "absent.yaml")


def test_a_deleted_pod_sent_again_by_the_scheduler_stays_deleted() -> None:
    """kube-scheduler can filter a pod from its queue after the informer saw it deleted;
    upserting it would resurrect it in Muster's state for good (and its gang's claims)."""
    store = StateStore(counting_builder([]))
    store.replace(PODS, [pod("w0")])
    store.apply(PODS, "DELETED", pod("w0"))
    store.upsert_pod(pod("w0"))
    assert store.pod("ml", "w0") is None
    assert store.raw().pods == ()


def test_a_pod_known_only_from_a_request_goes_when_its_deletion_is_seen() -> None:
    store = StateStore(counting_builder([]))
    store.replace(PODS, [])
    store.upsert_pod(pod("w1"))
    assert store.pod("ml", "w1") is not None
    store.apply(PODS, "DELETED", pod("w1"))
    assert store.pod("ml", "w1") is None
    store.upsert_pod(pod("w1", uid="uid-w1-recreated"))  # same name, a new pod: welcome
    assert store.pod("ml", "w1") is not None
