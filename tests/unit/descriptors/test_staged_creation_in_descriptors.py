"""``createdAfter``: how a workload's pods come into being, read from the operators' fields.

JobSet ``dependsOn`` (Ready or Complete) and ``startupPolicy: InOrder``, LeaderWorkerSet
``startupPolicy: LeaderReady`` and MPIJob ``launcherCreationPolicy: WaitForWorkersReady`` make
later stages of one gang; a role created after another *completes* is a gang of its own. Bad
rules name the field.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.core.model.values import WorkloadTree
from extender.core.workloads.descriptor import DescriptorError, compile_descriptor
from extender.core.workloads.expressions import WorkloadError
from extender.core.workloads.workload import resolve_workload
from tests.unit.descriptors.examples import catalog


def resolve(obj: dict[str, Any]) -> WorkloadTree:
    return resolve_workload(obj, catalog().require(obj))


def stages(tree: WorkloadTree) -> dict[str, dict[str, int]]:
    return {g.key: {m.role: m.stage for m in g.members} for g in tree.gangs}


def pods(gpus: int) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "c", "resources": {"limits": {
        "nvidia.com/gpu": gpus}}}]}}


def rjob(name: str, n: int, **extra: Any) -> dict[str, Any]:
    return {"name": name, "replicas": 1, "template": {"spec": {
        "parallelism": n, "completions": n, "template": pods(4)}}, **extra}


def jobset(*jobs: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "js", "namespace": "ml"},
            "spec": {"replicatedJobs": list(jobs), **spec}}


def test_jobset_depends_on_ready_makes_the_dependent_a_later_stage_of_one_gang() -> None:
    tree = resolve(jobset(rjob("leader", 1),
                          rjob("workers", 2, dependsOn=[{"name": "leader", "status": "Ready"}])))
    assert stages(tree) == {"ml/js": {"leader": 0, "workers": 1}}
    assert [g.min_member for g in tree.gangs] == [3]


def test_jobset_in_order_makes_each_replicated_job_a_stage_after_the_previous() -> None:
    tree = resolve(jobset(rjob("a", 1), rjob("b", 2), rjob("c", 1),
                          startupPolicy={"startupPolicyOrder": "InOrder"}))
    assert stages(tree) == {"ml/js": {"a": 0, "b": 1, "c": 2}}
    any_order = resolve(jobset(rjob("a", 1), rjob("b", 2),
                               startupPolicy={"startupPolicyOrder": "AnyOrder"}))
    assert stages(any_order) == {"ml/js": {"a": 0, "b": 0}}


def test_jobset_depends_on_complete_cuts_a_gang_of_its_own_with_what_waits_for_it() -> None:
    tree = resolve(jobset(
        rjob("init", 1),
        rjob("launcher", 1, dependsOn=[{"name": "init", "status": "Complete"}]),
        rjob("worker", 4, dependsOn=[{"name": "launcher", "status": "Ready"}])))
    assert stages(tree) == {"ml/js": {"init": 0}, "ml/js/launcher": {"launcher": 0, "worker": 1}}


def test_lws_leader_ready_makes_each_groups_workers_a_later_stage() -> None:
    lws: dict[str, Any] = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "lr", "namespace": "ml"},
        "spec": {"replicas": 2, "startupPolicy": "LeaderReady",
                 "leaderWorkerTemplate": {"size": 3, "workerTemplate": pods(8)}}}
    assert stages(resolve(lws)) == {"ml/lr/group-0": {"leader": 0, "worker": 1},
                                    "ml/lr/group-1": {"leader": 0, "worker": 1}}
    lws["spec"]["startupPolicy"] = "LeaderCreated"
    assert stages(resolve(lws))["ml/lr/group-0"] == {"leader": 0, "worker": 0}


def test_lws_exclusive_topology_makes_each_groups_workers_wait_for_its_leader_scheduled() -> None:
    """The LWS pod controller creates an exclusive group's worker StatefulSet only once the
    leader pod has a node: the workers are a later stage, and the group keeps to one domain."""
    lws: dict[str, Any] = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "ex", "namespace": "ml", "annotations": {
            "leaderworkerset.sigs.k8s.io/exclusive-topology": "muster.dev/rack"}},
        "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 4, "workerTemplate": pods(8)}}}
    tree = resolve(lws)
    assert stages(tree) == {"ml/ex/group-0": {"leader": 0, "worker": 1},
                            "ml/ex/group-1": {"leader": 0, "worker": 1}}
    topology = tree.gangs[0].topology
    assert topology is not None and topology.key == "muster.dev/rack" and topology.exclusive
    del lws["metadata"]["annotations"]
    assert stages(resolve(lws))["ml/ex/group-0"] == {"leader": 0, "worker": 0}


def test_mpijob_wait_for_workers_ready_makes_the_launcher_the_later_stage() -> None:
    mpi: dict[str, Any] = {
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
        "metadata": {"name": "pi", "namespace": "ml"},
        "spec": {"launcherCreationPolicy": "WaitForWorkersReady", "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": pods(0)},
            "Worker": {"replicas": 2, "template": pods(8)}}}}
    assert stages(resolve(mpi)) == {"ml/pi": {"Launcher": 1, "Worker": 0}}


def test_a_depends_on_status_that_is_neither_ready_nor_complete_is_refused_with_the_role() -> None:
    with pytest.raises(WorkloadError, match=r"role 'workers'.*status 'Started'.*Ready, "
                                            "Scheduled or Complete"):
        resolve(jobset(rjob("leader", 1),
                       rjob("workers", 2, dependsOn=[{"name": "leader", "status": "Started"}])))


def test_created_after_that_forms_a_cycle_is_refused_with_the_cycle() -> None:
    with pytest.raises(WorkloadError, match=r"cycle: (a -> b -> a|b -> a -> b)"):
        resolve(jobset(rjob("a", 1, dependsOn=[{"name": "b", "status": "Ready"}]),
                       rjob("b", 1, dependsOn=[{"name": "a", "status": "Ready"}])))


def _descriptor(created_after: object) -> dict[str, Any]:
    return {"apiVersion": "muster.dev/v1alpha1", "kind": "WorkloadDescriptor",
            "metadata": {"name": "x"},
            "spec": {"target": {"group": "x.dev", "kind": "X", "versions": ["v1"]},
                     "roles": [{"name": "a"}, {"name": "b", "createdAfter": created_after}]}}


@pytest.mark.parametrize(("rule", "where"), [
    ({"roles": ["a"], "status": "Started"}, r"spec\.roles\[1\]\.createdAfter\.status"),
    ({"status": "Ready"}, r"spec\.roles\[1\]\.createdAfter\.roles"),
    ({"roles": ["a"], "previous": "yes"}, r"spec\.roles\[1\]\.createdAfter\.previous"),
    ([{"roles": ["a"], "typo": 1}], r"spec\.roles\[1\]\.createdAfter\[0\]"),
])
def test_a_bad_created_after_rule_names_its_field(rule: object, where: str) -> None:
    with pytest.raises(DescriptorError, match=where):
        compile_descriptor(_descriptor(rule))
