"""Every manifest of ``shared/examples/INDEX.md`` resolves to the index's totals.

One case per INDEX row, named after the file. ``pods`` and ``gpus`` are the index's figures
("as written" for rows it marks ambiguous); ``gangs`` lists ``(pods, minimum)`` per gang. Two
rows depend on values no single object carries; ``deviation`` holds what Muster resolves there
and why, so the difference stays visible and tested.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from extender.core.workloads.catalog import UnknownKind
from tests.unit.descriptors.examples import EXAMPLES, index_rows, resolve_file


@dataclass(frozen=True)
class Row:
    number: str
    file: str
    pods: int
    gpus: int
    roles: list[str]
    gangs: list[tuple[int, int]]
    deviation: tuple[int, int, str] | None = None

    @property
    def stem(self) -> str:
        return self.file.rsplit("/", 1)[-1].removesuffix(".yaml")


ROWS = [
    Row("1", "jobset/jobset__site__static__examples__simple__paralleljobs.yaml",
        pods=5, gpus=0,
        roles=['workers', 'driver'], gangs=[(5, 5)]),
    Row("2", "jobset/jobset__site__static__examples__simple__group.yaml",
        pods=4, gpus=0,
        roles=['rj-1', 'rj-2'], gangs=[(4, 4)]),
    Row("3", "jobset/jobset__site__static__examples__simple__jobset-with-network.yaml",
        pods=3, gpus=0,
        roles=['leader', 'workers'], gangs=[(3, 3)]),
    Row("4", "jobset/jobset__site__static__examples__simple__exclusive-placement.yaml",
        pods=9, gpus=0,
        # Exclusive placement by affinity: each Job's leader first, its followers once the
        # leader is scheduled (JobSet's pod webhook); one gang of all 9.
        roles=['workers', 'workers/followers'], gangs=[(9, 9)]),
    Row("5", "jobset/jobset__site__static__examples__startup-policy__startup-driver-ready.yaml",
        pods=5, gpus=0,
        roles=['driver', 'workers'], gangs=[(5, 5)]),
    Row("6", "jobset/jobset__site__static__examples__depends-on__depends-on.yaml",
        pods=6, gpus=0,
        # The launcher is created once the initializer *completes*: a gang of its own with
        # the workers (created once it is Ready), so the 5 that run together are admitted
        # together, not a minimum of 6 that never run at once.
        roles=['initializer', 'launcher', 'worker'], gangs=[(1, 1), (5, 5)]),
    Row("7", "jobset/jobset__site__static__examples__pytorch__resnet-cifar10__resnet.yaml",
        pods=4, gpus=0,
        roles=['workers'], gangs=[(4, 4)]),
    Row("8", "jobset/jobset__site__static__examples__tpu-multislice__v6e-jax-workload.yaml",
        pods=8, gpus=0,
        roles=['slice', 'slice/followers'], gangs=[(8, 8)]),
    Row("9", "jobset/jobset__site__static__examples__workload-aware-scheduling__jobset.yaml",
        pods=6, gpus=0,
        roles=['rj'], gangs=[(6, 6)]),
    Row("9a", "jobset/jobset__site__static__examples__workload-aware-scheduling__podgroup.yaml",
        pods=0, gpus=0,
        roles=[], gangs=[]),
    Row("9b", "jobset/jobset__site__static__examples__workload-aware-scheduling__workload.yaml",
        pods=0, gpus=0,
        roles=[], gangs=[]),
    Row("10", "lws/lws__docs__examples__vllm__GPU__lws.yaml",
        pods=4, gpus=32,
        roles=['leader', 'worker'], gangs=[(2, 2), (2, 2)]),
    Row("11", "lws/lws__docs__examples__sglang__lws.yaml",
        pods=4, gpus=4,
        roles=['leader', 'worker'], gangs=[(2, 2), (2, 2)]),
    Row("12", "lws/lws__docs__examples__tensorrt-llm__lws.yaml",
        pods=2, gpus=16,
        roles=['leader', 'worker'], gangs=[(2, 2)]),
    Row("13", "lws/lws__docs__examples__vllm__TPU__lws.yaml",
        pods=8, gpus=0,
        roles=['leader', 'worker'], gangs=[(4, 4), (4, 4)]),
    Row("14", "lws/lws__docs__examples__sample__lws.yaml",
        pods=12, gpus=0,
        roles=['leader', 'worker'], gangs=[(4, 4), (4, 4), (4, 4)]),
    Row("15", "lws/lws__docs__examples__sample__lws-multi-template.yaml",
        pods=12, gpus=0,
        roles=['leader', 'worker'], gangs=[(4, 4), (4, 4), (4, 4)]),
    Row("16", "lws/lws__docs__examples__sample__gang-scheduling__lws-sample-volcano.yaml",
        pods=8, gpus=0,
        roles=['leader', 'worker'], gangs=[(4, 4), (4, 4)]),
    Row("17", "lws/lws__docs__examples__sample__lws-rollout-strategy.yaml",
        pods=16, gpus=0,
        roles=['leader', 'worker'], gangs=[(4, 4), (4, 4), (4, 4), (4, 4)]),
    Row("18", "lws/lws__docs__examples__llamacpp__k8s__lws.yaml",
        pods=5, gpus=0,
        roles=['leader', 'worker'], gangs=[(5, 5)]),
    Row("19", "kuberay/kuberay__ray-operator__config__samples__ray-cluster.sample.yaml",
        pods=2, gpus=0,
        roles=['head', 'workergroup'], gangs=[(2, 2)]),
    Row("20", "kuberay/kuberay__ray-operator__config__samples__ray-cluster.verl.yaml",
        pods=1, gpus=4,
        roles=['head'], gangs=[(1, 1)]),
    Row("21", "kuberay/kuberay__ray-operator__config__samples__ray-cluster.kai-gpu-sharing.yaml",
        pods=3, gpus=0,
        roles=['head', 'shared-gpu'], gangs=[(3, 3)]),
    Row("22", "kuberay/kuberay__ray-operator__config__samples__ray-cluster-label-selector.yaml",
        pods=2, gpus=0,
        roles=['head', 'large-cpu-group', 'accelerator-group', 'spot-group'], gangs=[(2, 2)]),
    Row("23", "kuberay/kuberay__ray-operator__config__samples__ray-cluster.tpu-v6e-16-multihost.yaml",  # noqa: E501
        pods=5, gpus=0,
        roles=['head', 'tpu-group'], gangs=[(5, 5)]),
    Row("24", "kuberay/kuberay__ray-operator__config__samples__pytorch-resnet-image-classifier__ray-job.pytorch-image-classifier.yaml",  # noqa: E501
        pods=5, gpus=4,
        roles=['head', 'gpu-group'], gangs=[(5, 5)]),
    Row("25", "kuberay/kuberay__ray-operator__config__samples__ray-job.batch-inference.yaml",
        pods=1, gpus=4,
        roles=['head'], gangs=[(1, 1)]),
    Row("26", "kuberay/kuberay__ray-operator__config__samples__ray-job.tpu-v6e-256-multihost.yaml",
        pods=65, gpus=0,
        roles=['head', 'tpu-group'], gangs=[(65, 65)]),
    Row("27", "kuberay/kuberay__ray-operator__config__samples__ray-service.deepseek.yaml",
        pods=3, gpus=16,
        roles=['head', 'gpu-group'], gangs=[(3, 3)]),
    Row("28", "kuberay/kuberay__ray-operator__config__samples__ray-service.llm-serve.yaml",
        pods=2, gpus=4,
        roles=['head', 'gpu-group'], gangs=[(2, 2)]),
    Row("29", "kubeflow-training-operator/training-operator__examples__pytorch__simple.yaml",
        pods=2, gpus=0,
        roles=['Master', 'Worker'], gangs=[(2, 2)]),
    Row("30", "kubeflow-training-operator/training-operator__examples__pytorch__mnist__v1__pytorch_job_mnist_nccl.yaml",  # noqa: E501
        pods=2, gpus=2,
        roles=['Master', 'Worker'], gangs=[(2, 2)]),
    Row("31", "kubeflow-training-operator/training-operator__examples__pytorch__deepspeed-demo__pytorch_deepspeed_demo.yaml",  # noqa: E501
        pods=2, gpus=2,
        roles=['Master', 'Worker'], gangs=[(2, 2)]),
    Row("32", "kubeflow-training-operator/training-operator__examples__pytorch__elastic__imagenet__imagenet.yaml",  # noqa: E501
        pods=2, gpus=0,
        roles=['Worker'], gangs=[(2, 1)]),
    Row("33", "kubeflow-training-operator/training-operator__examples__pytorch__cpu-demo__demo.yaml",  # noqa: E501
        pods=2, gpus=0,
        roles=['Master', 'Worker'], gangs=[(2, 2)]),
    Row("34", "kubeflow-training-operator/training-operator__examples__mpi__tensorflow-mnist.yaml",
        pods=3, gpus=0,
        roles=['Launcher', 'Worker'], gangs=[(3, 3)]),
    Row("35", "kubeflow-training-operator/training-operator__examples__mpi__tensorflow-mnist-elastic.yaml",  # noqa: E501
        pods=3, gpus=0,
        roles=['Launcher', 'Worker'], gangs=[(3, 3)]),
    Row("36", "kubeflow-training-operator/training-operator__examples__tensorflow__distribution_strategy__multi_worker_tfjob.yaml",  # noqa: E501
        pods=2, gpus=2,
        roles=['Worker'], gangs=[(2, 2)]),
    Row("37", "kubeflow-training-operator/training-operator__examples__paddlepaddle__simple-gpu.yaml",  # noqa: E501
        pods=2, gpus=4,
        roles=['Worker'], gangs=[(2, 2)]),
    Row("38", "kubeflow-trainer/trainer__examples__yaml__01-multi-node.yaml",
        pods=3, gpus=0,
        roles=['node'], gangs=[(3, 3)]),
    Row("39", "kubeflow-trainer/trainer__examples__yaml__04-volcano-integration.yaml",
        pods=4, gpus=0,
        roles=['node'], gangs=[(4, 4)]),
    Row("40", "kubeflow-trainer/trainer__examples__flux__lammps-train-gpus.yaml",
        pods=2, gpus=2,
        roles=['node'], gangs=[(2, 2)]),
    Row("41", "kubeflow-trainer/trainer__manifests__base__runtimes__torchtune__llama3_2__llama3_2_1B.yaml",  # noqa: E501
        pods=0, gpus=0,
        roles=[], gangs=[]),
    Row("42", "kubeflow-mpi-operator/mpi-operator__examples__v2beta1__tensorflow-benchmarks__tensorflow-benchmarks.yaml",  # noqa: E501
        pods=3, gpus=2,
        roles=['Launcher', 'Worker'], gangs=[(3, 3)]),
    Row("43", "kubeflow-mpi-operator/mpi-operator__examples__v2beta1__pi__pi.yaml",
        pods=3, gpus=0,
        roles=['Launcher', 'Worker'], gangs=[(3, 3)]),
    Row("44", "kubeflow-mpi-operator/mpi-operator__examples__v2beta1__pi__pi-intel.yaml",
        pods=3, gpus=0,
        roles=['Launcher', 'Worker'], gangs=[(3, 3)]),
    Row("45", "kubeflow-mpi-operator/mpi-operator__examples__v2beta1__pi__pi-mpich.yaml",
        pods=3, gpus=0,
        roles=['Launcher', 'Worker'], gangs=[(3, 3)]),
    Row("46", "kubeflow-mpi-operator/mpi-operator__examples__v2beta1__horovod__tensorflow-mnist.yaml",  # noqa: E501
        pods=3, gpus=0,
        roles=['Launcher', 'Worker'], gangs=[(3, 3)]),
    Row("47", "kserve/kserve__docs__samples__storage__hf__hf_isvc.yaml",
        pods=1, gpus=1,
        roles=['predictor'], gangs=[]),
    Row("48", "kserve/kserve__docs__samples__autoscaling__autoscale_gpu.yaml",
        pods=1, gpus=1,
        roles=['predictor'], gangs=[]),
    Row("49", "kserve/kserve__docs__samples__fluid__kserve-isvc.yaml",
        pods=1, gpus=1,
        roles=['predictor'], gangs=[]),
    Row("50", "kserve/kserve__docs__samples__v1beta1__torchserve__v2__bert__bert_gpu.yaml",
        pods=1, gpus=1,
        roles=['predictor'], gangs=[]),
    Row("51", "kserve/kserve__docs__samples__v1beta1__transformer__torchserve_image_transformer__transformer.yaml",  # noqa: E501
        pods=2, gpus=0,
        roles=['predictor', 'transformer'], gangs=[]),
    Row("52", "kserve/kserve__docs__samples__graph__sequence.yaml",
        pods=3, gpus=0,
        roles=['predictor', 'predictor', 'router'], gangs=[]),
    Row("53", "kserve/kserve__config__runtimes__kserve-huggingfaceserver-multinode.yaml",
        pods=0, gpus=0,
        roles=[], gangs=[]),
    Row("54", "kserve-website/kserve-website__docs__model-serving__generative-inference__multi-node__multi-node.md__L288-304__isvc-huggingface-llama3.yaml",  # noqa: E501
        pods=2, gpus=2,
        deviation=(2, 0, "the KServe controller injects 1 GPU per pod; the YAML writes none"),
        roles=['predictor', 'worker'], gangs=[]),
    Row("55", "kserve/kserve__docs__samples__llmisvc__dp-ep__deepseek-r1-gpu-rdma-roce__llm-inference-service-dp-ep-deepseek-r1-gpu-naive.yaml",  # noqa: E501
        pods=2, gpus=16,
        roles=['main', 'worker'], gangs=[(2, 2)]),
    Row("56", "kserve/kserve__docs__samples__llmisvc__single-node-gpu__llm-inference-service-pd-qwen2-7b-gpu.yaml",  # noqa: E501
        pods=3, gpus=3,
        roles=['main', 'prefill'], gangs=[(1, 1)]),
    Row("57", "knative-serving/knative-serving__test__performance__benchmarks__dataplane-probe__dataplane-probe-setup.yaml",  # noqa: E501
        pods=15, gpus=0,
        roles=['revision', 'revision', 'replica'], gangs=[]),
    Row("58", "knative-serving/knative-serving__test__performance__benchmarks__load-test__load-test-setup.yaml",  # noqa: E501
        pods=3, gpus=0,
        roles=['revision', 'revision', 'revision'], gangs=[]),
    Row("59", "knative-serving/knative-serving__test__test_images__autoscale__service.yaml",
        pods=1, gpus=0,
        roles=['revision'], gangs=[]),
    Row("60", "knative-serving/knative-serving__test__test_images__multicontainer__service.yaml",
        pods=1, gpus=0,
        roles=['revision'], gangs=[]),
    Row("61", "knative-serving/knative-serving__test__test_images__initcontainers__service.yaml",
        pods=1, gpus=0,
        roles=['revision'], gangs=[]),
    Row("62", "knative-docs/knative-docs__docs__versioned__serving__autoscaling__autoscale-go__service.yaml",  # noqa: E501
        pods=1, gpus=0,
        roles=['revision'], gangs=[]),
    Row("63", "knative-docs/knative-docs__code-samples__serving__hello-world__helloworld-go__service.yaml",  # noqa: E501
        pods=1, gpus=0,
        roles=['revision'], gangs=[]),
    Row("64", "knative-docs/knative-docs__code-samples__serving__multi-container__service.yaml",
        pods=1, gpus=0,
        roles=['revision'], gangs=[]),
    Row("65", "knative-docs/knative-docs__code-samples__community__serving__machinelearning-python-bentoml__service.yaml",  # noqa: E501
        pods=1, gpus=0,
        roles=['revision'], gangs=[]),
    Row("66", "knative-docs/knative-docs__code-samples__serving__tag-header-based-routing__sample.yaml",  # noqa: E501
        pods=1, gpus=0,
        roles=['revision'], gangs=[]),
    Row("67", "grove/grove__operator__samples__simple__simple1.yaml",
        pods=9, gpus=0,
        roles=['pca', 'pcb', 'pcc', 'pcd'], gangs=[(9, 9)]),
    Row("68", "grove/grove__operator__samples__user-guide__01_core-concepts__single-node-disaggregated.yaml",  # noqa: E501
        pods=5, gpus=0,
        roles=['prefill', 'decode'], gangs=[(5, 5)]),
    Row("69", "grove/grove__operator__samples__user-guide__01_core-concepts__multi-node-aggregated.yaml",  # noqa: E501
        pods=8, gpus=0,
        roles=['leader', 'worker'], gangs=[(4, 4), (4, 4)]),
    Row("70", "grove/grove__operator__samples__user-guide__01_core-concepts__multi-node-disaggregated.yaml",  # noqa: E501
        pods=13, gpus=0,
        roles=['pleader', 'pworker', 'dleader', 'dworker'], gangs=[(5, 5), (8, 8)]),
    Row("71", "grove/grove__operator__samples__user-guide__01_core-concepts__complete-inference-pipeline.yaml",  # noqa: E501
        pods=11, gpus=0,
        roles=[
            'frontend', 'vision-encoder', 'pleader', 'pworker', 'dleader', 'dworker'
        ], gangs=[(11, 11)]),
    Row("72", "grove/grove__operator__samples__user-guide__02_pod-and-resource-naming-conventions__multinode-disaggregated-with-frontend.yaml",  # noqa: E501
        pods=13, gpus=0,
        roles=['frontend', 'pleader', 'pworker', 'dleader', 'dworker'], gangs=[(4, 4), (9, 9)]),
    Row("73", "grove/grove__operator__e2e__yaml__auto-mnnvl__mnnvl-comprehensive-mix.yaml",
        pods=12, gpus=12,
        roles=[
            'sa1', 'sa2', 'sa3', 'p1', 'p2', 'p3', 'p4', 'p5', 'p6', 'p7', 'p8', 'p9'
        ], gangs=[(12, 12)]),
    Row("74", "grove/grove__operator__e2e__yaml__workload1.yaml",
        pods=10, gpus=0,
        roles=['pc-a', 'pc-b', 'pc-c'], gangs=[(10, 10)]),
    Row("75", "dynamo/dynamo__examples__backends__vllm__deploy__agg.yaml",
        pods=2, gpus=1,
        roles=['Frontend', 'VllmDecodeWorker'], gangs=[(1, 1), (1, 1)]),
    Row("76", "dynamo/dynamo__examples__backends__vllm__deploy__disagg.yaml",
        pods=3, gpus=2,
        roles=[
            'Frontend', 'VllmDecodeWorker', 'VllmPrefillWorker'
        ], gangs=[(1, 1), (1, 1), (1, 1)]),
    Row("77", "dynamo/dynamo__examples__backends__vllm__deploy__disagg-multinode.yaml",
        pods=5, gpus=4,
        roles=['Frontend', 'decode', 'prefill'], gangs=[(1, 1), (2, 2), (2, 2)]),
    Row("78", "dynamo/dynamo__examples__backends__sglang__deploy__agg_router.yaml",
        pods=2, gpus=1,
        roles=['Frontend', 'decode'], gangs=[(1, 1), (1, 1)]),
    Row("79", "dynamo/dynamo__examples__backends__sglang__deploy__disagg-multinode.yaml",
        pods=5, gpus=16,
        roles=['Frontend', 'decode', 'prefill'], gangs=[(1, 1), (2, 2), (2, 2)]),
    Row("80", "dynamo/dynamo__examples__backends__trtllm__deploy__disagg_router.yaml",
        pods=5, gpus=4,
        roles=[
            'Frontend', 'TRTLLMPrefillWorker', 'TRTLLMDecodeWorker'
        ], gangs=[(1, 1), (1, 1), (1, 1), (1, 1), (1, 1)]),
    Row("81", "dynamo/dynamo__examples__backends__trtllm__deploy__disagg-multinode.yaml",
        pods=5, gpus=16,
        roles=['Frontend', 'prefill', 'decode'], gangs=[(1, 1), (2, 2), (2, 2)]),
    Row("82", "nim-operator/nim-operator__config__samples__nim__serving__advanced__multi-node__multi-node-nimservice.yaml",  # noqa: E501
        pods=2, gpus=16,
        roles=['leader', 'worker'], gangs=[(2, 2)]),
    Row("83", "nim-operator/nim-operator__config__samples__nim__serving__advanced__multi-node__multi-node-nimservice-rdma.yaml",  # noqa: E501
        pods=2, gpus=16,
        roles=['leader', 'worker'], gangs=[(2, 2)]),
    Row("84", "nim-operator/nim-operator__config__samples__nim__serving__standalone__basic__llm.yaml",  # noqa: E501
        pods=1, gpus=1,
        roles=['nim'], gangs=[]),
    Row("85", "nim-operator/nim-operator__config__samples__nim__serving__standalone__basic__multi-llm.yaml",  # noqa: E501
        pods=1, gpus=1,
        roles=['nim'], gangs=[]),
    Row("86", "nim-operator/nim-operator__config__samples__nim__serving__standalone__autoscaling__llm.yaml",  # noqa: E501
        pods=1, gpus=1,
        roles=['nim'], gangs=[]),
    Row("87", "nim-operator/nim-operator__config__samples__nim__serving__kserve__standard__llm.yaml",  # noqa: E501
        pods=1, gpus=1,
        roles=['nim'], gangs=[]),
    Row("88", "nim-operator/nim-operator__config__samples__nim__pipelines__rag__rag-pipeline.yaml",
        pods=3, gpus=3,
        roles=['meta-llama3-8b-instruct', 'nv-embedqa-1b-v2', 'nv-rerankqa-1b-v2'], gangs=[]),
    Row("89", "nim-operator/nim-operator__config__samples__nim__serving__advanced__dra__auto-creation__example1__llm.yaml",  # noqa: E501
        pods=1, gpus=0,
        roles=['nim'], gangs=[]),
    Row("90", "milvus-operator/milvus-operator__config__samples__milvus_default.yaml",
        pods=1, gpus=0,
        roles=['standalone'], gangs=[]),
    Row("91", "milvus-operator/milvus-operator__config__samples__milvus_cluster_default.yaml",
        pods=5, gpus=0,
        roles=['proxy', 'mixCoord', 'dataNode', 'queryNode', 'streamingNode'], gangs=[]),
    Row("92", "milvus-operator/milvus-operator__config__samples__milvus_cluster_resource.yaml",
        pods=8, gpus=0,
        roles=[
            'proxy', 'dataNode', 'queryNode', 'indexNode', 'rootCoord', 'dataCoord', 'queryCoord',
            'indexCoord'
        ], gangs=[]),
    Row("93", "milvus-operator/milvus-operator__config__samples__cluster_demo.yaml",
        pods=5, gpus=0,
        roles=['proxy', 'mixCoord', 'dataNode', 'queryNode', 'streamingNode'], gangs=[]),
    Row("94", "milvus-operator/milvus-operator__config__samples__milvus_deployment_groups.yaml",
        pods=13, gpus=0,
        roles=['proxy', 'mixCoord', 'dataNode', 'queryNode', 'streamingNode'], gangs=[]),
    Row("95", "milvus-operator/milvus-operator__config__samples__hpa.yaml",
        pods=11, gpus=0,
        deviation=(8, 0, "replicas -1 hands the count to an HPA, a separate object; counted 0"),
        roles=[
            'proxy', 'mixCoord', 'dataNode', 'queryNode', 'streamingNode', 'proxy', 'mixCoord',
            'dataNode', 'queryNode', 'streamingNode'
        ], gangs=[]),
    Row("96", "kai-scheduler/kai__docs__batch__pytorch-job.yaml",
        pods=3, gpus=3,
        roles=['Master', 'Worker'], gangs=[(3, 3)]),
    Row("97", "kai-scheduler/kai__docs__elastic__pytorch-elastic.yaml",
        pods=2, gpus=0,
        roles=['Worker'], gangs=[(2, 1)]),
    Row("98", "kai-scheduler/kai__examples__ray__ray-job.yaml",
        pods=3, gpus=3,
        roles=['head', 'gpu-workers'], gangs=[(3, 3)]),
    Row("99", "kai-scheduler/kai__docs__batch__batch-job.yaml",
        pods=2, gpus=2,
        roles=['job'], gangs=[]),
    Row("100", "kai-scheduler/kai__docs__gpu-sharing__gpu-sharing.yaml",
        pods=1, gpus=0,
        roles=['pod'], gangs=[]),
    Row("101", "kai-scheduler/kai__docs__topology__multilevel.md__L46-63__podgroup-sample1.yaml",
        pods=0, gpus=0,
        roles=[], gangs=[]),
    Row("102", "kai-scheduler/kai__docs__topology__multilevel.md__L116-147__podgroup-sample2.yaml",
        pods=0, gpus=0,
        roles=[], gangs=[]),]

#: Rows that are not workloads (companion PodGroups, runtimes): nothing in them resolves.
NOT_WORKLOADS = {"9a", "9b", "41", "53", "101", "102"}


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.stem)
def test_example_resolves_to_the_index_totals(row: Row) -> None:
    trees, _ = resolve_file(EXAMPLES / row.file)
    pods = sum(t.pods for t in trees)
    gpus = sum(t.gpus for t in trees)
    if row.deviation is not None:
        want_pods, want_gpus, _why = row.deviation
        assert (pods, gpus) == (want_pods, want_gpus)
        assert (want_pods, want_gpus) != (row.pods, row.gpus)
    else:
        assert (pods, gpus) == (row.pods, row.gpus)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.stem)
def test_example_has_the_index_roles_and_gangs(row: Row) -> None:
    trees, _ = resolve_file(EXAMPLES / row.file)
    assert [r.name for t in trees for r in t.roles] == row.roles
    assert sorted((g.pods, g.min_member) for t in trees for g in t.gangs) == row.gangs


@pytest.mark.parametrize("row", [r for r in ROWS if r.number in NOT_WORKLOADS],
                         ids=lambda r: r.stem)
def test_companion_objects_are_not_workloads_and_name_the_known_kinds(row: Row) -> None:
    trees, unknown = resolve_file(EXAMPLES / row.file)
    assert trees == []
    assert unknown
    assert all("known kinds: " in str(err) and "JobSet.jobset.x-k8s.io" in str(err)
               for err in unknown)


def test_every_index_row_has_a_case() -> None:
    listed = dict(index_rows())
    assert {r.number: r.file for r in ROWS} == listed


def test_index_rows_are_parsed_from_the_table() -> None:
    rows = index_rows()
    assert len(rows) > 100
    assert all(re.fullmatch(r"\d+a?|9b", n) for n, _ in rows)
    assert all(isinstance(err, UnknownKind) for err in resolve_file(
        EXAMPLES / "kai-scheduler/kai__docs__topology__multilevel.md__L46-63__podgroup-sample1.yaml"
    )[1])
