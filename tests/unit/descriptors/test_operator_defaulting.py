"""Counts follow each operator's own defaulting: CRD defaults, webhook defaults, controller clamps.

Each case is a manifest as a user writes it (most are cut down from the operator's own samples,
named in the test), resolved through the packaged catalog as ``muster describe -f`` and
``muster fit`` resolve it; the expected figures are what the operator's source makes of it (the
file read is named in ``docs/descriptors.md``, "Operator defaulting").
"""

from __future__ import annotations

import textwrap
from typing import Any

from extender.core.model.values import WorkloadTree
from extender.core.workloads.workload import resolve_workload
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


# ---------------------------------------------------------------- Milvus


def milvus(components: dict[str, Any], *, mode: str = "cluster") -> WorkloadTree:
    return resolve_obj({"apiVersion": "milvus.io/v1beta1", "kind": "Milvus",
                        "metadata": {"name": "my-release"},
                        "spec": {"mode": mode, "components": components}})


CORE_26 = {"proxy": 1, "mixCoord": 1, "dataNode": 1, "queryNode": 1, "streamingNode": 1}


def test_milvus_cluster_without_an_image_runs_the_default_26_components() -> None:
    assert role_pods(milvus({})) == CORE_26


def test_milvus_25_cluster_gets_a_mix_coord_and_an_index_node_from_the_webhook() -> None:
    # milvus-operator config/samples/beta/milvus_streaming_node.yaml (v2.5.11): 5 pods, not 4.
    tree = milvus({"image": "milvusdb/milvus:v2.5.16"})
    assert role_pods(tree) == {"proxy": 1, "mixCoord": 1, "dataNode": 1, "queryNode": 1,
                               "indexNode": 1}


def test_milvus_25_one_legacy_coordinator_makes_the_webhook_fill_in_all_four() -> None:
    # milvus-operator config/samples/milvus_cluster_4coords.yaml writes only rootCoord: 8 pods.
    tree = milvus({"image": "milvusdb/milvus:v2.5.16", "rootCoord": {"replicas": 2}})
    assert role_pods(tree) == {"proxy": 1, "dataNode": 1, "queryNode": 1, "indexNode": 1,
                               "rootCoord": 2, "dataCoord": 1, "queryCoord": 1, "indexCoord": 1}
    assert tree.pods == 9


def test_milvus_25_written_mix_coord_wins_over_written_legacy_coordinators() -> None:
    tree = milvus({"image": "milvusdb/milvus:v2.5.16", "mixCoord": {}, "dataCoord": {}})
    assert role_pods(tree) == {"proxy": 1, "mixCoord": 1, "dataNode": 1, "queryNode": 1,
                               "indexNode": 1}


def test_milvus_26_deploys_no_legacy_coordinators_or_index_node_even_when_written() -> None:
    tree = milvus({"image": "milvusdb/milvus:v2.6.11", "rootCoord": {"replicas": 1},
                   "queryCoord": {}, "indexNode": {"replicas": 3}})
    assert role_pods(tree) == CORE_26


def test_milvus_version_field_wins_over_the_image_tag() -> None:
    tree = milvus({"version": "2.5.4", "image": "registry.local:5000/milvus:v2.6.1"})
    assert "indexNode" in role_pods(tree)
    assert "streamingNode" not in role_pods(tree)
    assert role_pods(milvus({"version": "v2.6.0", "image": "milvusdb/milvus:v2.5.4"})) == CORE_26


def test_milvus_image_tag_that_is_not_a_version_counts_as_older_than_26() -> None:
    for image in ("milvusdb/milvus:latest", "milvusdb/milvus", "registry:5000/milvus",
                  "milvusdb/milvus:2.6-rc1"):
        assert "indexNode" in role_pods(milvus({"image": image})), image
    for image in ("milvusdb/milvus:master-20250101-abc", "milvusdb/milvus:2.6",
                  "milvusdb/milvus:v2.10.0-gpu", "milvusdb/milvus:v3.0.0", "milvus:v2.5.1000"):
        assert role_pods(milvus({"image": image})) == CORE_26, image


def test_milvus_25_streaming_node_runs_as_streaming_mode_says() -> None:
    old = {"image": "milvusdb/milvus:v2.5.16"}
    assert "streamingNode" not in role_pods(milvus(old))
    assert role_pods(milvus({**old, "streamingNode": {"replicas": 2}}))["streamingNode"] == 2
    assert role_pods(milvus({**old, "streamingMode": True}))["streamingNode"] == 1
    assert "streamingNode" not in role_pods(milvus({**old, "streamingMode": False,
                                                    "streamingNode": {"replicas": 2}}))


def test_milvus_deployment_group_without_replicas_runs_the_deployment_default_of_one() -> None:
    tree = milvus({"queryNode": {"replicas": 9, "groups": [
        {"name": "g1", "replicas": 3}, {"name": "g2"}, {"name": "hpa", "replicas": -1}]}})
    assert role_pods(tree)["queryNode"] == 4


