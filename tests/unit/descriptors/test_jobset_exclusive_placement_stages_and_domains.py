"""JobSet ``exclusive-topology`` as the JobSet controller runs it (pod webhook, affinity
strategy): each Job's leader (completion index 0) is created first and its followers only once
the leader is scheduled, so the gang is staged leaders first; each Job keeps to a domain of its
own. Under the node-selector strategy every pod is created at once: no stages, no subgroups."""

from __future__ import annotations

from typing import Any

import pytest

from extender.core.model.objects import pod_from_api
from extender.core.model.values import GangKey, SubgroupKind, SubgroupTopology, WorkloadTree
from extender.core.workloads.descriptor import DescriptorError, compile_descriptor
from extender.core.workloads.membership import ObjectIndex, find_membership
from extender.core.workloads.workload import resolve_workload
from tests.unit.descriptors.examples import catalog

EXCLUSIVE = "alpha.jobset.sigs.k8s.io/exclusive-topology"
STRATEGY = "alpha.jobset.sigs.k8s.io/node-selector-strategy"


def rjob(name: str, replicas: int, n: int) -> dict[str, Any]:
    return {"name": name, "replicas": replicas, "template": {"spec": {
        "parallelism": n, "completions": n, "template": {"spec": {"containers": [
            {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}}


def jobset(*jobs: dict[str, Any], **annotations: str) -> dict[str, Any]:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "js", "namespace": "ml", "annotations": annotations},
            "spec": {"replicatedJobs": list(jobs)}}


def resolve(obj: dict[str, Any]) -> WorkloadTree:
    return resolve_workload(obj, catalog().require(obj))


def test_leaders_of_every_job_are_the_first_stage_and_followers_the_next() -> None:
    tree = resolve(jobset(rjob("workers", 2, 4), rjob("ps", 1, 1), **{EXCLUSIVE: "rack"}))
    assert [(r.name, r.replicas, r.pods_per_replica, r.created_after) for r in tree.roles] == [
        ("workers", 2, 1, ()),
        ("workers/followers", 2, 3, (("workers", "Scheduled"),)),
        ("ps", 1, 1, ())]  # a Job of one pod has no followers
    (gang,) = tree.gangs
    assert {m.role: (m.count, m.stage) for m in gang.members} == {
        "workers": (2, 0), "workers/followers": (6, 1), "ps": (1, 0)}
    assert gang.min_member == 9 and gang.topology is None
    assert ("workers", "workers/followers") in tree.edges
    assert tree.warnings == ()


def test_each_job_is_a_subgroup_that_keeps_to_its_own_domain_of_the_annotations_key() -> None:
    (gang,) = resolve(jobset(rjob("workers", 3, 2), rjob("ps", 1, 1),
                             **{EXCLUSIVE: "example.com/rack"})).gangs
    assert gang.subgroups == SubgroupTopology("example.com/rack", (
        SubgroupKind("workers", (("workers", 1), ("workers/followers", 1)), 3),
        SubgroupKind("ps", (("ps", 1),), 1)))
    assert gang.subgroups.count == 4


def test_the_node_selector_strategy_creates_every_pod_at_once_and_keeps_the_warning() -> None:
    tree = resolve(jobset(rjob("workers", 2, 4), **{EXCLUSIVE: "rack", STRATEGY: "true"}))
    assert [r.name for r in tree.roles] == ["workers"]
    (gang,) = tree.gangs
    assert gang.subgroups is None and gang.last_stage == 0
    assert any("node-selector strategy" in w for w in tree.warnings)


def test_without_the_annotation_a_jobset_is_one_unstaged_gang() -> None:
    tree = resolve(jobset(rjob("workers", 2, 4)))
    assert [r.name for r in tree.roles] == ["workers"]
    assert tree.gangs[0].subgroups is None and tree.gangs[0].last_stage == 0


def test_a_bad_label_key_in_the_annotation_is_refused_naming_the_rule() -> None:
    with pytest.raises(Exception, match=r"spec\.gangs\.topology\[0\].*not a label key"):
        resolve(jobset(rjob("workers", 2, 4), **{EXCLUSIVE: "bad key!"}))


def _pod(name: str, index: str, job_index: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": "ml", "uid": f"uid-{name}",
        "labels": {"jobset.sigs.k8s.io/jobset-name": "js",
                   "jobset.sigs.k8s.io/replicatedjob-name": "workers",
                   "jobset.sigs.k8s.io/job-index": job_index},
        "annotations": {"batch.kubernetes.io/job-completion-index": index}},
        "spec": {"containers": [{"name": "c"}]}}


@pytest.mark.parametrize(("index", "role"), [("0", "workers"), ("2", "workers/followers")])
def test_a_pod_is_a_leader_or_a_follower_by_its_completion_index(index: str, role: str) -> None:
    obj = jobset(rjob("workers", 2, 4), **{EXCLUSIVE: "rack"})
    tree = resolve(obj)
    found = find_membership(pod_from_api(_pod("js-workers-1-x", index, "1")),
                            objects=ObjectIndex.of([obj]), catalog=catalog(),
                            workloads={tree.ref.key: tree})
    assert found is not None
    assert (found.role, found.replica, found.gang) == (role, 1, GangKey("ml/js"))


def _descriptor(rule: object, *, topology: object = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"target": {"group": "x.dev", "kind": "X", "versions": ["v1"]},
                            "roles": [{"name": "a", "createdAfter": rule}]}
    if topology is not None:
        spec["gangs"] = {"topology": [topology]}
    return {"apiVersion": "muster.dev/v1alpha1", "kind": "WorkloadDescriptor",
            "metadata": {"name": "x"}, "spec": spec}


@pytest.mark.parametrize(("rule", "topology", "where"), [
    ({"leader": True, "roles": ["b"]}, None, r"createdAfter\.leader"),
    ({"leader": True, "status": "Complete"}, None, r"createdAfter\.status"),
    ({"leader": "yes"}, None, r"createdAfter\.leader"),
    ({"leader": True}, {"required": "rack", "per": "replica"}, r"topology\[0\]\.per"),
    ({"leader": True}, {"required": "rack", "exclusive": True, "per": "job"},
     r"topology\[0\]\.per"),
])
def test_a_bad_leader_or_per_replica_rule_names_its_field(rule: object, topology: object,
                                                           where: str) -> None:
    with pytest.raises(DescriptorError, match=where):
        compile_descriptor(_descriptor(rule, topology=topology))


def test_a_replicated_job_depending_on_one_split_at_its_leader_waits_for_its_followers() -> None:
    workers = {**rjob("workers", 2, 2), "dependsOn": [{"name": "leader", "status": "Ready"}]}
    tree = resolve(jobset(rjob("leader", 1, 2), workers, **{EXCLUSIVE: "rack"}))
    (gang,) = tree.gangs
    # The leader Job is Ready only once its follower is too: the workers come after both.
    assert {m.role: m.stage for m in gang.members} == {
        "leader": 0, "leader/followers": 1, "workers": 2, "workers/followers": 3}
    [role] = [r for r in tree.roles if r.name == "workers"]
    assert role.created_after == (("leader", "Ready"), ("leader/followers", "Ready"))


def _on_template(job: dict[str, Any], **annotations: str) -> dict[str, Any]:
    job["template"]["metadata"] = {"annotations": annotations}
    return job


def test_a_replicated_jobs_own_annotation_stages_its_jobs_and_gives_each_a_domain() -> None:
    # JobSet copies a replicatedJob template's exclusive-topology onto its Jobs and pods, so
    # its pod webhook stages their followers exactly as for the JobSet's own annotation.
    tree = resolve(jobset(_on_template(rjob("workers", 2, 3), **{EXCLUSIVE: "rack"})))
    assert [(r.name, r.pods_per_replica, r.created_after) for r in tree.roles] == [
        ("workers", 1, ()), ("workers/followers", 2, (("workers", "Scheduled"),))]
    (gang,) = tree.gangs
    assert gang.subgroups == SubgroupTopology("rack", (
        SubgroupKind("workers", (("workers", 1), ("workers/followers", 2)), 2),))
    assert tree.warnings == ()


def test_only_some_replicated_jobs_asking_cuts_those_into_subgroups_alone() -> None:
    tree = resolve(jobset(_on_template(rjob("workers", 2, 3), **{EXCLUSIVE: "rack"}),
                          rjob("ps", 1, 2)))
    assert [(r.name, r.created_after) for r in tree.roles] == [
        ("workers", ()), ("workers/followers", (("workers", "Scheduled"),)), ("ps", ())]
    (gang,) = tree.gangs
    assert gang.subgroups == SubgroupTopology("rack", (
        SubgroupKind("workers", (("workers", 1), ("workers/followers", 2)), 2),))
    assert gang.min_member == 8 and tree.warnings == ()


def test_replicated_jobs_asking_for_different_labels_keep_to_none_and_say_so() -> None:
    tree = resolve(jobset(_on_template(rjob("workers", 2, 3), **{EXCLUSIVE: "rack"}),
                          _on_template(rjob("ps", 1, 2), **{EXCLUSIVE: "zone"})))
    assert tree.gangs[0].subgroups is None
    assert any("different node labels (rack, zone)" in w for w in tree.warnings), tree.warnings


def test_a_replicated_jobs_node_selector_strategy_creates_its_pods_at_once() -> None:
    tree = resolve(jobset(_on_template(rjob("workers", 2, 3), **{EXCLUSIVE: "rack",
                                                                 STRATEGY: "true"})))
    assert [r.name for r in tree.roles] == ["workers"]
    assert tree.gangs[0].subgroups is None
