"""``gangGroup``: under gang policy ``replica``, one gang per replica of each group of roles.

A workload running two LeaderWorkerSets (KServe's decode and prefill) has one gang per group
of each: ``ns/name/group-<i>`` for roles without a ``gangGroup``, ``ns/name/<gangGroup>-<i>``
for the others, each holding only its own group's roles. Compiled descriptors, resolution and
the key a pod joins are read from the same rule.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.core.model.objects import pod_from_api
from extender.core.model.values import GangKey, WorkloadRef
from extender.core.workloads.catalog import Catalog
from extender.core.workloads.descriptor import DescriptorError, GangPolicy, compile_descriptor
from extender.core.workloads.gangs import member_gang_key
from extender.core.workloads.membership import ObjectIndex, find_membership
from extender.core.workloads.workload import resolve_workload
from tests.unit.descriptors.test_membership_and_snapshot import make_pod


def two_sets(*, policy: str = "replica", prefill_group: object = "prefill",
             extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A kind of two leader/worker sets: ``decode`` (spec.replicas groups of spec.size) and
    ``prefill`` (spec.prefill.replicas groups of spec.prefill.size)."""
    def role(name: str, replicas: str, per: object, **more: Any) -> dict[str, Any]:
        return {"name": name, "replicas": {"path": replicas, "default": 1},
                "podsPerReplica": per, "template": {"podSpec": "$.spec.pod"}, **more}

    group = {} if prefill_group is None else {"gangGroup": prefill_group}
    return {
        "apiVersion": "muster.dev/v1alpha1", "kind": "WorkloadDescriptor",
        "metadata": {"name": "pair"},
        "spec": {
            "target": {"group": "example.com", "kind": "Pair", "versions": ["v1"]},
            "roles": [
                role("leader", "$.spec.replicas", 1),
                role("worker", "$.spec.replicas", {"sum": [{"path": "$.spec.size"}, -1]}),
                role("prefill-leader", "$.spec.prefill.replicas", 1, **group),
                role("prefill-worker", "$.spec.prefill.replicas",
                     {"sum": [{"path": "$.spec.prefill.size"}, -1]}, **group),
            ],
            "gangs": {"policy": policy},
            "pods": {"workloadLabel": "example.com/pair",
                     "role": {"labels": ["example.com/role"]},
                     "replica": {"label": "example.com/group"}},
            **(extra or {}),
        },
    }


