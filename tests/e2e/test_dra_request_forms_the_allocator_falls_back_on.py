"""Device requests in the forms beyond ``exactly: {count: N}``, with the real kube-scheduler, its
DynamicResources plugin and the real JobSet controller, on 3 DRA nodes of 8 GPUs:

* ``firstAvailable`` whose first alternative names a GPU the cluster does not have: the
  allocator falls through to the next alternative, and so does Muster, so the gang is bound
  whole on the GPUs that exist instead of waiting for ever;
* ``allocationMode: All`` (every matching GPU of a node): a gang of such pods waits whole while
  one GPU of a node is taken, then is bound whole, one pod per node.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from extender.sandbox.dra import GPU_CLASS, PRODUCT, GpuModel
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
    owned_claims,
)
from tests.e2e.test_real_pod_lifecycle import kubectl, muster_gangs

pytestmark = pytest.mark.e2e

#: 3 DRA nodes of 8 whole GPUs, the real JobSet controller.
DRA_SANDBOX = {"gpu_model": GpuModel.DRA, "dra_nodes": 3, "jobset": True}


@pytest.fixture()
def ns(dra_box: Sandbox) -> Iterator[str]:
    with scratch_namespace(dra_box.connection(), "forms") as name:
        yield name


def _product(prefix: str) -> list[dict[str, Any]]:
    return [{"cel": {"expression": f"device.attributes['{GPU_CLASS}'].productName"
                                   f".startsWith('{prefix}')"}}]


def test_first_available_falls_through_an_absent_gpu_model_and_binds_the_gang_whole(
        dra_box: Sandbox, ns: str) -> None:
    prefer_b200 = claim_template(ns, "prefer-b200", count=8)
    prefer_b200["spec"]["spec"]["devices"]["requests"] = [{"name": "gpus", "firstAvailable": [
        {"name": "b200", "deviceClassName": GPU_CLASS, "count": 8,
         "selectors": _product("NVIDIA B200")},
        {"name": "h100", "deviceClassName": GPU_CLASS, "count": 8,
         "selectors": _product(PRODUCT.split(" 80GB")[0])}]}]
    apply(dra_box, prefer_b200, jobset(ns, "train", pods=3, claim="prefer-b200"))
    conn = dra_box.connection()
    assert wait_until(lambda: len(running(of(pods_in(conn, ns), "train"))) == 3,
                      timeout=120), where(pods_in(conn, ns))
    pods = of(pods_in(conn, ns), "train")
    assert len({p["spec"]["nodeName"] for p in pods}) == 3
    for pod in pods:
        [made] = owned_claims(dra_box, ns, pod)
        results = made["status"]["allocation"]["devices"]["results"]
        assert [r["request"] for r in results] == ["gpus/h100"] * 8


def test_all_mode_pods_wait_whole_while_a_gpu_is_taken_then_take_a_node_each(
        dra_box: Sandbox, ns: str) -> None:
    every = claim_template(ns, "every", count=1)
    exactly = every["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    del exactly["count"]
    exactly["allocationMode"] = "All"
    apply(dra_box, claim_template(ns, "one", count=1), every,
          jobset(ns, "small", pods=1, claim="one"))
    conn = dra_box.connection()
    assert wait_until(lambda: len(running(of(pods_in(conn, ns), "small"))) == 1,
                      timeout=90), where(pods_in(conn, ns))
    # One GPU of one node taken: only 2 nodes have all 8 free, and the gang needs 3.
    apply(dra_box, jobset(ns, "whole-nodes", pods=3, claim="every"))
    assert wait_until(lambda: len(of(pods_in(conn, ns), "whole-nodes")) == 3, timeout=30)
    stays_unbound(dra_box, ns, seconds=10, claims_allocated=1, jobset="whole-nodes")
    gang = next(g for key, g in muster_gangs(dra_box).items() if key.endswith("/whole-nodes"))
    assert (gang["state"], gang["bound"]) == ("waiting", 0)

    kubectl(dra_box, "delete", "jobset", "small", "-n", ns, "--wait=false")
    assert wait_until(lambda: len(running(of(pods_in(conn, ns), "whole-nodes"))) == 3,
                      timeout=120), where(pods_in(conn, ns))
    pods = of(pods_in(conn, ns), "whole-nodes")
    assert len({p["spec"]["nodeName"] for p in pods}) == 3
    for pod in pods:
        [made] = owned_claims(dra_box, ns, pod)
        assert len(made["status"]["allocation"]["devices"]["results"]) == 8
