"""The real MPI operator (github.com/kubeflow/mpi-operator v0.7.0, MPIJob v2beta1) in the sandbox.

No test here creates a pod: ``kubectl apply`` of an MPIJob is all. The operator makes the
worker pods itself (owned by the MPIJob) and, with ``launcherCreationPolicy:
WaitForWorkersReady``, the launcher Job only once every worker is Ready; kube-controller-manager
makes the launcher's pod. Muster binds the workers as the gang's first stage and the launcher
as its second, KWOK runs them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.core.workloads.catalog import Catalog
from extender.core.workloads.workload import resolve_workload
from extender.sandbox.sandbox import Sandbox
from tests.e2e.conftest import bound, describe, pods_in, scratch_namespace, wait_until, whole
from tests.e2e.operator_sandbox import operator_sandbox
from tests.e2e.test_real_pod_lifecycle import kubectl, muster_gangs

pytestmark = pytest.mark.e2e

ROLE = "training.kubeflow.org/job-role"


@pytest.fixture(scope="module")
def mpi_box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """4 nodes x 8 GPUs with the real MPI operator (and no other)."""
    with operator_sandbox(tmp_path_factory.mktemp("mpi"), mpi_operator=True) as box:
        yield box


@pytest.fixture()
def ns(mpi_box: Sandbox) -> Iterator[str]:
    with scratch_namespace(mpi_box.connection(), "mpi") as name:
        yield name


def mpijob(name: str, *, workers: int, gpus: int) -> dict[str, Any]:
    """An MPIJob whose launcher (no GPU) is created once its ``workers`` are Ready."""
    def template(role: str, resources: dict[str, Any]) -> dict[str, Any]:
        return {"spec": {"containers": [{"name": role, "image": "mpioperator/mpi-pi:openmpi",
                                         "resources": resources}]}}

    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": {"name": name},
            "spec": {"slotsPerWorker": gpus, "launcherCreationPolicy": "WaitForWorkersReady",
                     "runPolicy": {"cleanPodPolicy": "Running"},
                     "mpiReplicaSpecs": {
                         "Launcher": {"replicas": 1, "template": template(
                             "launcher", {"requests": {"cpu": "1"}})},
                         "Worker": {"replicas": workers, "template": template(
                             "worker", {"limits": {"nvidia.com/gpu": gpus}})}}}}


def apply(box: Sandbox, namespace: str, *objs: dict[str, Any]) -> None:
    kubectl(box, "apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump_all(objs))


def roles(pods: list[dict[str, Any]]) -> list[str]:
    return sorted(p["metadata"]["labels"].get(ROLE, "") for p in pods)


def of(pods: list[dict[str, Any]], job: str) -> list[dict[str, Any]]:
    return [p for p in pods
            if p["metadata"]["labels"].get("training.kubeflow.org/job-name") == job]


def gang(box: Sandbox, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = muster_gangs(box).get(f"{namespace}/{name}", {})
    return found


def test_an_mpijob_waiting_for_its_workers_is_bound_whole_workers_first_then_launcher(
        mpi_box: Sandbox, ns: str, catalog: Catalog) -> None:
    apply(mpi_box, ns, mpijob("pi", workers=2, gpus=8))
    conn = mpi_box.connection()
    assert wait_until(lambda: whole(conn, ns, 3), timeout=90), describe(conn, ns)
    pods = pods_in(conn, ns)
    assert roles(pods) == ["launcher", "worker", "worker"]
    # The operator's own objects: workers owned by the MPIJob, the launcher by its Job.
    owners = {p["metadata"]["labels"][ROLE]: p["metadata"]["ownerReferences"][0]["kind"]
              for p in pods}
    assert owners == {"launcher": "Job", "worker": "MPIJob"}
    workers = [p for p in pods if p["metadata"]["labels"][ROLE] == "worker"]
    assert len({p["spec"]["nodeName"] for p in workers}) == 2  # 8 GPUs each: a node each
    [launcher_job] = conn.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]
    ready_at = max(c["lastTransitionTime"] for p in workers for c in p["status"]["conditions"]
                   if c["type"] == "Ready")
    assert launcher_job["metadata"]["creationTimestamp"] >= ready_at  # WaitForWorkersReady
    # What Muster's descriptor reads from the object the API server holds: one gang of the
    # launcher and both workers, 16 GPUs; Muster's gang is that one, bound on those nodes.
    [obj] = conn.request("GET", f"/apis/kubeflow.org/v2beta1/namespaces/{ns}/mpijobs")["items"]
    tree = resolve_workload(obj, catalog.require(obj))
    [cut] = tree.gangs
    assert (tree.pods, tree.gpus, cut.min_member, cut.gpus) == (3, 16, 3, 16)
    seen = gang(mpi_box, ns, "pi")
    assert (seen["minMember"], seen["state"]) == (3, "bound"), seen
    # Created in two stages: the workers, then (once they are Ready) the launcher.
    assert [(s["roles"], s["minimum"], s["bound"]) for s in seen["stages"]] == \
        [(["Worker"], 2, 2), (["Launcher"], 1, 1)], seen
    nodes = {m["uid"]: (m["role"], m["node"]) for m in seen["members"]}
    assert nodes == {p["metadata"]["uid"]: (p["metadata"]["labels"][ROLE].capitalize(),
                                            p["spec"]["nodeName"]) for p in pods}


def test_an_mpijob_that_cannot_fit_beside_another_gets_no_pod_bound_until_it_fits_whole(
        mpi_box: Sandbox, ns: str) -> None:
    """3 workers of 8 GPUs hold three of the four nodes: the second MPIJob's two workers
    would fit one at a time, so a scheduler without gangs would bind one of them."""
    conn = mpi_box.connection()
    apply(mpi_box, ns, mpijob("first", workers=3, gpus=8))
    assert wait_until(lambda: whole(conn, ns, 4), timeout=90), describe(conn, ns)
    apply(mpi_box, ns, mpijob("second", workers=2, gpus=8))
    assert wait_until(lambda: len(of(pods_in(conn, ns), "second")) == 2, timeout=30)
    assert not wait_until(lambda: bound(of(pods_in(conn, ns), "second")) != [], timeout=10)
    jobs = conn.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]
    assert [j["metadata"]["name"] for j in jobs] == ["first-launcher"]  # none Ready: no launcher
    waiting = gang(mpi_box, ns, "second")
    assert (waiting["minMember"], waiting["bound"], waiting["state"]) == (3, 0, "waiting"), waiting
    # "the Worker pod left needs ...": what the workers that do not fit lack
    assert "Worker pod" in waiting["lastReason"], waiting
    assert "needs 8 nvidia.com/gpu on one node" in waiting["lastReason"], waiting
    kubectl(mpi_box, "delete", "-n", ns, "mpijob", "first", "--wait=false")
    assert wait_until(lambda: whole(conn, ns, 3) and roles(pods_in(conn, ns)) ==
                      ["launcher", "worker", "worker"], timeout=90), describe(conn, ns)


def test_the_sandbox_installs_the_releases_mpijob_crd_as_the_operators_own(
        mpi_box: Sandbox) -> None:
    crd = mpi_box.connection().request(
        "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/mpijobs.kubeflow.org")
    assert crd["metadata"]["labels"]["muster.dev/sandbox-operator"] == "mpi-operator"
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v2beta1"]
    log = Path(mpi_box.dir / "mpi-operator.log").read_text()
    assert "Leading started" in log