PAIR = {"apiVersion": "example.com/v1", "kind": "Pair",
        "metadata": {"name": "llm", "namespace": "ml"},
        "spec": {"replicas": 2, "size": 3, "prefill": {"replicas": 3, "size": 2},
                 "pod": {"containers": [{"name": "c",
                                         "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}


def gangs_of(descriptor: dict[str, Any], obj: dict[str, Any] = PAIR,
             ) -> list[tuple[str, dict[str, int]]]:
    tree = resolve_workload(obj, compile_descriptor(descriptor))
    return [(g.key, {m.role: m.count for m in g.members}) for g in tree.gangs]


def test_two_groups_give_one_gang_per_replica_of_each_holding_only_its_own_roles() -> None:
    assert gangs_of(two_sets()) == [
        ("ml/llm/group-0", {"leader": 1, "worker": 2}),
        ("ml/llm/group-1", {"leader": 1, "worker": 2}),
        ("ml/llm/prefill-0", {"prefill-leader": 1, "prefill-worker": 1}),
        ("ml/llm/prefill-1", {"prefill-leader": 1, "prefill-worker": 1}),
        ("ml/llm/prefill-2", {"prefill-leader": 1, "prefill-worker": 1}),
    ]


def test_each_groups_gang_needs_all_of_its_pods_and_no_pod_of_the_other_group() -> None:
    tree = resolve_workload(PAIR, compile_descriptor(two_sets()))
    assert [(g.pods, g.min_member, g.gpus) for g in tree.gangs] == [
        (3, 3, 24), (3, 3, 24), (2, 2, 16), (2, 2, 16), (2, 2, 16)]
    assert tree.pods == 2 * 3 + 3 * 2


def test_without_gang_groups_every_role_shares_the_gangs_of_its_replica_index() -> None:
    # The policy as it always was: replica i of every role in ns/name/group-i.
    assert gangs_of(two_sets(prefill_group=None)) == [
        ("ml/llm/group-0", {"leader": 1, "worker": 2, "prefill-leader": 1,
                            "prefill-worker": 1}),
        ("ml/llm/group-1", {"leader": 1, "worker": 2, "prefill-leader": 1,
                            "prefill-worker": 1}),
        ("ml/llm/group-2", {"prefill-leader": 1, "prefill-worker": 1}),
    ]


def test_the_default_groups_own_name_is_the_same_as_no_group() -> None:
    assert gangs_of(two_sets(prefill_group="group")) == gangs_of(two_sets(prefill_group=None))


def test_a_group_with_no_pods_has_no_gang() -> None:
    obj = {**PAIR, "spec": {**PAIR["spec"], "prefill": {"replicas": 0, "size": 2}}}
    assert [key for key, _ in gangs_of(two_sets(), obj)] == ["ml/llm/group-0", "ml/llm/group-1"]


@pytest.mark.parametrize("policy", ["workload", "role", "roleReplica", "none"])
def test_a_gang_group_under_another_policy_is_refused_naming_the_role(policy: str) -> None:
    with pytest.raises(DescriptorError) as err:
        compile_descriptor(two_sets(policy=policy))
    assert err.value.path == "spec.roles[2].gangGroup"
    assert f"policy replica, not {policy}" in str(err.value)


@pytest.mark.parametrize("name", ["Prefill", "pre fill", "-prefill", "x" * 64, ""])
def test_a_gang_group_that_cannot_name_a_gang_is_refused(name: str) -> None:
    with pytest.raises(DescriptorError) as err:
        compile_descriptor(two_sets(prefill_group=name))
    assert err.value.path == "spec.roles[2].gangGroup"


def test_a_gang_group_must_be_a_string() -> None:
    with pytest.raises(DescriptorError) as err:
        compile_descriptor(two_sets(prefill_group={"path": "$.x"}))
    assert err.value.path == "spec.roles[2].gangGroup"


def test_a_pod_joins_the_gang_of_its_own_group_and_replica() -> None:
    descriptor = compile_descriptor(two_sets())
    tree = resolve_workload(PAIR, descriptor)
    roles = {r.name: r for r in tree.roles}
    ref = WorkloadRef(api_version="example.com/v1", kind="Pair", namespace="ml", name="llm")
    assert member_gang_key(ref, GangPolicy.REPLICA, roles["prefill-worker"],
                           replica=2) == GangKey("ml/llm/prefill-2")
    assert member_gang_key(ref, GangPolicy.REPLICA, roles["worker"],
                           replica=1) == GangKey("ml/llm/group-1")

    workloads = {tree.ref.key: tree}
    catalog = Catalog.of([descriptor])

    def gang(role: str, group: str) -> str | None:
        pod = make_pod(f"{role}-{group}", labels={"example.com/pair": "llm",
                                                  "example.com/role": role,
                                                  "example.com/group": group})
        found = find_membership(pod_from_api(pod), objects=ObjectIndex.of([]), catalog=catalog,
                                workloads=workloads)
        assert found is not None
        return found.gang

    assert gang("prefill-leader", "1") == "ml/llm/prefill-1"
    assert gang("leader", "1") == "ml/llm/group-1"
    # Decode has two groups; a prefill index beyond them is still a prefill gang.
    assert gang("prefill-worker", "2") == "ml/llm/prefill-2"
    assert gang("worker", "2") is None


def test_followers_split_from_a_grouped_role_stay_in_its_group() -> None:
    spec = two_sets()
    spec["spec"]["roles"][2:] = [{
        "name": "prefill", "replicas": {"path": "$.spec.prefill.replicas"},
        "podsPerReplica": {"path": "$.spec.prefill.size"}, "gangGroup": "prefill",
        "template": {"podSpec": "$.spec.pod"},
        "createdAfter": {"leader": True, "status": "Scheduled"}}]
    spec["spec"]["pods"]["leader"] = {"key": "example.com/index"}
    assert gangs_of(spec)[2:] == [
        (f"ml/llm/prefill-{i}", {"prefill": 1, "prefill/followers": 1}) for i in range(3)]
