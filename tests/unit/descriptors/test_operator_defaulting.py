"""Counts follow each operator's own defaulting: CRD defaults, webhook defaults, controller clamps.

Each case is a manifest as a user writes it (most are cut down from the operator's own samples,
named in the test), resolved through the packaged catalog as ``muster describe -f`` and
``muster fit`` resolve it; the expected figures are what the operator's source makes of it (the
file read is named in ``docs/descriptors.md``, "Operator defaulting").
"""

from __future__ import annotations

import textwrap
from typing import Any

from extender.core.model import WorkloadTree
from extender.core.workload import resolve_workload
from extender.files.catalog import yaml_documents
from tests.unit.descriptors.examples import catalog


def resolve(text: str) -> WorkloadTree:
    [(_, obj)] = list(yaml_documents(textwrap.dedent(text), "case.yaml"))
    return resolve_workload(obj, catalog().require(obj))


def role_pods(tree: WorkloadTree) -> dict[str, int]:
    return {r.name: r.pods for r in tree.roles}


def gangs(tree: WorkloadTree) -> list[tuple[int, int]]:
    return sorted((g.pods, g.min_member) for g in tree.gangs)


def resolve_obj(obj: dict[str, Any]) -> WorkloadTree:
    return resolve_workload(obj, catalog().require(obj))


RAY_POD = {"spec": {"containers": [{"name": "ray", "image": "rayproject/ray:2.46.0"}]}}
HEAD = {"rayStartParams": {}, "template": RAY_POD}


def group(name: str, **fields: Any) -> dict[str, Any]:
    return {"groupName": name, "template": RAY_POD, **fields}


def ray_cluster(*groups: dict[str, Any], autoscaling: bool = False) -> WorkloadTree:
    return resolve_obj({"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "rc"},
                        "spec": {"enableInTreeAutoscaling": autoscaling, "headGroupSpec": HEAD,
                                 "workerGroupSpecs": list(groups)}})


# ---------------------------------------------------------------- KubeRay


def test_ray_worker_group_without_replicas_runs_min_replicas_as_the_crd_defaults_it_to_0() -> None:
    # ray-operator/config/samples/ray-service.incremental-upgrade.yaml: `small-group` writes
    # minReplicas 0, maxReplicas 4 and no replicas; KubeRay runs no worker of that group.
    tree = ray_cluster(group("small-group", minReplicas=0, maxReplicas=4),
                       group("pinned", minReplicas=2))
    assert role_pods(tree) == {"head": 1, "small-group": 0, "pinned": 2}
    assert tree.pods == 3
    assert gangs(tree) == [(3, 3)]


def test_ray_replicas_are_clamped_into_min_and_max_replicas_by_the_controller() -> None:
    tree = ray_cluster(group("over", replicas=9, minReplicas=1, maxReplicas=3),
                       group("under", replicas=1, minReplicas=4, maxReplicas=8))
    assert role_pods(tree) == {"head": 1, "over": 3, "under": 4}
    assert gangs(tree) == [(8, 8)]


def test_ray_clamped_replicas_are_multiplied_by_num_of_hosts() -> None:
    tree = ray_cluster(group("tpu", replicas=5, maxReplicas=2, numOfHosts=4))
    assert role_pods(tree) == {"head": 1, "tpu": 8}


def test_ray_autoscaled_group_starts_at_clamped_replicas_with_min_replicas_as_its_minimum() -> None:
    tree = ray_cluster(group("elastic", minReplicas=2, maxReplicas=10, numOfHosts=2),
                       autoscaling=True)
    assert role_pods(tree) == {"head": 1, "elastic": 4}
    assert gangs(tree) == [(5, 5)]


def test_ray_suspended_worker_group_runs_no_pods() -> None:
    tree = ray_cluster(group("parked", replicas=3, suspend=True))
    assert role_pods(tree) == {"head": 1}


def test_rayjob_with_a_cluster_selector_creates_no_cluster_and_counts_no_pods() -> None:
    # ray-operator/config/samples/ray-job.use-existing-raycluster.yaml: the job is submitted to
    # the RayCluster the selector names; that cluster is counted as a workload of its own.
    tree = resolve("""
    apiVersion: ray.io/v1
    kind: RayJob
    metadata: {name: rayjob-use-existing-raycluster}
    spec:
      entrypoint: python -c "import ray; ray.init()"
      clusterSelector:
        ray.io/cluster: ray-cluster-kuberay
    """)
    assert (tree.pods, tree.gpus, tree.roles, tree.gangs) == (0, 0, (), ())


def test_rayjob_with_an_empty_cluster_selector_still_creates_its_cluster() -> None:
    # The controller tests len(clusterSelector) != 0: an empty map is not selector mode.
    tree = resolve_obj({"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "rj"},
                        "spec": {"entrypoint": "python x.py", "clusterSelector": {},
                                 "rayClusterSpec": {"headGroupSpec": HEAD, "workerGroupSpecs": [
                                     group("w", replicas=2)]}}})
    assert role_pods(tree) == {"head": 1, "w": 2}
    assert gangs(tree) == [(3, 3)]


def test_rayservice_worker_group_follows_the_same_replica_clamp() -> None:
    tree = resolve_obj({"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": "rs"},
                        "spec": {"rayClusterConfig": {"headGroupSpec": HEAD, "workerGroupSpecs": [
                            group("small-group", minReplicas=0, maxReplicas=4),
                            group("big", replicas=7, maxReplicas=5)]}}})
    assert role_pods(tree) == {"head": 1, "small-group": 0, "big": 5}
