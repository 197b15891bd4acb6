"""Karta objects applied in the cluster are descriptors: watched, compiled, read by the CLI."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from extender.core.workloads.catalog import Catalog
from extender.kube.client import connect
from extender.kube.informer import Backoff
from extender.kube.live import KARTA_TYPE, Watches
from extender.kube.reader import cluster_descriptor_objects
from extender.state.build import CatalogSnapshots
from extender.state.store import KARTAS, StateStore
from tests.unit.karta.builders import (
    API_VERSION,
    KARTA_PATH,
    PLURAL,
    kartas_discovery,
    runs_discovery,
    training_run,
    training_run_karta,
    training_run_pod,
)
from tests.unit.kube.fakeapi import FakeApiServer, fake_api
from tests.unit.kube.test_informers_follow_the_api_server import eventually

ROOT = Path(__file__).resolve().parents[3]
RUNS = f"/apis/{API_VERSION}/{PLURAL}"
PODS = "/api/v1/pods"
DESCRIPTORS = "/apis/muster.dev/v1alpha1/workloaddescriptors"
RUN_SOURCE = f"{API_VERSION}/TrainingRun"


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with fake_api() as server:
        server.cluster.extra_groups[API_VERSION] = runs_discovery()
        server.cluster.objects[RUNS] = {}
        yield server


def with_karta_crd(api: FakeApiServer) -> None:
    api.cluster.extra_groups["run.ai/v1alpha1"] = kartas_discovery()
    api.cluster.objects[KARTA_PATH] = {}


def watch(api: FakeApiServer, tmp_path: Path,
          base: Catalog | None = None) -> tuple[Watches, StateStore, CatalogSnapshots]:
    snapshots = CatalogSnapshots(base or Catalog.of([]))
    store = StateStore(snapshots)
    conn = connect(str(api.kubeconfig(tmp_path)), timeout=2.0)
    watches = Watches(conn, store, snapshots, backoff=Backoff(0.05, 0.2), watch_seconds=5,
                      rediscover=60).start()
    return watches, store, snapshots


def test_a_karta_applied_in_the_cluster_describes_its_kind_and_its_gang(
        api: FakeApiServer, tmp_path: Path) -> None:
    with_karta_crd(api)
    run = training_run("train", workers=3, gpus=8, uid="run-1")
    api.cluster.put(RUNS, run)
    api.cluster.put(PODS, training_run_pod(run, 0))
    watches, store, _ = watch(api, tmp_path)
    try:
        eventually(lambda: store.readiness().ready)
        assert RUN_SOURCE not in watches.informers  # nothing describes TrainingRun yet
        assert store.snapshot().gangs == {}

        api.cluster.put(KARTA_PATH, training_run_karta())
        eventually(lambda: RUN_SOURCE in watches.informers)
        eventually(lambda: store.readiness().ready)
        eventually(lambda: bool(store.snapshot().gangs))
        snapshot = store.snapshot()
        [(key, gang)] = snapshot.gangs.items()
        assert (key, gang.pods, gang.min_member) == ("ml/train", 3, 3)
        [tree] = [t for t in snapshot.workloads.values() if t.ref.name == "train"]
        assert tree.descriptor_format == "karta"
        assert [o["kind"] for o in store.raw().objects] == ["TrainingRun"]  # not the Karta

        # Deleting the Karta takes the kind out of the catalog again, without a restart.
        api.cluster.delete(KARTA_PATH, "/trainingrun")
        eventually(lambda: RUN_SOURCE not in watches.informers)
        eventually(lambda: store.snapshot().gangs == {})
    finally:
        watches.stop()


def test_without_the_karta_crd_the_extender_is_ready_and_lists_no_karta(
        api: FakeApiServer, tmp_path: Path) -> None:
    watches, store, _ = watch(api, tmp_path)
    try:
        eventually(lambda: store.readiness().ready)
        assert "run.ai/v1alpha1/Karta" in watches.informers
        assert store.raw().descriptors == ()
        conn = connect(str(api.kubeconfig(tmp_path)), timeout=2.0)
        assert cluster_descriptor_objects(conn) == []
    finally:
        watches.stop()


def test_a_broken_karta_is_reported_and_does_not_hide_the_others(
        api: FakeApiServer, tmp_path: Path) -> None:
    with_karta_crd(api)
    broken = training_run_karta("broken")
    broken["spec"]["structureDefinition"]["childComponents"][0]["scaleDefinition"][
        "replicasPath"] = ".spec.workers *"
    broken["spec"]["structureDefinition"]["rootComponent"]["kind"]["kind"] = "OtherRun"
    api.cluster.put(KARTA_PATH, broken)
    api.cluster.put(KARTA_PATH, training_run_karta())
    api.cluster.put(RUNS, training_run("train", workers=2, gpus=4, uid="run-1"))
    watches, store, snapshots = watch(api, tmp_path)
    try:
        eventually(lambda: RUN_SOURCE in watches.informers and store.readiness().ready)
        eventually(lambda: bool(store.snapshot().gangs))
        assert list(snapshots.problems) == ["Karta/broken"]
        assert snapshots.problems["Karta/broken"].startswith(
            "spec.structureDefinition.childComponents[0].scaleDefinition.replicasPath: "
            "not a valid jq program")
    finally:
        watches.stop()


def test_a_native_descriptor_wins_over_a_cluster_karta_for_the_same_kind(
        api: FakeApiServer, tmp_path: Path) -> None:
    with_karta_crd(api)
    api.cluster.extra_groups["muster.dev/v1alpha1"] = [
        {"name": "workloaddescriptors", "kind": "WorkloadDescriptor", "namespaced": False}]
    api.cluster.objects[DESCRIPTORS] = {}
    native = yaml.safe_load((ROOT / "descriptors" / "jobset.yaml").read_text())
    karta = yaml.safe_load((ROOT.parent / "shared" / "karta-catalog" /
                            "jobset-x-k8s-io-jobset-v1alpha2.yaml").read_text())
    api.cluster.put(KARTA_PATH, karta)
    api.cluster.put(DESCRIPTORS, native)
    watches, store, snapshots = watch(api, tmp_path)
    try:
        eventually(lambda: store.readiness().ready and len(store.raw().descriptors) == 2)
        found = snapshots.catalog(store.raw()).for_api("jobset.x-k8s.io/v1alpha2", "JobSet")
        assert found is not None and (found.name, found.format) == ("jobset", "muster")
    finally:
        watches.stop()


def test_karta_changes_wake_the_reconciler_like_workload_descriptors() -> None:
    woken: list[int] = []
    store = StateStore(CatalogSnapshots(Catalog.of([])))
    store.on_descriptors_changed(lambda: woken.append(1))
    before = store.raw().descriptors_revision
    store.apply(KARTAS, "ADDED", training_run_karta())
    raw = store.raw()
    assert raw.descriptors_revision == before + 1 and woken == [1]
    assert [d["kind"] for d in raw.descriptors] == ["Karta"] and raw.objects == ()
    assert KARTA_TYPE.path() == KARTA_PATH


def test_describe_reads_a_cluster_karta_and_says_so_in_its_header(
        api: FakeApiServer, tmp_path: Path) -> None:
    with_karta_crd(api)
    api.cluster.put(KARTA_PATH, training_run_karta())
    run = training_run("train", workers=2, gpus=4, uid="run-1")
    api.cluster.put(RUNS, run)
    api.cluster.put(PODS, training_run_pod(run, 0, node="n0"))
    kubeconfig = str(api.kubeconfig(tmp_path))
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}

    def muster(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "extender.cli.main", *args,
                               "--kubeconfig", kubeconfig], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60, check=False)

    # The fake API server lists cluster-wide collections only, hence -A.
    shown = muster("describe", "trainingrun", "-A")
    assert shown.returncode == 0, shown.stderr
    assert "descriptor: trainingrun (karta, cluster)" in shown.stdout
    as_json = yaml.safe_load(muster("describe", "trainingrun", "-A", "-o", "json").stdout)
    assert (as_json["descriptorFormat"], as_json["descriptorSource"]) == ("karta", "cluster")
    assert as_json["totals"]["pods"] == 2 and as_json["totals"]["observedPods"] == 1
    listed = muster("descriptors", "list", "--no-builtin", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    rows = yaml.safe_load(listed.stdout)["descriptors"]
    assert [(r["name"], r["format"], r["source"]) for r in rows] == [
        ("trainingrun", "karta", "cluster")]
    # A Karta that does not compile is a warning; the other descriptors still serve.
    bad = copy.deepcopy(training_run_karta("bad"))
    bad["spec"]["structureDefinition"]["rootComponent"]["kind"]["kind"] = "Other"
    bad["spec"]["structureDefinition"]["childComponents"][0]["scaleDefinition"][
        "replicasPath"] = "[range(100000000)] | length"
    api.cluster.put(KARTA_PATH, bad)
    shown = muster("describe", "trainingrun", "-A")
    assert shown.returncode == 0, shown.stderr
    assert "warning: cluster descriptor bad: spec.structureDefinition.childComponents[0]." \
           "scaleDefinition.replicasPath: jq program" in shown.stderr
    assert "range" in shown.stderr and "Traceback" not in shown.stderr