def test_milvus_cdc_runs_in_standalone_mode_once_written() -> None:
    # milvus-operator config/samples/milvus_cdc.yaml: standalone plus cdc, 2 pods.
    tree = milvus({"cdc": {"replicas": 2}}, mode="standalone")
    assert role_pods(tree) == {"standalone": 1, "cdc": 2}


def test_milvus_cluster_standalone_replicas_default_to_0_but_run_when_written() -> None:
    assert "standalone" not in role_pods(milvus({}))
    assert role_pods(milvus({"standalone": {"replicas": 1}}))["standalone"] == 1


# ---------------------------------------------------------------- Kubeflow


def replica(**fields: Any) -> dict[str, Any]:
    return {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}, **fields}


def test_mpijob_worker_replicas_default_to_0_and_the_launcher_to_1() -> None:
    for version in ("v2beta1", "v1"):
        tree = resolve_obj({"apiVersion": f"kubeflow.org/{version}", "kind": "MPIJob",
                            "metadata": {"name": "mpi"},
                            "spec": {"mpiReplicaSpecs": {"Launcher": replica(),
                                                         "Worker": replica()}}})
        assert role_pods(tree) == {"Launcher": 1, "Worker": 0}, version


def test_pytorchjob_lower_case_replica_types_are_the_master_and_worker() -> None:
    tree = resolve_obj({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                        "metadata": {"name": "pt"},
                        "spec": {"pytorchReplicaSpecs": {"master": replica(),
                                                         "worker": replica(replicas=3)}}})
    assert role_pods(tree) == {"Master": 1, "Worker": 3}
    assert gangs(tree) == [(4, 4)]


def test_pytorchjob_elastic_minimum_defaults_to_max_replicas_when_only_max_is_written() -> None:
    tree = resolve_obj({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                        "metadata": {"name": "pt"},
                        "spec": {"elasticPolicy": {"maxReplicas": 3},
                                 "pytorchReplicaSpecs": {"Worker": replica(replicas=4)}}})
    assert gangs(tree) == [(4, 3)]


# ---------------------------------------------------------------- serving


def isvc(predictor: dict[str, Any], annotations: dict[str, str] | None = None) -> WorkloadTree:
    return resolve_obj({"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
                        "metadata": {"name": "isvc", "annotations": annotations or {}},
                        "spec": {"predictor": {"model": {"modelFormat": {"name": "sklearn"}},
                                               **predictor}}})


def test_kserve_autoscaled_predictor_runs_at_least_one_pod() -> None:
    assert role_pods(isvc({"minReplicas": 0})) == {"predictor": 1}
    assert role_pods(isvc({"minReplicas": 3})) == {"predictor": 3}
    assert role_pods(isvc({})) == {"predictor": 1}


def test_kserve_autoscaler_class_none_runs_exactly_min_replicas() -> None:
    none = {"serving.kserve.io/autoscalerClass": "none"}
    assert role_pods(isvc({"minReplicas": 0}, none)) == {"predictor": 0}
    assert role_pods(isvc({"minReplicas": 2}, none)) == {"predictor": 2}


def ksvc(**annotations: str) -> WorkloadTree:
    keys = {k: f"autoscaling.knative.dev/{k.replace('_', '-')}" for k in annotations}
    return resolve_obj({"apiVersion": "serving.knative.dev/v1", "kind": "Service",
                        "metadata": {"name": "ksvc"},
                        "spec": {"template": {
                            "metadata": {"annotations": {keys[k]: v
                                                         for k, v in annotations.items()}},
                            "spec": {"containers": [{"image": "i"}]}}}})


def test_knative_revision_starts_at_the_larger_of_min_scale_and_initial_scale() -> None:
    assert ksvc().pods == 1
    assert ksvc(min_scale="3").pods == 3
    assert ksvc(initial_scale="4", min_scale="2").pods == 4
    assert ksvc(initial_scale="0").pods == 0


def test_knative_max_scale_bounds_the_starting_scale() -> None:
    assert ksvc(initial_scale="5", max_scale="2").pods == 2
    assert ksvc(initial_scale="5", max_scale="0").pods == 5


def nim(spec: dict[str, Any]) -> WorkloadTree:
    return resolve_obj({"apiVersion": "apps.nvidia.com/v1alpha1", "kind": "NIMService",
                        "metadata": {"name": "nim"},
                        "spec": {"image": {"repository": "nvcr.io/nim/x", "tag": "1"}, **spec}})


def test_nimservice_with_autoscaling_runs_the_hpa_minimum_not_spec_replicas() -> None:
    assert nim({"replicas": 4}).pods == 4
    scaled = {"replicas": 4, "scale": {"enabled": True, "hpa": {"minReplicas": 2,
                                                                 "maxReplicas": 8}}}
    assert nim(scaled).pods == 2
    assert nim({"replicas": 4, "scale": {"enabled": True, "hpa": {"maxReplicas": 8}}}).pods == 1


