"""Grove PodCliqueSets are cut as Grove cuts PodGangs: a base gang per PodCliqueSet replica and
a scaled gang per scaling-group replica above ``minAvailable``; each pod joins its own one.

Pods carry Grove's labels as the operator writes them (``grove.io/podclique`` is the
PodClique's full name, ``<pcs>-<r>-<clique>`` or ``<pcs>-<r>-<pcsg>-<j>-<clique>``).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from extender.core.model.objects import pod_from_api
from extender.core.model.values import Membership, WorkloadTree
from extender.core.workloads.cluster import read_tree
from extender.core.workloads.descriptor import DescriptorError, compile_descriptor
from extender.core.workloads.expressions import WorkloadError
from extender.core.workloads.membership import ObjectIndex, find_membership
from extender.core.workloads.workload import DEFAULT_LIMITS, resolve_workload
from extender.sandbox.controllers import children
from tests.unit.descriptors.examples import REPO, catalog

GROVE = "grove.io/v1alpha1"


def clique(name: str, replicas: int, *, gpus: int = 0, min_available: int | None = None,
           starts_after: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"roleName": name, "replicas": replicas, "podSpec": {"containers": [
        {"name": name, "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if starts_after:
        spec["startsAfter"] = starts_after
    return {"name": name, "spec": spec}


def pcs(*cliques: dict[str, Any], groups: list[dict[str, Any]] | None = None,
        replicas: int = 1, name: str = "llm") -> dict[str, Any]:
    template: dict[str, Any] = {"cliques": list(cliques)}
    if groups:
        template["podCliqueScalingGroups"] = groups
    return {"apiVersion": GROVE, "kind": "PodCliqueSet",
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}"},
            "spec": {"replicas": replicas, "template": template}}


def aggregated(*, replicas: int = 1, group_replicas: int = 3,
               min_available: int | None = None) -> dict[str, Any]:
    """One model instance is a leader and 3 workers; the scaling group runs several."""
    group: dict[str, Any] = {"name": "model", "cliqueNames": ["leader", "worker"],
                             "replicas": group_replicas}
    if min_available is not None:
        group["minAvailable"] = min_available
    return pcs(clique("frontend", 2), clique("leader", 1, gpus=8),
               clique("worker", 3, gpus=8, starts_after=["leader"]),
               groups=[group], replicas=replicas)


def resolve(obj: dict[str, Any]) -> WorkloadTree:
    return resolve_workload(obj, catalog().require(obj))


def gangs(tree: WorkloadTree) -> list[tuple[str, int, int]]:
    return [(g.key, g.pods, g.min_member) for g in tree.gangs]


def grove_pod(obj: dict[str, Any], clique_name: str, *, replica: int,
              group: tuple[str, int] | None = None, owned: bool = True,
              sub_label: bool = True) -> dict[str, Any]:
    """A pod as the Grove operator labels it."""
    pcs_name = obj["metadata"]["name"]
    labels = {"app.kubernetes.io/part-of": pcs_name, "app.kubernetes.io/managed-by":
              "grove-operator", "grove.io/podcliqueset-replica-index": str(replica)}
    if group is None:
        pclq = f"{pcs_name}-{replica}-{clique_name}"
        labels["grove.io/podgang"] = f"{pcs_name}-{replica}"
    else:
        pcsg = f"{pcs_name}-{replica}-{group[0]}"
        pclq = f"{pcsg}-{group[1]}-{clique_name}"
        labels["grove.io/podcliquescalinggroup"] = pcsg
        if sub_label:
            labels["grove.io/podcliquescalinggroup-replica-index"] = str(group[1])
    labels["grove.io/podclique"] = pclq
    meta: dict[str, Any] = {"name": f"{pclq}-x", "namespace": "ml", "uid": f"uid-{pclq}",
                            "labels": labels}
    if owned:
        meta["ownerReferences"] = [{"apiVersion": GROVE, "kind": "PodClique", "name": pclq,
                                    "uid": f"uid-{pclq}", "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "c"}]}}


def membership(obj: dict[str, Any], pod: dict[str, Any],
               extra: list[dict[str, Any]] | None = None) -> Membership | None:
    objects = [obj, *(extra or [])]
    trees = [read_tree(o, catalog(), DEFAULT_LIMITS) for o in objects]
    assert not [t for t in trees if isinstance(t, str)]  # each resolves or is part of another
    return find_membership(pod_from_api(pod), objects=ObjectIndex.of(objects), catalog=catalog(),
                           workloads={t.ref.key: t for t in trees if isinstance(t, WorkloadTree)})


# ------------------------------------------------------------------ gangs


def test_scaling_group_replicas_above_min_available_are_scaled_gangs_of_their_own() -> None:
    tree = resolve(aggregated())
    assert (tree.pods, tree.gpus) == (2 + 3 * 4, 3 * 4 * 8)
    assert gangs(tree) == [("ml/llm/0", 2 + 4, 6), ("ml/llm/0/model-1", 4, 4),
                           ("ml/llm/0/model-2", 4, 4)]
    scaled = tree.gangs[1]
    assert [(m.role, m.count, m.min_count) for m in scaled.members] == [
        ("leader", 1, 1), ("worker", 3, 3)]
    assert tree.edges == (("leader", "worker"),)


def test_a_pcs_with_two_replicas_has_two_base_gangs_each_with_its_scaled_gangs() -> None:
    tree = resolve(aggregated(replicas=2, group_replicas=2))
    assert gangs(tree) == [("ml/llm/0", 6, 6), ("ml/llm/0/model-1", 4, 4),
                           ("ml/llm/1", 6, 6), ("ml/llm/1/model-1", 4, 4)]
    assert tree.pods == 2 * (2 + 2 * 4)


def test_a_pcs_without_scaling_groups_and_two_replicas_has_two_base_gangs() -> None:
    tree = resolve(pcs(clique("prefill", 3), clique("decode", 2), replicas=2))
    assert gangs(tree) == [("ml/llm/0", 5, 5), ("ml/llm/1", 5, 5)]


def test_min_available_equal_to_replicas_puts_every_copy_in_the_base_gang() -> None:
    tree = resolve(aggregated(group_replicas=2, min_available=2))
    assert gangs(tree) == [("ml/llm/0", 2 + 2 * 4, 10)]


def test_min_available_above_replicas_is_capped_at_replicas() -> None:
    tree = resolve(aggregated(group_replicas=2, min_available=5))
    assert gangs(tree) == [("ml/llm/0", 10, 10)]


def test_a_standalone_clique_needs_only_its_min_available_pods() -> None:
    tree = resolve(pcs(clique("frontend", 4, min_available=1), clique("router", 2)))
    assert gangs(tree) == [("ml/llm/0", 6, 1 + 2)]
    assert tree.gangs[0].member("frontend").min_count == 1  # type: ignore[union-attr]


def test_a_scaled_gang_needs_its_member_cliques_min_available() -> None:
    obj = pcs(clique("leader", 1), clique("worker", 4, min_available=2),
              groups=[{"name": "model", "cliqueNames": ["leader", "worker"], "replicas": 2}])
    assert gangs(resolve(obj)) == [("ml/llm/0", 5, 3), ("ml/llm/0/model-1", 5, 3)]


def test_min_available_defaults_to_replicas_and_group_min_available_to_one() -> None:
    obj = pcs(clique("leader", 1), clique("worker", 2),
              groups=[{"name": "model", "cliqueNames": ["leader", "worker"], "replicas": 2}])
    assert gangs(resolve(obj)) == [("ml/llm/0", 3, 3), ("ml/llm/0/model-1", 3, 3)]


def test_two_scaling_groups_scale_apart() -> None:
    obj = pcs(clique("pleader", 1), clique("pworker", 4), clique("dleader", 1),
              clique("dworker", 2),
              groups=[{"name": "prefill", "cliqueNames": ["pleader", "pworker"], "replicas": 2},
                      {"name": "decode", "cliqueNames": ["dleader", "dworker"], "replicas": 3,
                       "minAvailable": 2}])
    assert gangs(resolve(obj)) == [("ml/llm/0", 5 + 2 * 3, 11), ("ml/llm/0/prefill-1", 5, 5),
                                   ("ml/llm/0/decode-2", 3, 3)]


def test_row_69_is_a_base_podgang_and_a_scaled_podgang_named_like_grove_names_them() -> None:
    path = REPO.parent / "shared" / "examples" / "grove" / (
        "grove__operator__samples__user-guide__01_core-concepts__multi-node-aggregated.yaml")
    tree = resolve(yaml.safe_load(path.read_text()))
    # Grove: PodGang multinode-aggregated-0 and multinode-aggregated-0-model-instance-0 (its
    # scaled gangs count from 0 above minAvailable; Muster keys them by the PCSG replica).
    assert gangs(tree) == [("default/multinode-aggregated/0", 4, 4),
                           ("default/multinode-aggregated/0/model-instance-1", 4, 4)]


# ------------------------------------------------------------------ membership


def test_a_pod_of_a_scaled_replica_joins_its_scaled_gang_not_the_base() -> None:
    obj = aggregated()
    for j, want in ((0, "ml/llm/0"), (1, "ml/llm/0/model-1"), (2, "ml/llm/0/model-2")):
        for name in ("leader", "worker"):
            m = membership(obj, grove_pod(obj, name, replica=0, group=("model", j)))
            assert m is not None
            assert (m.workload.key, m.role, m.replica, m.gang) == (
                "PodCliqueSet/ml/llm", name, 0, want)


def test_a_standalone_clique_pod_joins_the_base_gang_of_its_pcs_replica() -> None:
    obj = aggregated(replicas=2)
    m = membership(obj, grove_pod(obj, "frontend", replica=1))
    assert m is not None
    assert (m.role, m.gang) == ("frontend", "ml/llm/1")


def test_scaled_pods_of_the_second_pcs_replica_join_that_replicas_scaled_gang() -> None:
    obj = aggregated(replicas=2, group_replicas=2)
    m = membership(obj, grove_pod(obj, "worker", replica=1, group=("model", 1)))
    assert m is not None and m.gang == "ml/llm/1/model-1"


def test_the_owner_chain_through_podclique_and_scaling_group_finds_the_pcs() -> None:
    obj = aggregated()
    pcsg = {"apiVersion": GROVE, "kind": "PodCliqueScalingGroup",
            "metadata": {"name": "llm-0-model", "namespace": "ml", "ownerReferences": [
                {"apiVersion": GROVE, "kind": "PodCliqueSet", "name": "llm", "uid": "uid-llm",
                 "controller": True}]}}
    pclq = {"apiVersion": GROVE, "kind": "PodClique",
            "metadata": {"name": "llm-0-model-2-worker", "namespace": "ml", "ownerReferences": [
                {"apiVersion": GROVE, "kind": "PodCliqueScalingGroup", "name": "llm-0-model",
                 "uid": "u", "controller": True}]}}
    pod = grove_pod(obj, "worker", replica=0, group=("model", 2))
    pod["metadata"]["labels"].pop("app.kubernetes.io/part-of")
    m = membership(obj, pod, extra=[pcsg, pclq])
    assert m is not None and (m.workload.key, m.gang) == ("PodCliqueSet/ml/llm",
                                                          "ml/llm/0/model-2")


def test_the_longest_clique_name_the_podclique_name_ends_with_is_the_role() -> None:
    obj = pcs(clique("a", 1), clique("b-a", 1))
    m = membership(obj, grove_pod(obj, "b-a", replica=0))
    assert m is not None and (m.role, m.gang) == ("b-a", "ml/llm/0")


def test_a_scaled_role_pod_that_does_not_say_its_scaling_group_replica_joins_no_gang() -> None:
    obj = aggregated()
    m = membership(obj, grove_pod(obj, "worker", replica=0, group=("model", 1), sub_label=False))
    assert m is not None and (m.role, m.gang) == ("worker", None)


def test_without_scaled_gangs_a_pod_need_not_say_its_scaling_group_replica() -> None:
    obj = aggregated(group_replicas=2, min_available=2)
    m = membership(obj, grove_pod(obj, "worker", replica=0, group=("model", 1), sub_label=False))
    assert m is not None and m.gang == "ml/llm/0"


def test_a_scaling_group_replica_beyond_the_written_replicas_joins_no_gang() -> None:
    obj = aggregated(group_replicas=2)
    m = membership(obj, grove_pod(obj, "worker", replica=0, group=("model", 5)))
    assert m is not None and m.gang is None


def test_sandbox_pods_carry_the_labels_that_put_them_in_their_gangs() -> None:
    obj = aggregated(replicas=2, group_replicas=3)
    tree = resolve(obj)
    _, pods = children(obj, tree, catalog().require(obj))
    assert len(pods) == tree.pods
    joined: dict[tuple[str | None, str], int] = {}
    for pod in pods:
        pod["metadata"]["ownerReferences"][0]["uid"] = "uid-llm"
        m = membership(obj, pod)
        assert m is not None
        joined[(m.gang, m.role)] = joined.get((m.gang, m.role), 0) + 1
    assert joined == {(g.key, mem.role): mem.count for g in tree.gangs for mem in g.members}


# ------------------------------------------------------------------ the format


def descriptor_doc() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((REPO / "descriptors" / "podcliqueset.yaml").read_text())
    return doc


@pytest.mark.parametrize(("edit", "path", "words"), [
    (lambda s: s["gangs"].update(policy="replica"), "spec.roles[0].subReplicas",
     "only with spec.gangs.policy baseAndScaled"),
    (lambda s: s["pods"].pop("subReplica"), "spec.pods.subReplica.label",
     "a pod must say which sub-replica"),
    (lambda s: s["pods"].pop("replica"), "spec.pods.replica.label",
     "required with gang policy baseAndScaled"),
    (lambda s: s["roles"][0]["subReplicas"].pop("base"), "spec.roles[0].subReplicas.base",
     "required"),
    (lambda s: s["roles"][0]["subReplicas"].update(count="two"),
     "spec.roles[0].subReplicas.count", "expected an integer or a count expression"),
    (lambda s: s["roles"][0]["subReplicas"].update(group={"path": "$.[["}),
     "spec.roles[0].subReplicas.group.path", "not a valid JSONPath"),
    (lambda s: s["roles"][0]["subReplicas"].update(size=2), "spec.roles[0].subReplicas.size",
     "unknown field"),
    (lambda s: s["roles"][0].update(minPodsPerReplica=[1]), "spec.roles[0].minPodsPerReplica",
     "expected an integer or a count expression"),
    (lambda s: s["pods"]["role"].update(match="prefix"), "spec.pods.role.match",
     "unknown match 'prefix'"),
], ids=["sub-replicas-under-another-policy", "no-sub-replica-label", "no-replica-label",
        "no-base", "count-not-a-count", "group-bad-path", "unknown-sub-replicas-field",
        "min-pods-not-a-count", "unknown-role-match"])
def test_a_malformed_base_and_scaled_descriptor_names_the_field(edit: Any, path: str,
                                                                words: str) -> None:
    doc = descriptor_doc()
    edit(doc["spec"])
    with pytest.raises(DescriptorError) as err:
        compile_descriptor(doc)
    assert err.value.path == path
    assert words in err.value.message


def test_a_sub_replica_label_under_another_policy_is_an_error() -> None:
    doc = yaml.safe_load((REPO / "descriptors" / "leaderworkerset.yaml").read_text())
    doc["spec"]["pods"]["subReplica"] = {"label": "x"}
    with pytest.raises(DescriptorError, match=r"only with spec\.gangs\.policy baseAndScaled"):
        compile_descriptor(doc)


def test_replicas_that_do_not_come_in_blocks_of_sub_replicas_are_a_workload_error() -> None:
    doc = descriptor_doc()
    role = doc["spec"]["roles"][0]
    role["replicas"] = {"sum": [copy.deepcopy(role["replicas"]), 1]}
    descriptor = compile_descriptor(doc)
    with pytest.raises(WorkloadError, match=r"PodCliqueSet/llm: role 'leader'.*"
                                            r"subReplicas.count: 4 replicas do not come in "
                                            r"blocks of 3"):
        resolve_workload(aggregated(), descriptor)
