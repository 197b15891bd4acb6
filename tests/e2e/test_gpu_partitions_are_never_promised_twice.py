"""Partitionable GPUs (NVIDIA's DynamicMIG layout: a counter set per GPU, which the full GPU
and every MIG placement consume) with the real kube-scheduler and its DynamicResources
plugin: once MIG partitions hold part of a GPU, Muster counts that GPU as taken for whole-GPU
claims, so a gang that needs every full GPU waits whole instead of being planned onto a GPU
whose counters are spent; when the partitions go, it is bound whole."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from extender.sandbox.dra import GPU_CLASS, MIG_CLASS, GpuModel
from extender.sandbox.sandbox import Sandbox
from tests.e2e.conftest import (
    of,
    pods_in,
    running,
    scratch_namespace,
    stays_unbound,
    wait_until,
    where,
)
from tests.e2e.test_dra_gangs_are_bound_whole import (
    apply,
    claim_template,
    jobset,
)
from tests.e2e.test_real_pod_lifecycle import kubectl, muster_gangs

pytestmark = pytest.mark.e2e


#: 2 DRA nodes of 8 partitionable GPUs, the real JobSet controller.
DRA_SANDBOX = {"gpu_model": GpuModel.DRA, "dra_nodes": 2, "dra_partitions": True,
               "jobset": True}


@pytest.fixture()
def ns(dra_box: Sandbox) -> Iterator[str]:
    with scratch_namespace(dra_box.connection(), "mig") as name:
        yield name


def test_a_whole_gpu_gang_waits_while_partitions_hold_a_gpu_then_binds_whole(
        dra_box: Sandbox, ns: str) -> None:
    conn = dra_box.connection()
    mig = claim_template(ns, "one-mig", count=1)
    mig["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = MIG_CLASS
    apply(dra_box, mig, claim_template(ns, "eight", count=8),
          jobset(ns, "small", pods=1, claim="one-mig"))
    assert wait_until(lambda: len(running(of(pods_in(conn, ns), "small"))) == 1, timeout=90), \
        where(pods_in(conn, ns))
    # The partition draws on one GPU's counters: one node has 7 whole GPUs left, not 8.
    apply(dra_box, jobset(ns, "whole", pods=2, claim="eight"))
    assert wait_until(lambda: len(of(pods_in(conn, ns), "whole")) == 2, timeout=30)
    stays_unbound(dra_box, ns, seconds=10, claims_allocated=1, jobset="whole")
    gang = next(g for key, g in muster_gangs(dra_box).items()
                if key.endswith("/whole"))
    assert f"needs 8 {GPU_CLASS} devices on one node, the most free is 7" \
        in gang["lastReason"], gang["lastReason"]

    kubectl(dra_box, "delete", "jobset", "small", "-n", ns, "--wait=false")
    assert wait_until(lambda: len(running(of(pods_in(conn, ns), "whole"))) == 2,
                      timeout=120), where(pods_in(conn, ns))
    assert len({p["spec"]["nodeName"] for p in of(pods_in(conn, ns), "whole")}) == 2
