"""The objects a stand-in operator makes carry names the API server accepts, one per object."""

from __future__ import annotations

from typing import Any

from extender.core.workloads.workload import resolve_workload
from extender.files.catalog import packaged_catalog
from extender.sandbox.controllers import children


def _jobset(name: str) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "m", "image": "i"}]}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "namespace": "ns", "uid": "u"},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": {
                "parallelism": 3, "completions": 3, "template": template}}}]}}


def test_the_pods_of_a_long_named_workload_keep_distinct_names_and_its_job_a_label_name(
        ) -> None:
    obj = _jobset("a-long-training-run-name-that-fills-most-of-a-label-" + "x" * 9)
    descriptor = packaged_catalog().require(obj)
    jobs, pods = children(obj, resolve_workload(obj, descriptor), descriptor)
    job = jobs[0]["metadata"]["name"]
    assert len(job) <= 63  # a Job's name becomes its pods' job-name label value
    names = [p["metadata"]["name"] for p in pods]
    assert len(set(names)) == 3
    assert names == [f"{job}-{i}" for i in range(3)]
