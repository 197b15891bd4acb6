"""KServe's serving shapes counted as its controller makes them (kserve aaac4e29).

An LLMInferenceService with multi-node decode and prefill is two LeaderWorkerSets
(``<name>-kserve-mn`` and ``<name>-kserve-mn-prefill``, ``workload_multi_node.go``): each LWS
group is one gang, decode's ``ns/name/group-<i>`` and prefill's ``ns/name/prefill-<i>``, sized
by its own ``parallelism`` (``ParallelismSpec.GetSize``). An InferenceService in ModelMesh
deployment mode gets no predictor from KServe, and without a transformer nothing at all
(``controller.go``). The fixtures in ``data/kserve`` are KServe's own samples (``SOURCE.txt``).
"""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.core.model.values import GangKey, WorkloadTree
from extender.core.workloads.cluster import build_snapshot
from extender.core.workloads.workload import resolve_workload
from simulator.controllers import create_pods, gang_policy
from tests.unit.cli.helpers import muster
from tests.unit.descriptors.examples import catalog

DATA = Path(__file__).resolve().parent / "data" / "kserve"
PD = DATA / "llmisvc-pd-multi-node-deepep-ht.yaml"
MODELMESH = DATA / "isvc-modelmesh-transformer.yaml"


def load(path: Path) -> dict[str, Any]:
    obj = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(obj, dict)
    return obj


def resolve(obj: dict[str, Any]) -> WorkloadTree:
    descriptor = catalog().for_object(obj)
    assert descriptor is not None
    return resolve_workload(obj, descriptor)


def gangs(tree: WorkloadTree) -> list[tuple[str, int, int, int]]:
    return [(g.key, g.pods, g.min_member, g.gpus) for g in tree.gangs]


# ---------------------------------------------------------------- LLMInferenceService


def test_kserves_pd_sample_is_two_leaderworkersets_of_two_pods_each_one_gang_per_group() -> None:
    # decode: 1 group of 16/8 = 2 pods, 8 GPUs each; prefill: the same, its own LWS.
    tree = resolve(load(PD))
    assert [(r.name, r.replicas, r.pods_per_replica, r.shape.gpus) for r in tree.roles] == [
        ("main", 1, 1, 8), ("worker", 1, 1, 8),
        ("prefill-leader", 1, 1, 8), ("prefill-worker", 1, 1, 8)]
    assert (tree.pods, tree.gpus) == (4, 32)
    assert gangs(tree) == [("default/deepseek-r1-0528-pd/group-0", 2, 2, 16),
                           ("default/deepseek-r1-0528-pd/prefill-0", 2, 2, 16)]


def test_each_side_has_one_gang_per_replica_of_its_own() -> None:
    obj = load(PD)
    obj["spec"]["replicas"] = 2
    obj["spec"]["prefill"]["replicas"] = 3
    tree = resolve(obj)
    assert (tree.pods, tree.gpus) == (2 * 2 + 3 * 2, 80)
    name = "default/deepseek-r1-0528-pd"
    assert gangs(tree) == [
        (f"{name}/group-0", 2, 2, 16), (f"{name}/group-1", 2, 2, 16),
        (f"{name}/prefill-0", 2, 2, 16), (f"{name}/prefill-1", 2, 2, 16),
        (f"{name}/prefill-2", 2, 2, 16)]
    decode, prefill = tree.gangs[0], tree.gangs[2]
    assert {m.role for m in decode.members} == {"main", "worker"}
    assert {m.role for m in prefill.members} == {"prefill-leader", "prefill-worker"}


def test_muster_describe_file_shows_both_sides_pods_gpus_and_gangs(
        capsys: pytest.CaptureFixture[str]) -> None:
    ran = muster(capsys, "describe", "-f", PD, "-o", "json")
    assert ran.code == 0, ran.err
    data = ran.json()
    assert [(r["name"], r["pods"], r["gpus"]) for r in data["roles"]] == [
        ("main", 1, 8), ("worker", 1, 8), ("prefill-leader", 1, 8), ("prefill-worker", 1, 8)]
    assert [(g["name"], g["minMember"], g["pods"], g["gpus"], g["roles"])
            for g in data["gangs"]] == [
        ("default/deepseek-r1-0528-pd/group-0", 2, 2, 16, {"main": 1, "worker": 1}),
        ("default/deepseek-r1-0528-pd/prefill-0", 2, 2, 16,
         {"prefill-leader": 1, "prefill-worker": 1})]
    assert (data["totals"]["pods"], data["totals"]["gpus"]) == (4, 32)


