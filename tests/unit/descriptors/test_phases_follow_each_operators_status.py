"""Each kind's status read as its operator writes it: no workload is Running while none of its
pods is bound (a Job counts gated and pending pods as active), one suspended by a queue is
Suspended, and one whose pods wait is still starting (Initializing)."""

from __future__ import annotations

from typing import Any

import pytest

from extender.core.model.values import Phase
from extender.core.workloads.phase import phase_of
from tests.unit.descriptors.examples import catalog


def phase(api_version: str, kind: str, status: dict[str, Any]) -> Phase:
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "w"}, "spec": {},
           "status": status}
    return phase_of(obj, catalog().require(obj).status)


def cond(kind: str, status: str = "True", reason: str = "") -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason}


JOBSET = ("jobset.x-k8s.io/v1alpha2", "JobSet")
JOB = ("batch/v1", "Job")
TRAINJOB = ("trainer.kubeflow.org/v1alpha1", "TrainJob")
DEPLOYMENT = ("apps/v1", "Deployment")
PYTORCHJOB = ("kubeflow.org/v1", "PyTorchJob")
LWS = ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
RAYCLUSTER = ("ray.io/v1", "RayCluster")


@pytest.mark.parametrize(("target", "status", "expected"), [
    (JOBSET, {"replicatedJobsStatus": [{"name": "w", "active": 2, "ready": 0}]},
     Phase.INITIALIZING),
    (JOBSET, {"replicatedJobsStatus": [{"name": "a", "active": 1, "ready": 0},
                                       {"name": "b", "active": 0, "ready": 2}]}, Phase.RUNNING),
    (JOBSET, {"replicatedJobsStatus": [{"name": "a", "active": 1, "succeeded": 1}]},
     Phase.RUNNING),
    (JOBSET, {"conditions": [cond("Suspended")],
              "replicatedJobsStatus": [{"name": "a", "suspended": 1}]}, Phase.SUSPENDED),
    (JOBSET, {"conditions": [cond("Completed")]}, Phase.COMPLETED),
    (JOBSET, {"conditions": [cond("Failed")]}, Phase.FAILED),
    (JOBSET, {}, Phase.INITIALIZING),
    (JOB, {"active": 4, "ready": 0}, Phase.INITIALIZING),
    (JOB, {"active": 4, "ready": 4}, Phase.RUNNING),
    (JOB, {"conditions": [cond("Suspended")]}, Phase.SUSPENDED),
    (TRAINJOB, {"jobsStatus": [{"name": "node", "active": 1, "ready": 0}]}, Phase.INITIALIZING),
    (TRAINJOB, {"jobsStatus": [{"name": "node", "active": 0, "ready": 1}]}, Phase.RUNNING),
    (DEPLOYMENT, {"conditions": [cond("Progressing"),
                                 cond("Available", "False", "MinimumReplicasUnavailable")]},
     Phase.INITIALIZING),
    (DEPLOYMENT, {"readyReplicas": 1,
                  "conditions": [cond("Progressing"),
                                 cond("Available", "False", "MinimumReplicasUnavailable")]},
     Phase.DEGRADED),
    (DEPLOYMENT, {"readyReplicas": 2, "conditions": [cond("Available")]}, Phase.RUNNING),
    (PYTORCHJOB, {"conditions": [cond("Created")]}, Phase.INITIALIZING),
    (PYTORCHJOB, {"conditions": [cond("Created"), cond("Running")]}, Phase.RUNNING),
    (PYTORCHJOB, {"conditions": [cond("Created"), cond("Suspended")]}, Phase.SUSPENDED),
    (LWS, {"conditions": [cond("Progressing"), cond("Available", "False")]},
     Phase.INITIALIZING),
    (RAYCLUSTER, {"state": "suspended"}, Phase.SUSPENDED),
    (RAYCLUSTER, {}, Phase.INITIALIZING),
], ids=[
    "jobset-whose-jobs-are-active-with-every-pod-gated-is-not-running",
    "jobset-with-one-job-ready-is-running",
    "jobset-with-one-job-succeeded-is-running",
    "jobset-suspended-by-a-queue-is-suspended",
    "jobset-completed",
    "jobset-failed",
    "jobset-fresh-is-initializing",
    "job-with-active-pods-none-ready-is-not-running",
    "job-with-ready-pods-is-running",
    "job-suspended-is-suspended",
    "trainjob-whose-jobs-are-only-active-is-not-running",
    "trainjob-with-a-ready-job-is-running",
    "deployment-never-available-is-initializing-not-degraded",
    "deployment-with-ready-pods-below-its-minimum-is-degraded",
    "deployment-available-is-running",
    "pytorchjob-created-is-initializing",
    "pytorchjob-running-condition-is-running",
    "pytorchjob-suspended-is-suspended",
    "lws-progressing-is-initializing",
    "raycluster-suspended-is-suspended",
    "raycluster-fresh-is-initializing",
])
def test_phase_follows_the_operators_own_status(target: tuple[str, str], status: dict[str, Any],
                                                expected: Phase) -> None:
    assert phase(*target, status) is expected
