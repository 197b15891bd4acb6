"""Every workload kind of the catalog, from a real upstream manifest, scheduled for real.

Each manifest is applied as its operator would make it run, and every pod must end up bound by
the real kube-scheduler with Muster as its extender. A built-in kind (the Job) is only created:
kube-controller-manager makes its pods. Every other kind runs through a STAND-IN operator
(``extender.sandbox.controllers``, hence the module's name): it makes its Jobs, whose pods the
real Job controller makes, and its other pods itself, from what the descriptor resolves. Most
of these kinds (Kubeflow, Dynamo, Grove, NIM, Milvus, KServe, Knative) have no operator in the
sandbox; JobSet, LWS and KubeRay do, and are tested with their real operators in
``test_real_*.py``.
"""

from __future__ import annotations

import pytest

from extender.core.workloads.catalog import Catalog
from extender.sandbox.sandbox import Sandbox
from extender.sandbox.submit import submit
from tests.e2e.conftest import bound, load_example, pods_in, scheduled_message, wait_until

pytestmark = pytest.mark.e2e

#: One manifest per kind, each small enough for the session cluster (4 nodes x 8 GPUs).
EXAMPLES = {
    "JobSet": "jobset/jobset__site__static__examples__simple__paralleljobs.yaml",
    "PyTorchJob": "kubeflow-training-operator/"
                  "training-operator__examples__pytorch__mnist__v1__pytorch_job_mnist_nccl.yaml",
    "RayCluster": "kuberay/kuberay__ray-operator__config__samples__ray-cluster.verl.yaml",
    "RayJob": "kuberay/kuberay__ray-operator__config__samples__pytorch-resnet-image-classifier"
              "__ray-job.pytorch-image-classifier.yaml",
    "RayService": "kuberay/kuberay__ray-operator__config__samples__ray-service.llm-serve.yaml",
    "InferenceService": "kserve/kserve__docs__samples__storage__hf__hf_isvc.yaml",
    "KnativeService": "knative-docs/"
                      "knative-docs__code-samples__serving__hello-world__helloworld-go__service.yaml",
    "MPIJob": "kubeflow-mpi-operator/"
              "mpi-operator__examples__v2beta1__tensorflow-benchmarks__tensorflow-benchmarks.yaml",
    "NIMService": "nim-operator/nim-operator__config__samples__nim__serving__standalone__basic"
                  "__llm.yaml",
    "LeaderWorkerSet": "lws/lws__docs__examples__vllm__GPU__lws.yaml",
    "Milvus": "milvus-operator/milvus-operator__config__samples__milvus_default.yaml",
    "PodCliqueSet": "grove/grove__operator__e2e__yaml__auto-mnnvl__mnnvl-comprehensive-mix.yaml",
    # A base PodGang and a scaled one (a second PCSG replica above minAvailable).
    "PodCliqueSet (scaled)": "grove/grove__operator__samples__user-guide__01_core-concepts__"
                             "multi-node-aggregated.yaml",
    "DynamoGraphDeployment": "dynamo/dynamo__examples__backends__vllm__deploy__disagg.yaml",
    "Job": "kai-scheduler/kai__docs__batch__batch-job.yaml",
}


#: Where the cut into gangs is the point: (pods, minimum) of each gang, as INDEX.md gives them.
GANGS = {
    "PodCliqueSet (scaled)": [(4, 4), (4, 4)],  # base PodGang + one scaled PodGang
    "LeaderWorkerSet": [(2, 2), (2, 2)],  # one gang per group
}


#: Kinds whose pods a real controller of the sandbox makes.
REAL = {"Job"}


@pytest.mark.parametrize("kind", sorted(set(EXAMPLES) - REAL))
def test_the_upstream_example_made_by_its_stand_in_operator_is_scheduled_whole(
        kind: str, sandbox: Sandbox, namespace: str, catalog: Catalog) -> None:
    scheduled_whole(kind, sandbox, namespace, catalog)


@pytest.mark.parametrize("kind", sorted(REAL))
def test_the_upstream_example_made_by_its_real_controller_is_scheduled_whole(
        kind: str, sandbox: Sandbox, namespace: str, catalog: Catalog) -> None:
    scheduled_whole(kind, sandbox, namespace, catalog)


def scheduled_whole(kind: str, sandbox: Sandbox, namespace: str, catalog: Catalog) -> None:
    conn = sandbox.connection()
    workloads = [d for d in load_example(EXAMPLES[kind])
                 if catalog.for_object(d) is not None and d.get("kind") != "Pod"]
    assert workloads, f"no {kind} in {EXAMPLES[kind]}"
    expected = 0
    for doc in workloads:
        doc.setdefault("metadata", {})["namespace"] = namespace
        # Some examples name their own scheduler (KAI's); the sandbox runs only its own.
        made = submit(conn, doc, catalog, namespace=namespace,
                      scheduler_name="default-scheduler")
        assert len(made.pods) <= made.tree.pods  # the rest are the Job controller's to make
        if kind in GANGS:
            assert [(g.pods, g.min_member) for g in made.tree.gangs] == GANGS[kind]
        expected += made.tree.pods
    assert expected > 0
    assert wait_until(lambda: len(bound(pods_in(conn, namespace))) == expected, timeout=90), (
        [(p["metadata"]["name"], scheduled_message(p))
         for p in pods_in(conn, namespace) if not p["spec"].get("nodeName")])