@pytest.mark.parametrize(("parallelism", "size"), [
    ({"data": 16, "dataLocal": 8}, 2),
    ({"data": 10, "dataLocal": 4}, 2),   # Go's integer division rounds down
    ({"data": 4}, 4),                     # dataLocal unset counts as 1
    ({"dataLocal": 8}, 1),                # data unset counts as 1; at least 1
    ({"data": 4, "pipeline": 3}, 4),      # data parallelism wins over pipeline
    ({"pipeline": 3, "tensor": 8}, 3),
    ({"tensor": 8}, 1),                   # no size: the LWS default, a leader alone
], ids=str)
def test_each_leaderworkerset_is_sized_by_its_own_parallelism(
        parallelism: dict[str, int], size: int) -> None:
    obj = load(PD)
    obj["spec"]["prefill"]["parallelism"] = parallelism
    tree = resolve(obj)
    per = {r.name: r.pods_per_replica for r in tree.roles}
    assert (per["main"], per["worker"]) == (1, 1)  # decode keeps its 16 / 8
    assert (per["prefill-leader"], per["prefill-worker"]) == (1, size - 1)
    assert [g.pods for g in tree.gangs] == [2, size]


@pytest.mark.parametrize("side", ["decode", "prefill"])
def test_a_group_without_a_leader_template_is_all_workers_as_kserve_labels_them(
        side: str) -> None:
    # LWS makes the leader from the worker template, and KServe's worker labels come with it.
    obj = load(PD)
    spec = obj["spec"] if side == "decode" else obj["spec"]["prefill"]
    del spec["template"]
    spec["replicas"] = 2
    tree = resolve(obj)
    worker = "worker" if side == "decode" else "prefill-worker"
    leader = "main" if side == "decode" else "prefill-leader"
    roles = {r.name: (r.replicas, r.pods_per_replica) for r in tree.roles}
    assert leader not in roles and roles[worker] == (2, 2)
    assert tree.pods == 2 + 2 * 2
    group = "group" if side == "decode" else "prefill"
    assert [(g.key, {m.role: m.count for m in g.members}) for g in tree.gangs
            if g.key.rsplit("/", 1)[1].startswith(group)] == [
        (f"default/deepseek-r1-0528-pd/{group}-{i}", {worker: 2}) for i in range(2)]


EXCLUSIVE = "leaderworkerset.sigs.k8s.io/exclusive-topology"


def stages(tree: WorkloadTree) -> dict[str, dict[str, int]]:
    return {g.key.rsplit("/", 1)[1]: {m.role: m.stage for m in g.members} for g in tree.gangs}


def test_exclusive_topology_passed_on_to_both_leaderworkersets_keeps_each_group_alone() -> None:
    # KServe copies leaderworkerset.sigs.k8s.io/* annotations onto both LWSs; LWS then keeps
    # each group alone in a domain and creates its workers once the leader has a node.
    obj = load(PD)
    obj["metadata"]["annotations"][EXCLUSIVE] = "nvidia.com/gpu.clique"
    tree = resolve(obj)
    assert stages(tree) == {"group-0": {"main": 0, "worker": 1},
                            "prefill-0": {"prefill-leader": 0, "prefill-worker": 1}}
    for gang in tree.gangs:
        assert gang.topology is not None
        assert (gang.topology.key, gang.topology.required, gang.topology.exclusive) == (
            "nvidia.com/gpu.clique", True, True)
    del obj["metadata"]["annotations"][EXCLUSIVE]
    tree = resolve(obj)
    assert stages(tree) == {"group-0": {"main": 0, "worker": 0},
                            "prefill-0": {"prefill-leader": 0, "prefill-worker": 0}}
    assert all(g.topology is None for g in tree.gangs)