def test_multi_node_nimservice_with_autoscaling_sizes_the_lws_by_the_hpa_minimum() -> None:
    tree = nim({"replicas": 1, "multiNode": {"parallelism": {"pipeline": 2}},
                "scale": {"enabled": True, "hpa": {"minReplicas": 3, "maxReplicas": 4}}})
    assert role_pods(tree) == {"leader": 3, "worker": 3}
    assert gangs(tree) == [(2, 2), (2, 2), (2, 2)]


# ---------------------------------------------------------------- Grove and Dynamo

POD_SPEC = {"containers": [{"name": "c", "image": "i"}]}


def test_grove_podcliqueset_without_replicas_runs_none_as_the_crd_defaults_it_to_0() -> None:
    spec: dict[str, Any] = {"template": {"cliques": [
        {"name": "frontend", "spec": {"replicas": 2, "podSpec": POD_SPEC}}]}}
    tree = resolve_obj({"apiVersion": "grove.io/v1alpha1", "kind": "PodCliqueSet",
                        "metadata": {"name": "pcs"}, "spec": spec})
    assert (tree.pods, tree.gangs) == (0, ())
    tree = resolve_obj({"apiVersion": "grove.io/v1alpha1", "kind": "PodCliqueSet",
                        "metadata": {"name": "pcs"}, "spec": {**spec, "replicas": 1}})
    assert tree.pods == 2


def test_grove_clique_with_0_replicas_runs_one_pod_as_the_webhook_defaults_it() -> None:
    tree = resolve_obj({"apiVersion": "grove.io/v1alpha1", "kind": "PodCliqueSet",
                        "metadata": {"name": "pcs"},
                        "spec": {"replicas": 1, "template": {"cliques": [
                            {"name": "zero", "spec": {"replicas": 0, "podSpec": POD_SPEC}}]}}})
    assert role_pods(tree) == {"zero": 1}


def test_dynamo_multinode_block_without_node_count_spans_the_crd_default_of_two_nodes() -> None:
    tree = resolve_obj({"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
                        "metadata": {"name": "dgd"},
                        "spec": {"services": {"Frontend": {"replicas": 1},
                                              "Worker": {"replicas": 2, "multinode": {}}}}})
    assert role_pods(tree) == {"Frontend": 1, "Worker": 4}
    assert gangs(tree) == [(1, 1), (2, 2), (2, 2)]


# ---------------------------------------------------------------- managedBy

MULTIKUEUE = "kueue.x-k8s.io/multikueue"
JOB_TEMPLATE = {"spec": {"parallelism": 2, "template": {"spec": POD_SPEC}}}


def jobset(**spec: Any) -> WorkloadTree:
    return resolve_obj({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                        "metadata": {"name": "js"},
                        "spec": {"replicatedJobs": [{"name": "w", "replicas": 2,
                                                     "template": JOB_TEMPLATE}], **spec}})


def test_workload_managed_by_another_controller_runs_no_pods_in_this_cluster() -> None:
    assert jobset().pods == 4
    assert jobset(managedBy="jobset.sigs.k8s.io/jobset-controller").pods == 4
    tree = jobset(managedBy=MULTIKUEUE)
    assert (tree.pods, tree.roles, tree.gangs) == (0, (), ())
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {**JOB_TEMPLATE["spec"], "managedBy": MULTIKUEUE}}
    assert resolve_obj(job).pods == 0
    train = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
             "metadata": {"name": "t"},
             "spec": {"runtimeRef": {"name": "torch"}, "trainer": {"numNodes": 4}}}
    assert resolve_obj(train).pods == 4
    assert resolve_obj({**train, "spec": {**train["spec"], "managedBy": MULTIKUEUE}}).pods == 0


def test_kubeflow_jobs_are_skipped_unless_run_policy_names_their_own_operator() -> None:
    def mpi(version: str, managed_by: str) -> int:
        return resolve_obj({"apiVersion": f"kubeflow.org/{version}", "kind": "MPIJob",
                            "metadata": {"name": "m"},
                            "spec": {"runPolicy": {"managedBy": managed_by},
                                     "mpiReplicaSpecs": {"Launcher": replica(),
                                                         "Worker": replica(replicas=2)}}}).pods
    assert mpi("v2beta1", "kubeflow.org/mpi-operator") == 3
    assert mpi("v1", "kubeflow.org/training-operator") == 3
    assert mpi("v1", "kubeflow.org/mpi-operator") == 0
    assert mpi("v2beta1", MULTIKUEUE) == 0
    pt = resolve_obj({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                      "metadata": {"name": "pt"},
                      "spec": {"runPolicy": {"managedBy": MULTIKUEUE},
                               "pytorchReplicaSpecs": {"Worker": replica(replicas=2)}}})
    assert pt.pods == 0
