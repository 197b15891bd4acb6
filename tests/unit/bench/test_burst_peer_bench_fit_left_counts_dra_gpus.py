"""The burst bench's ``fit left`` (gangs not whole that Muster's fit check says would fit now)
counts DRA GPUs: the free devices the nodes' ResourceSlices publish and the GPUs each pod asks
through claims or through the DeviceClass's extended resource. Without them a claim pod asks
no GPU at all (every gang "fits") and a DRA node offers no ``nvidia.com/gpu`` (none does).
The nodes are given as a list's items are, with no ``kind``."""

from __future__ import annotations

import random
from typing import Any

import pytest

from extender.core.workloads.workload import resolve_workload
from extender.files.catalog import packaged_catalog
from extender.sandbox.dra import GpuModel, device_classes, dra_node, node_slices
from extender.sandbox.submit import Submitted
from tests.bench import bench_peers

CATALOG = packaged_catalog()


def _gang_of_two_4_gpu_pods(gpu_model: str) -> dict[str, Any]:
    jobset = bench_peers.make_jobset("train-0", random.Random(1), 2)
    for job in jobset["spec"]["replicatedJobs"]:
        pod = job["template"]["spec"]["template"]["spec"]
        pod["containers"][0]["resources"]["limits"][bench_peers.GPU] = "4"
    jobset["metadata"].update(namespace=bench_peers.NAMESPACE, uid="jobset-uid")
    return bench_peers.as_claims(jobset) if gpu_model == "dra-claims" else jobset


def _fits(gpu_model: str, *, gpus_per_node: int) -> int:
    nodes = [dra_node(i, slot=i, nodes_per_rack=8) for i in range(2)]
    model = GpuModel.DRA if gpu_model == "dra-claims" else GpuModel.DRA_EXTENDED
    devices = device_classes(model) + [
        s for n in nodes for s in node_slices(n, gpus=gpus_per_node, partitions=False)]
    devices += [{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", **t}
                for t in bench_peers.claim_templates(bench_peers.NAMESPACE)]
    jobset = _gang_of_two_4_gpu_pods(gpu_model)
    tree = resolve_workload(jobset, CATALOG.require(jobset))
    submitted = [Submitted(workload=jobset, tree=tree, intermediates=[], pods=[])]
    listed = [{k: v for k, v in n.items() if k not in ("kind", "apiVersion")} for n in nodes]
    return bench_peers.gangs_that_fit(nodes=listed, pods=[], devices=devices,
                                      submitted=submitted, gangs=[], bound=frozenset(),
                                      catalog=CATALOG)


@pytest.mark.parametrize("gpu_model", ["dra-claims", "dra-extended"])
def test_a_gang_fits_when_the_slices_offer_its_gpus_and_not_when_they_do_not(
        gpu_model: str) -> None:
    assert _fits(gpu_model, gpus_per_node=8) == 1  # 2 pods of 4 GPUs, 8 devices per node
    assert _fits(gpu_model, gpus_per_node=2) == 0  # no node has 4 devices