def test_exclusive_groups_without_a_leader_template_stage_their_first_pod_first() -> None:
    obj = load(PD)
    obj["metadata"]["annotations"][EXCLUSIVE] = "nvidia.com/gpu.clique"
    del obj["spec"]["prefill"]["template"]
    tree = resolve(obj)
    assert stages(tree)["prefill-0"] == {"prefill-worker": 0, "prefill-worker/followers": 1}
    objects: list[dict[str, Any]] = [obj]
    component = "llminferenceservice-workload-worker-prefill"
    pods = [_kserve_pod(name, "sts", component, 0) for name in ("p-0", "p-0-1")]
    pods[0]["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] = "0"
    pods[1]["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] = "1"
    # The StatefulSet is not at hand: KServe's app.kubernetes.io/name finds the workload.
    obj["metadata"]["namespace"] = "default"
    snap = build_snapshot(nodes=[], pods=pods, objects=objects, catalog=catalog())
    prefill = GangKey("default/deepseek-r1-0528-pd/prefill-0")
    assert {uid: (m.role, m.gang) for uid, m in snap.memberships.items()} == {
        "uid-p-0": ("prefill-worker", prefill),
        "uid-p-0-1": ("prefill-worker/followers", prefill)}


def test_a_stopped_service_runs_nothing() -> None:
    obj = load(PD)
    obj["metadata"]["annotations"]["serving.kserve.io/stop"] = "True"
    tree = resolve(obj)
    assert (tree.roles, tree.pods, tree.gangs) == ((), 0, ())
    obj["metadata"]["annotations"]["serving.kserve.io/stop"] = "false"
    assert resolve(obj).pods == 4


def test_single_node_prefill_is_a_deployment_of_serving_replicas_in_no_gang() -> None:
    obj = load(PD)
    del obj["spec"]["prefill"]["worker"]
    obj["spec"]["prefill"]["replicas"] = 2
    tree = resolve(obj)
    assert [(r.name, r.pods) for r in tree.roles] == [("main", 1), ("worker", 1),
                                                        ("prefill", 2)]
    assert gangs(tree) == [("default/deepseek-r1-0528-pd/group-0", 2, 2, 16)]


def _owner(kind: str, name: str, api_version: str) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": f"uid-{name}",
            "controller": True}


def _kserve_pod(name: str, sts: str, component: str, group: int) -> dict[str, Any]:
    """A pod as LWS makes it from KServe's template: KServe's labels and LWS's group index."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": "default", "uid": f"uid-{name}",
        "labels": {"app.kubernetes.io/name": "deepseek-r1-0528-pd",
                   "app.kubernetes.io/part-of": "llminferenceservice",
                   "app.kubernetes.io/component": component,
                   "leaderworkerset.sigs.k8s.io/group-index": str(group)},
        "ownerReferences": [_owner("StatefulSet", sts, "apps/v1")]},
        "spec": {"containers": [{"name": "main",
                                 "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}


def test_kserves_pods_join_their_own_sides_gang_through_the_owner_chain() -> None:
    obj = load(PD)
    obj["metadata"]["namespace"] = "default"
    obj["spec"]["replicas"] = 2
    llm = ("LLMInferenceService", "deepseek-r1-0528-pd", "serving.kserve.io/v1alpha2")
    objects: list[dict[str, Any]] = [obj]
    for lws in ("deepseek-r1-0528-pd-kserve-mn", "deepseek-r1-0528-pd-kserve-mn-prefill"):
        objects.append({"apiVersion": "leaderworkerset.x-k8s.io/v1",
                        "kind": "LeaderWorkerSet", "metadata": {
                            "name": lws, "namespace": "default",
                            "ownerReferences": [_owner(*llm)]},
                        "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2}}})
        for group in (0, 1):
            for sts in (f"{lws}-{group}", f"{lws}-{group}-workers"):
                objects.append({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {
                    "name": sts, "namespace": "default", "ownerReferences": [
                        _owner("LeaderWorkerSet", lws, "leaderworkerset.x-k8s.io/v1")]}})
    component = "llminferenceservice-workload"
    pods = [
        _kserve_pod("d-1", "deepseek-r1-0528-pd-kserve-mn-1", f"{component}-leader", 1),
        _kserve_pod("d-1-1", "deepseek-r1-0528-pd-kserve-mn-1-workers", f"{component}-worker",
                    1),
        _kserve_pod("p-0", "deepseek-r1-0528-pd-kserve-mn-prefill-0",
                    f"{component}-leader-prefill", 0),
        _kserve_pod("p-0-1", "deepseek-r1-0528-pd-kserve-mn-prefill-0-workers",
                    f"{component}-worker-prefill", 0),
    ]
    snap = build_snapshot(nodes=[], pods=pods, objects=objects, catalog=catalog())
    # The LeaderWorkerSets are KServe's parts, not workloads of their own.
    assert list(snap.workloads) == ["LLMInferenceService/default/deepseek-r1-0528-pd"]
    found = {uid: (m.role, m.gang) for uid, m in snap.memberships.items()}
    assert found == {
        "uid-d-1": ("main", GangKey("default/deepseek-r1-0528-pd/group-1")),
        "uid-d-1-1": ("worker", GangKey("default/deepseek-r1-0528-pd/group-1")),
        "uid-p-0": ("prefill-leader", GangKey("default/deepseek-r1-0528-pd/prefill-0")),
        "uid-p-0-1": ("prefill-worker", GangKey("default/deepseek-r1-0528-pd/prefill-0")),
    }


def test_the_simulators_controller_puts_each_pod_in_its_own_sides_gang() -> None:
    obj = load(PD)
    obj["spec"]["replicas"] = 2
    obj["spec"]["prefill"]["replicas"] = 3
    tree = resolve(obj)
    made = create_pods(tree, policy=gang_policy(tree, catalog()), now=0.0)
    by_gang = Counter((m.gang, m.role) for _, m in made)
    assert by_gang == Counter({(g.key, m.role): m.count for g in tree.gangs for m in g.members})
    assert len(made) == tree.pods == 10


# ---------------------------------------------------------------- InferenceService


def test_kserves_modelmesh_sample_runs_its_transformer_and_no_predictor() -> None:
    tree = resolve(load(MODELMESH))
    assert [(r.name, r.pods) for r in tree.roles] == [("transformer", 1)]
    assert (tree.pods, tree.gangs) == (1, ())


def test_modelmesh_without_a_transformer_runs_nothing_not_even_an_explainer() -> None:
    obj = load(MODELMESH)
    obj["spec"]["explainer"] = copy.deepcopy(obj["spec"].pop("transformer"))
    obj["spec"]["predictor"]["workerSpec"] = {"tensorParallelSize": 2}
    tree = resolve(obj)
    assert (tree.roles, tree.pods) == ((), 0)


def test_modelmesh_with_a_transformer_runs_its_explainer_too() -> None:
    obj = load(MODELMESH)
    obj["spec"]["explainer"] = copy.deepcopy(obj["spec"]["transformer"])
    assert [r.name for r in resolve(obj).roles] == ["transformer", "explainer"]


@pytest.mark.parametrize(("annotation", "status", "predictor"), [
    ("ModelMesh", None, False),
    ("ModelMesh", "", False),            # an empty status mode is not recorded yet
    ("ModelMesh", "Standard", True),     # the mode recorded in status wins
    (None, "ModelMesh", False),
    ("Standard", None, True),
    (None, None, True),                  # the cluster default is not read: Standard
], ids=repr)
def test_the_deployment_mode_in_status_wins_over_the_annotation(
        annotation: str | None, status: str | None, predictor: bool) -> None:
    obj = load(MODELMESH)
    del obj["metadata"]["annotations"]
    if annotation is not None:
        obj["metadata"]["annotations"] = {"serving.kserve.io/deploymentMode": annotation}
    if status is not None:
        obj["status"] = {"deploymentMode": status}
    names = [r.name for r in resolve(obj).roles]
    assert names == (["predictor", "transformer"] if predictor else ["transformer"])
