"""LeaderWorkerSet ``subgroup-exclusive-topology`` as LWS v0.7.0's pod webhook numbers the
subgroups (``getSubGroupIndex``): pods in slices of ``subGroupSize``, the leader first; when
the workers alone divide by the size, the leader is an extra pod in subgroup 0. Each subgroup
keeps to its own domain; what Muster cannot keep is a warning, never a stricter rule."""

from __future__ import annotations

from typing import Any

import pytest

from extender.core.model.objects import pod_from_api
from extender.core.model.values import GangKey, SubgroupKind, SubgroupTopology, WorkloadTree
from extender.core.workloads.descriptor import DescriptorError, compile_descriptor
from extender.core.workloads.membership import ObjectIndex, find_membership
from extender.core.workloads.workload import resolve_workload
from tests.unit.descriptors.examples import catalog

SUBGROUP = "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology"
EXCLUSIVE = "leaderworkerset.sigs.k8s.io/exclusive-topology"
LABEL = "leaderworkerset.sigs.k8s.io/subgroup-index"


def lws(size: int, sub: int, policy: str | None = None, **annotations: str) -> dict[str, Any]:
    group: dict[str, Any] = {"subGroupSize": sub}
    if policy is not None:
        group["subGroupPolicyType"] = policy
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "lws", "namespace": "ml", "annotations": annotations},
            "spec": {"replicas": 2, "leaderWorkerTemplate": {
                "size": size, "subGroupPolicy": group,
                "workerTemplate": {"spec": {"containers": [
                    {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}}


def resolve(obj: dict[str, Any]) -> WorkloadTree:
    return resolve_workload(obj, catalog().require(obj))


@pytest.mark.parametrize(("size", "sub", "kinds"), [
    # 4 pods in 2s: the leader and worker 1, then workers 2-3
    (4, 2, (SubgroupKind("leader", (("leader", 1), ("worker", 1)), 1, ("0",)),
            SubgroupKind("worker", (("worker", 2),), 1, ("1",)))),
    # 5 pods, 4 workers in 2s: the leader is extra in subgroup 0 with workers 1-2
    (5, 2, (SubgroupKind("leader", (("leader", 1), ("worker", 2)), 1, ("0",)),
            SubgroupKind("worker", (("worker", 2),), 1, ("1",)))),
    # subGroupSize 1: the leader with worker 1, then one worker each
    (4, 1, (SubgroupKind("leader", (("leader", 1), ("worker", 1)), 1, ("0",)),
            SubgroupKind("worker", (("worker", 1),), 2, ("1", "2")))),
    # one subgroup holding the whole group
    (4, 4, (SubgroupKind("leader", (("leader", 1), ("worker", 3)), 1, ("0",)),)),
])
def test_each_group_is_cut_into_subgroups_as_lws_numbers_them(
        size: int, sub: int, kinds: tuple[SubgroupKind, ...]) -> None:
    tree = resolve(lws(size, sub, **{SUBGROUP: "rack"}))
    assert len(tree.gangs) == 2 and tree.warnings == ()
    for gang in tree.gangs:
        assert gang.subgroups == SubgroupTopology("rack", kinds, label=LABEL)
        assert gang.topology is None and gang.min_member == size


def test_leader_excluded_keeps_the_group_to_no_domain_and_says_so() -> None:
    tree = resolve(lws(5, 2, "LeaderExcluded", **{SUBGROUP: "rack"}))
    assert all(g.subgroups is None and g.topology is None for g in tree.gangs)
    assert any("LeaderExcluded" in w for w in tree.warnings)


def test_with_the_groups_own_exclusive_domain_the_group_keeps_to_it_and_says_so() -> None:
    tree = resolve(lws(4, 2, **{SUBGROUP: "block", EXCLUSIVE: "rack"}))
    for gang in tree.gangs:
        assert gang.subgroups is None
        assert gang.topology is not None and gang.topology.key == "rack"
        assert gang.topology.exclusive
    assert any("each subgroup's own block domain is not planned" in w for w in tree.warnings)


def test_without_the_annotation_no_subgroup_keeps_to_a_domain() -> None:
    tree = resolve(lws(4, 2))
    assert all(g.subgroups is None and g.topology is None for g in tree.gangs)
    assert tree.warnings == ()


def test_a_pod_says_its_subgroup_in_its_membership() -> None:
    obj = lws(4, 2, **{SUBGROUP: "rack"})
    tree = resolve(obj)
    pod = pod_from_api({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "lws-1-3", "namespace": "ml", "uid": "u",
        "labels": {"leaderworkerset.sigs.k8s.io/name": "lws",
                   "leaderworkerset.sigs.k8s.io/group-index": "1",
                   "leaderworkerset.sigs.k8s.io/worker-index": "3", LABEL: "1"}},
        "spec": {"containers": [{"name": "c"}]}})
    found = find_membership(pod, objects=ObjectIndex.of([obj]), catalog=catalog(),
                            workloads={tree.ref.key: tree})
    assert found is not None
    assert (found.role, found.replica, found.subgroup, found.gang) == (
        "worker", 1, "1", GangKey("ml/lws/group-1"))


def _descriptor(topology: object, pods: object = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"target": {"group": "x.dev", "kind": "X", "versions": ["v1"]},
                            "roles": [{"name": "lead"}, {"name": "w"}],
                            "gangs": {"topology": [topology]}}
    if pods is not None:
        spec["pods"] = pods
    return {"apiVersion": "muster.dev/v1alpha1", "kind": "WorkloadDescriptor",
            "metadata": {"name": "x"}, "spec": spec}


RULE = {"required": "rack", "exclusive": True, "per": "subgroup",
        "subgroups": {"size": 2, "leader": "lead"}}
PODS = {"subgroup": {"label": "sg"}}


@pytest.mark.parametrize(("topology", "pods", "where"), [
    (RULE, None, r"spec\.pods\.subgroup\.label"),
    ({**RULE, "subgroups": {"size": 2, "leader": "boss"}}, PODS,
     r"topology\[0\]\.subgroups\.leader"),
    ({**RULE, "subgroups": {"leader": "lead"}}, PODS, r"topology\[0\]\.subgroups\.size"),
    ({k: v for k, v in RULE.items() if k != "subgroups"}, PODS, r"topology\[0\]\.subgroups"),
    ({**RULE, "exclusive": False}, PODS, r"topology\[0\]\.per"),
    ({"required": "rack", "subgroups": {"size": 2, "leader": "lead"}}, PODS,
     r"topology\[0\]\.subgroups"),
])
def test_a_bad_per_subgroup_rule_names_its_field(topology: object, pods: object,
                                                 where: str) -> None:
    with pytest.raises(DescriptorError, match=where):
        compile_descriptor(_descriptor(topology, pods))


def test_a_good_per_subgroup_rule_compiles() -> None:
    compiled = compile_descriptor(_descriptor(RULE, PODS))
    (rule,) = compiled.gangs.topology
    assert rule.slices is not None and rule.slices.leader == "lead" and not rule.whole
    assert compiled.pods.subgroup_label == "sg"
