"""Known counting traps, and bad input: each error names the field, none is a traceback."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from extender.core.model.values import Phase, WorkloadTree
from extender.core.workloads.catalog import UnknownKind
from extender.core.workloads.descriptor import DescriptorError, compile_descriptor
from extender.core.workloads.expressions import WorkloadError
from extender.core.workloads.workload import DEFAULT_LIMITS, resolve_workload
from extender.files.catalog import CatalogError, load_descriptor_text, load_descriptors
from tests.unit.descriptors.examples import REPO, catalog


def resolve(obj: dict[str, Any]):  # type: ignore[no-untyped-def]
    return resolve_workload(obj, catalog().require(obj))


def container(gpus: int = 0, cpu: str = "1") -> dict[str, Any]:
    return {"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus, "cpu": cpu}}}


def template(*containers: dict[str, Any], init: list[dict[str, Any]] | None = None
             ) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = init
    return {"spec": spec}


def jobset(**job_spec: Any) -> dict[str, Any]:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "js", "namespace": "ml"},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {
                "spec": {**job_spec, "template": template(container(gpus=8))}}}]}}


def lws(*, replicas: int, size: int, leader: bool) -> dict[str, Any]:
    lwt: dict[str, Any] = {"size": size, "workerTemplate": template(container(gpus=4))}
    if leader:
        lwt["leaderTemplate"] = template(container(gpus=1))
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "vllm"}, "spec": {"replicas": replicas,
                                                   "leaderWorkerTemplate": lwt}}


# ------------------------------------------------------------------ traps


def test_jobset_without_parallelism_runs_one_pod_per_job() -> None:
    tree = resolve(jobset())
    assert (tree.pods, tree.gpus) == (2, 16)


def test_jobset_completions_below_parallelism_caps_pods_per_job() -> None:
    tree = resolve(jobset(parallelism=4, completions=3))
    assert tree.roles[0].pods_per_replica == 3


def test_jobset_completions_unset_means_parallelism() -> None:
    assert resolve(jobset(parallelism=4)).pods == 8


def test_lws_gangs_hold_size_pods_per_group_not_size_squared() -> None:
    tree = resolve(lws(replicas=3, size=4, leader=True))
    assert tree.pods == 12
    assert [(g.key, g.pods, g.min_member) for g in tree.gangs] == [
        ("default/vllm/group-0", 4, 4), ("default/vllm/group-1", 4, 4),
        ("default/vllm/group-2", 4, 4)]
    assert tree.gpus == 3 * (1 + 3 * 4)
    assert tree.edges == (("leader", "worker"),)


def test_lws_without_leader_template_uses_the_worker_template_for_the_leader() -> None:
    tree = resolve(lws(replicas=2, size=2, leader=False))
    assert tree.gpus == 2 * (4 + 4)


def test_lws_of_size_one_is_leaders_only() -> None:
    tree = resolve(lws(replicas=2, size=1, leader=False))
    assert tree.pods == 2
    assert all(g.pods == 1 for g in tree.gangs)


def test_ray_num_of_hosts_multiplies_worker_pods() -> None:
    obj = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "r"},
           "spec": {"headGroupSpec": {"template": template(container())},
                    "workerGroupSpecs": [{"groupName": "tpu", "replicas": 2, "numOfHosts": 4,
                                          "minReplicas": 1,
                                          "template": template(container(gpus=1))}]}}
    tree = resolve(obj)
    assert (tree.pods, tree.gpus) == (9, 8)
    assert tree.gangs[0].min_member == 9  # no autoscaler: every group stays at replicas
    obj["spec"]["enableInTreeAutoscaling"] = True
    assert resolve(obj).gangs[0].min_member == 1 + 1 * 4


def test_dynamo_gpu_resource_name_counts_as_nvidia_gpu() -> None:
    obj = {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
           "metadata": {"name": "d"}, "spec": {"services": {
               "decode": {"replicas": 2, "multinode": {"nodeCount": 2},
                          "resources": {"limits": {"gpu": "4"}},
                          "extraPodSpec": {"mainContainer": {"image": "x"}}}}}}
    tree = resolve(obj)
    assert (tree.pods, tree.gpus) == (4, 16)
    assert [(g.key, g.pods) for g in tree.gangs] == [("default/d/decode-0", 2),
                                                     ("default/d/decode-1", 2)]


def test_dynamo_v1beta1_components_list_resolves_through_its_own_descriptor() -> None:
    obj = {"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
           "metadata": {"name": "d"}, "spec": {"components": [
               {"name": "Frontend", "podTemplate": template(container())},
               {"name": "worker", "replicas": 2, "multinode": {"nodeCount": 2},
                "resources": {"limits": {"gpu": "2"}},
                "podTemplate": template({"name": "main"})}]}}
    tree = resolve(obj)
    assert tree.descriptor == "dynamographdeployment-v1beta1"
    assert (tree.pods, tree.gpus) == (5, 8)


def test_init_container_asking_more_than_the_containers_sets_the_pod_demand() -> None:
    big_init = {"name": "fetch", "resources": {"requests": {"cpu": "8", "nvidia.com/gpu": 2}}}
    obj = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"template": template(container(gpus=1, cpu="1"), init=[big_init])}}
    shape = resolve(obj).roles[0].shape
    assert shape.requests["cpu"] == 8000
    assert shape.gpus == 2


def test_pytorch_elastic_minimum_applies_to_workers_only() -> None:
    obj = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "p"},
           "spec": {"elasticPolicy": {"minReplicas": 2}, "pytorchReplicaSpecs": {
               "Master": {"replicas": 1, "template": template(container())},
               "Worker": {"replicas": 4, "template": template(container())}}}}
    tree = resolve(obj)
    assert tree.gangs[0].pods == 5
    assert tree.gangs[0].min_member == 1 + 2


def test_jobset_depends_on_becomes_ordering_edges() -> None:
    obj = jobset()
    obj["spec"]["replicatedJobs"].insert(0, {"name": "init", "template": {
        "spec": {"template": template(container())}}})
    obj["spec"]["replicatedJobs"][1]["dependsOn"] = [{"name": "init", "status": "Complete"}]
    assert resolve(obj).edges == (("init", "workers"),)


def test_a_workload_missing_optional_fields_takes_the_upstream_defaults() -> None:
    bare = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "x"}, "spec": {"leaderWorkerTemplate": {}}}
    tree = resolve(bare)
    assert (tree.pods, len(tree.gangs)) == (1, 1)
    assert resolve({"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "d"}}).pods == 1


def test_ray_cluster_phase_comes_from_the_state_field() -> None:
    obj = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "r"},
           "status": {"state": "ready"}}
    assert resolve(obj).phase is Phase.RUNNING


# ------------------------------------------------------------------ bad input


def descriptor_doc() -> dict[str, Any]:
    return yaml.safe_load((REPO / "descriptors" / "jobset.yaml").read_text())


@pytest.mark.parametrize(("edit", "path", "words"), [
    (lambda d: d["spec"]["roles"][0]["replicas"].update(path="$.[[["),
     "spec.roles[0].replicas.path", "not a valid JSONPath"),
    (lambda d: d["spec"]["roles"].append({"name": "x", "replicas": {"path": 7}}),
     "spec.roles[1].replicas.path", "expected a JSONPath string"),
    (lambda d: d["spec"]["roles"][0].update(replica=3),
     "spec.roles[0].replica", "unknown field"),
    (lambda d: d["spec"]["roles"][0].update(replicas="three"),
     "spec.roles[0].replicas", "expected an integer or a count expression"),
    (lambda d: d["spec"].pop("target"), "spec.target", "expected an object"),
    (lambda d: d["spec"]["target"].pop("kind"), "spec.target.kind", "non-empty string"),
    (lambda d: d["spec"]["gangs"].update(policy="all"), "spec.gangs.policy", "unknown policy"),
    (lambda d: d["spec"]["status"]["rules"][0].update(phase="Done"),
     "spec.status.rules[0].phase", "unknown phase"),
    (lambda d: d.update(kind="Karta"), "kind", "expected WorkloadDescriptor"),
    (lambda d: d["spec"]["roles"][0].update(when={"use": "suspended"}),
     "spec.roles[0].when.use", "no condition named 'suspended' in spec.namedConditions"),
    (lambda d: d["spec"].update(namedConditions={"a": {"not": {"use": "a"}}}),
     "spec.namedConditions.a", "cannot use another"),
    (lambda d: d["spec"].update(namedConditions={"a": {"path": "$.x", "exists": True}}) or
     d["spec"]["roles"][0].update(when={"use": "a", "not": {"path": "$.y", "exists": True}}),
     "spec.roles[0].when", "'use' stands alone"),
    (lambda d: d["spec"]["roles"][0].update(replicas={"each": {"path": "$.xs[*]"}}),
     "spec.roles[0].replicas.count", "required with 'each'"),
    (lambda d: d["spec"]["roles"][0].update(replicas={"each": {"path": "$.xs[*]", "scope": "up"},
                                                      "count": 1}),
     "spec.roles[0].replicas.each.scope", "unknown scope 'up'"),
], ids=["malformed-path", "path-of-wrong-type", "unknown-field", "wrong-type",
        "missing-target", "missing-kind", "unknown-gang-policy", "unknown-phase", "wrong-kind",
        "unknown-named-condition", "named-condition-using-another", "use-with-other-fields",
        "each-without-count", "each-in-an-unknown-scope"])
def test_a_broken_descriptor_is_reported_with_its_field_path(edit: Any, path: str,
                                                             words: str) -> None:
    doc = descriptor_doc()
    edit(doc)
    with pytest.raises(DescriptorError) as err:
        compile_descriptor(doc)
    assert err.value.path == path
    assert words in err.value.message


def test_a_broken_file_is_reported_as_file_doc_path_message(tmp_path: Any) -> None:
    good = (REPO / "descriptors" / "pod.yaml").read_text()
    bad = good.replace("replicas: 1", "replicas: {path: '$..['}")
    target = tmp_path / "two.yaml"
    target.write_text(good + "\n---\n" + bad)
    with pytest.raises(CatalogError) as err:
        load_descriptors([tmp_path])
    assert str(err.value).startswith(f"{target}:2: spec.roles[0].replicas.path: not a valid")


def test_invalid_yaml_names_the_file_and_document() -> None:
    _, problems = load_descriptor_text("a: 1\n---\nb: [\n", "x.yaml")
    assert [str(p).split(" (")[0] for p in problems] == [
        "x.yaml:1: a: unknown field; expected one of apiVersion, kind, metadata, spec",
        "x.yaml:2: not valid YAML"]


def test_an_unknown_kind_names_the_known_kinds() -> None:
    with pytest.raises(UnknownKind) as err:
        catalog().require({"apiVersion": "example.com/v1", "kind": "Frobnicator"})
    message = str(err.value)
    assert message.startswith("unknown kind Frobnicator (example.com/v1); known kinds: ")
    assert "LeaderWorkerSet.leaderworkerset.x-k8s.io" in message


def test_an_unserved_version_of_a_known_kind_names_the_described_versions() -> None:
    with pytest.raises(UnknownKind, match="described versions: v1alpha2"):
        catalog().require({"apiVersion": "jobset.x-k8s.io/v9", "kind": "JobSet"})


def test_a_value_of_the_wrong_type_in_a_workload_is_a_workload_error() -> None:
    obj = jobset()
    obj["spec"]["replicatedJobs"][0]["replicas"] = "many"
    with pytest.raises(WorkloadError, match=r"JobSet/js: role 'workers'.*expected an integer"):
        resolve(obj)


@pytest.mark.parametrize(("name", "kind"), [
    ("jobset", "JobSet"), ("JOBSETS", "JobSet"), ("lws", "LeaderWorkerSet"),
    ("ksvc", "Service"), ("service.serving.knative.dev", "Service"), ("pytorchjob", "PyTorchJob"),
    ("pcs", "PodCliqueSet"), ("dgd", "DynamoGraphDeployment"), ("po", "Pod"),
])
def test_types_match_leniently_by_kind_plural_short_name_and_group(name: str, kind: str) -> None:
    assert {d.target.kind for d in catalog().find_type(name)} == {kind}


def test_an_unknown_type_name_lists_the_known_kinds() -> None:
    with pytest.raises(UnknownKind, match=r"unknown kind gizmo; known kinds: Deployment\.apps"):
        catalog().find_type("gizmo")


def test_every_catalog_file_is_one_valid_descriptor() -> None:
    files = sorted((REPO / "descriptors").glob("*.yaml"))
    assert len(files) >= 20
    for file in files:
        found, problems = load_descriptor_text(file.read_text(), str(file))
        assert (len(found), problems) == (1, []), file


# ------------------------------------------------------------------ fuzz

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 5), st.text(max_size=6),
                     st.sampled_from(["$", "$.a", "$.spec[*]", "$..x", "[", "$.a.'b'", "item"]))
_trees = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.sampled_from(sorted([
        "name", "path", "replicas", "podsPerReplica", "forEach", "template", "when", "min",
        "sum", "if", "then", "else", "default", "scope", "key", "equals", "exists", "roles",
        "target", "kind", "group", "versions", "gangs", "policy", "status", "rules", "phase",
        "podTemplate", "join", "in", "match", "pods", "owners", "after"])), inner, max_size=4)),
    max_leaves=12)


@given(_trees)
def test_the_compiler_answers_any_input_with_a_descriptor_or_a_descriptor_error(raw: Any) -> None:
    doc = {"apiVersion": "muster.dev/v1alpha1", "kind": "WorkloadDescriptor",
           "metadata": {"name": "fuzz"}, "spec": raw}
    try:
        compile_descriptor(doc)
    except DescriptorError as err:
        assert err.path.startswith("spec") or err.path == ""


@given(_trees)
def test_the_resolver_answers_any_workload_with_a_consistent_tree_or_a_workload_error(
        spec: Any) -> None:
    for descriptor in catalog().descriptors:
        obj = {"apiVersion": descriptor.target.api_versions[0], "kind": descriptor.target.kind,
               "metadata": {"name": "w"}, "spec": copy.deepcopy(spec)}
        try:
            tree = resolve_workload(obj, descriptor)
        except WorkloadError:
            continue
        _assert_consistent(tree)


def _assert_consistent(tree: WorkloadTree) -> None:
    """What every decision takes for granted of a tree: roles named once and counted within
    the limits, and gangs of the tree's own roles that never count a pod twice nor ask for
    more pods than they have."""
    roles = {r.name: r for r in tree.roles}
    assert len(roles) == len(tree.roles)
    assert all(r.replicas >= 0 and r.pods_per_replica >= 0 for r in tree.roles)
    assert tree.pods <= DEFAULT_LIMITS.pods and len(tree.gangs) <= DEFAULT_LIMITS.gangs
    in_gangs: Counter[str] = Counter()
    for gang in tree.gangs:
        assert gang.workload == tree.ref
        for member in gang.members:
            assert member.role in roles and 0 <= member.min_count <= member.count
            in_gangs[member.role] += member.count
    assert all(count <= roles[role].pods for role, count in in_gangs.items())
