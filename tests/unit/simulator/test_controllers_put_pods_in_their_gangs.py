"""The simulator's controller model puts every pod it creates in the gang the tree says.

A Grove scaling group's copies are split between a base PodGang and scaled ones: a pod joining
the wrong one (or none) would let the replay bind part of a gang, or never bind it at all.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from extender.core.workloads.workload import resolve_workload
from extender.files.catalog import packaged_catalog
from simulator.controllers import create_pods, gang_policy

EXAMPLES = Path(__file__).resolve().parents[4] / "shared" / "examples"


@pytest.mark.parametrize("example", [
    "grove/grove__operator__samples__user-guide__01_core-concepts__multi-node-aggregated.yaml",
    "grove/grove__operator__samples__user-guide__01_core-concepts__multi-node-disaggregated"
    ".yaml",
    "lws/lws__docs__examples__vllm__GPU__lws.yaml",
    "jobset/jobset__site__static__examples__simple__paralleljobs.yaml",
])
def test_every_gang_gets_exactly_its_pods(example: str) -> None:
    catalog = packaged_catalog()
    [obj] = [d for d in yaml.safe_load_all((EXAMPLES / example).read_text())
             if isinstance(d, dict) and catalog.for_object(d) is not None]
    obj.setdefault("metadata", {}).setdefault("namespace", "default")
    descriptor = catalog.require(obj)
    tree = resolve_workload(obj, descriptor)
    made = create_pods(tree, policy=gang_policy(tree, catalog), now=0.0)
    by_gang = Counter((m.gang, m.role) for _, m in made if m.gang is not None)
    wanted = Counter({(g.key, m.role): m.count for g in tree.gangs for m in g.members})
    assert by_gang == wanted
    assert len(made) == tree.pods


@pytest.mark.parametrize(("size", "sub", "want"), [
    # worker-index 1..size-1 (the simulator's worker index 0..size-2), as LWS numbers them
    (4, 2, ["0", "1", "1"]),     # the leader and worker 1; workers 2-3
    (5, 2, ["0", "0", "1", "1"]),  # 4 workers divide by 2: the leader is extra in subgroup 0
])
def test_an_lws_groups_pods_get_the_subgroup_lws_labels_them_with(
        size: int, sub: int, want: list[str]) -> None:
    catalog = packaged_catalog()
    container = {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}
    obj = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
           "metadata": {"name": "lws", "namespace": "ml", "annotations": {
               "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology": "rack"}},
           "spec": {"replicas": 1, "leaderWorkerTemplate": {
               "size": size, "subGroupPolicy": {"subGroupSize": sub},
               "workerTemplate": {"spec": {"containers": [container]}}}}}
    tree = resolve_workload(obj, catalog.require(obj))
    made = create_pods(tree, policy=gang_policy(tree, catalog), now=0.0)
    assert [m.subgroup for _, m in made if m.role == "leader"] == ["0"]
    assert [m.subgroup for _, m in made if m.role == "worker"] == want
