"""A WorkloadDescriptor applied in the cluster starts an informer for the kind it targets."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import yaml

from extender.core.workloads.catalog import Catalog
from extender.kube.client import ResourceType, connect
from extender.kube.informer import Backoff
from extender.kube.live import Watches
from extender.state.build import CatalogSnapshots
from extender.state.store import StateStore
from tests.unit.kube.fakeapi import fake_api
from tests.unit.kube.test_informers_follow_the_api_server import eventually

ROOT = Path(__file__).resolve().parents[3]
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/jobsets"
DESCRIPTORS = "/apis/muster.dev/v1alpha1/workloaddescriptors"


def test_a_new_descriptor_adds_a_watch_and_readiness_waits_for_it(tmp_path: Path) -> None:
    with fake_api() as api:
        cluster = api.cluster
        cluster.extra_groups["jobset.x-k8s.io/v1alpha2"] = [
            {"name": "jobsets", "kind": "JobSet", "namespaced": True}]
        cluster.extra_groups["muster.dev/v1alpha1"] = [
            {"name": "workloaddescriptors", "kind": "WorkloadDescriptor", "namespaced": False}]
        cluster.objects[DESCRIPTORS] = {}
        cluster.put(JOBSETS, {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                              "metadata": {"name": "train", "namespace": "ml"}, "spec": {}})
        snapshots = CatalogSnapshots(Catalog.of([]))  # no built-in descriptors at all
        store = StateStore(snapshots)
        conn = connect(str(api.kubeconfig(tmp_path)), timeout=2.0)
        watches = Watches(conn, store, snapshots, backoff=Backoff(0.05, 0.2), watch_seconds=5,
                          rediscover=60).start()
        try:
            eventually(lambda: store.readiness().ready)
            assert "jobset.x-k8s.io/v1alpha2/JobSet" not in watches.informers
            descriptor = yaml.safe_load((ROOT / "descriptors" / "jobset.yaml").read_text())
            cluster.put(DESCRIPTORS, descriptor)
            eventually(lambda: "jobset.x-k8s.io/v1alpha2/JobSet" in watches.informers)
            eventually(lambda: store.readiness().ready)
            kinds = [o["kind"] for o in store.raw().objects]
            assert kinds == ["JobSet"]
        finally:
            watches.stop()


class _SlowDiscovery(Watches):
    """Discovery that waits until the test lets it go (a slow or busy API server)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.go = threading.Event()

    def wanted(self) -> dict[str, ResourceType]:
        self.go.wait(10)
        return super().wanted()


def test_not_ready_until_the_listed_descriptors_kinds_are_watched(tmp_path: Path) -> None:
    with fake_api() as api:
        cluster = api.cluster
        cluster.extra_groups["jobset.x-k8s.io/v1alpha2"] = [
            {"name": "jobsets", "kind": "JobSet", "namespaced": True}]
        cluster.extra_groups["muster.dev/v1alpha1"] = [
            {"name": "workloaddescriptors", "kind": "WorkloadDescriptor", "namespaced": False}]
        cluster.put(DESCRIPTORS, yaml.safe_load((ROOT / "descriptors" / "jobset.yaml")
                                                .read_text()))
        cluster.put(JOBSETS, {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                              "metadata": {"name": "train", "namespace": "ml"}, "spec": {}})
        snapshots = CatalogSnapshots(Catalog.of([]))
        store = StateStore(snapshots)
        conn = connect(str(api.kubeconfig(tmp_path)), timeout=2.0)
        watches = _SlowDiscovery(conn, store, snapshots, backoff=Backoff(0.05, 0.2),
                                 watch_seconds=5, rediscover=60).start()
        try:
            # Nodes, pods and descriptors are listed, but the JobSet informer does not exist
            # yet: a JobSet's pods would look ownerless, so the extender must not be ready.
            eventually(lambda: store.synced("muster.dev/v1alpha1/WorkloadDescriptor"))
            time.sleep(0.3)
            assert not store.readiness().ready
            watches.go.set()
            eventually(lambda: store.readiness().ready)
            assert [o["kind"] for o in store.raw().objects] == ["JobSet"]
        finally:
            watches.go.set()
            watches.stop()
