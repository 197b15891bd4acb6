"""Workload Map (Karta) descriptors read unchanged: the catalog, the examples, the formats."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.core.karta.compile import compile_karta
from extender.core.model.values import Phase, TopologyConstraint
from extender.core.workloads.catalog import Catalog
from extender.core.workloads.descriptor import DescriptorError
from extender.core.workloads.descriptor_spec import GangPolicy
from extender.core.workloads.expressions import WorkloadError
from extender.core.workloads.workload import resolve_workload
from extender.files.catalog import CatalogError, load_catalog, load_descriptor_text
from tests.unit.descriptors.examples import REPO, catalog
from tests.unit.karta.compat import EXPLAINED, KARTA_DIR, CompatRow, compat_rows, render_table

FILES = sorted(KARTA_DIR.glob("*.yaml"))
ROWS = compat_rows()


def _raw(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((KARTA_DIR / name).read_text(encoding="utf-8"))
    return data


# ---------------------------------------------------------------- the catalog


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_catalog_file_loads_as_a_karta_descriptor(path: Any) -> None:
    found, problems = load_descriptor_text(path.read_text(encoding="utf-8"), str(path))
    assert problems == []
    assert len(found) == 1
    assert found[0].format == "karta"
    assert found[0].source == str(path)


def test_a_directory_of_kartas_loads_as_a_catalog() -> None:
    kc = load_catalog([KARTA_DIR])
    assert len(kc) == len(FILES) == 23
    assert {d.format for d in kc.descriptors} == {"karta"}


def test_a_malformed_jq_path_is_reported_with_its_field_path(tmp_path: Any) -> None:
    raw = _raw("jobset-x-k8s-io-jobset-v1alpha2.yaml")
    raw["spec"]["structureDefinition"]["childComponents"][0]["scaleDefinition"][
        "replicasPath"] = ".spec.replicatedJobs[] | .replicas *"
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(CatalogError) as err:
        load_catalog([tmp_path])
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'bad.yaml'}:1: spec.structureDefinition."
                              "childComponents[0].scaleDefinition.replicasPath: not a valid jq "
                              "program")
    assert "Traceback" not in message


@pytest.mark.parametrize(("field", "value", "where"), [
    ("ownerRef", "nowhere", "childComponents[0].ownerRef"),
    ("instanceIdPath", None, "childComponents[0].instanceIdPath"),
])
def test_structure_errors_name_the_field(field: str, value: object, where: str) -> None:
    raw = _raw("jobset-x-k8s-io-jobset-v1alpha2.yaml")
    child = raw["spec"]["structureDefinition"]["childComponents"][0]
    if value is None:
        del child[field]
    else:
        child[field] = value
    with pytest.raises(DescriptorError) as err:
        compile_karta(raw)
    assert err.value.path == f"spec.structureDefinition.{where}"


# ---------------------------------------------------------------- the examples


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.row.stem)
def test_example_resolved_with_the_karta_catalog_matches_the_index_or_its_documented_difference(
        row: CompatRow) -> None:
    if row.row.number in EXPLAINED:
        # The documented difference is really there: figures, gangs, or KAI's arithmetic.
        assert row.differs, f"row {row.row.number} no longer differs; drop its explanation"
    else:
        assert not row.karta.error
        assert (row.karta.pods, row.karta.gpus, row.karta.gangs) == (
            row.index.pods, row.index.gpus, row.index.gangs)
        assert not row.differs


def test_the_suspected_lws_problem_is_confirmed_with_numbers() -> None:
    lws = next(r for r in ROWS if r.row.number == "14")  # replicas 3, size 4
    assert lws.karta.gangs == ((4, 4), (4, 4), (4, 4))
    assert lws.kai == (48, 48, 48)  # replicas x size^2 = 3 x 16


def test_the_suspected_jobset_problem_is_confirmed_with_numbers() -> None:
    js = next(r for r in ROWS if r.row.number == "1")
    assert "cannot be multiplied" in js.karta.error
    assert js.native.pods == 5


def test_docs_compat_holds_the_generated_table() -> None:
    text = (REPO / "docs" / "compat.md").read_text(encoding="utf-8")
    assert render_table(ROWS) in text


# ---------------------------------------------------------------- precedence


def test_a_native_descriptor_wins_over_a_karta_for_the_same_kind_in_either_order() -> None:
    karta = compile_karta(_raw("jobset-x-k8s-io-jobset-v1alpha2.yaml"), source="cluster")
    native = catalog().for_api("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert native is not None
    for order in ((native, karta), (karta, native)):
        found = Catalog.of(order).for_api("jobset.x-k8s.io/v1alpha2", "JobSet")
        assert found is native
    merged = catalog().merged([karta])
    assert merged.for_api("jobset.x-k8s.io/v1alpha2", "JobSet") is native
    assert karta.name not in {d.name for d in merged.descriptors}


def test_a_kind_only_a_karta_describes_is_served_by_it_beside_the_native_catalog() -> None:
    both = load_catalog([REPO / "descriptors", KARTA_DIR])
    cache = both.for_api("apps.nvidia.com/v1alpha1", "NIMCache")
    assert cache is not None and cache.format == "karta"
    obj = {"apiVersion": "apps.nvidia.com/v1alpha1", "kind": "NIMCache",
           "metadata": {"name": "c"}, "spec": {"resources": {"cpu": "1"}}}
    tree = resolve_workload(obj, cache)
    assert tree.descriptor_format == "karta"
    assert tree.pods == 1


# ---------------------------------------------------------------- status variants


def _status_karta(mappings: dict[str, Any]) -> dict[str, Any]:
    raw = _raw("ray-io-raycluster-v1.yaml")
    status = raw["spec"]["structureDefinition"]["rootComponent"]["statusDefinition"]
    status["conditionsDefinition"] = {"path": ".status.conditions", "typeFieldName": "kind",
                                      "statusFieldName": "state"}
    status["statusMappings"] = mappings
    return raw


RAY = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "r"},
       "spec": {"headGroupSpec": {"template": {"spec": {"containers": [{"name": "h"}]}}},
                "workerGroupSpecs": []}}


@pytest.mark.parametrize("key", ["initializing", "pending", "progressing"])
def test_both_status_enum_variants_map_to_initializing(key: str) -> None:
    d = compile_karta(_status_karta({key: [{"byPhase": "starting"}],
                                     "running": [{"byPhase": "ready"}]}))
    obj = {**RAY, "status": {"state": "Starting"}}
    assert resolve_workload(obj, d).phase is Phase.INITIALIZING
    assert resolve_workload({**RAY, "status": {"state": "ready"}}, d).phase is Phase.RUNNING
    assert resolve_workload({**RAY, "status": {"state": "gone"}}, d).phase is Phase.UNDEFINED


def test_conditions_use_the_declared_field_names_and_expressions_compare_as_text() -> None:
    d = compile_karta(_status_karta({
        "failed": [{"byConditions": [{"type": "Broken", "status": "True"}]}],
        "running": [{"byExpression": {"expression": ".status.ready", "expectedResult": "3"}}],
    }))
    broken = {**RAY, "status": {"conditions": [{"kind": "Broken", "state": "True"}]}}
    assert resolve_workload(broken, d).phase is Phase.FAILED
    assert resolve_workload({**RAY, "status": {"ready": 3}}, d).phase is Phase.RUNNING
    # "type"/"status" are not the declared names, so this condition is not read.
    wrong = {**RAY, "status": {"conditions": [{"type": "Broken", "status": "True"}]}}
    assert resolve_workload(wrong, d).phase is Phase.UNDEFINED


def test_an_unknown_status_key_is_an_error_naming_it() -> None:
    with pytest.raises(DescriptorError) as err:
        compile_karta(_status_karta({"exploded": [{"byPhase": "x"}]}))
    assert err.value.path.endswith("statusDefinition.statusMappings.exploded")


# ---------------------------------------------------------------- gang formats

PYTORCH = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
           "metadata": {"name": "p", "namespace": "ml"},
           "spec": {"pytorchReplicaSpecs": {
               "Master": {"replicas": 1, "template": {"spec": {"containers": [
                   {"name": "m", "resources": {"limits": {"nvidia.com/gpu": 0}}}]}}},
               "Worker": {"replicas": 3, "template": {"spec": {"containers": [
                   {"name": "w", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}}}


def test_alpha_pod_groups_filters_keep_only_passing_roles_in_the_gang() -> None:
    raw = _raw("kubeflow-org-pytorchjob-v1.yaml")
    for member in raw["spec"]["optimizationInstructions"]["gangScheduling"]["podGroups"][0][
            "members"]:
        member["filters"] = ['(.spec.containers[0].resources.limits["nvidia.com/gpu"] // 0) > 0']
    tree = resolve_workload(PYTORCH, compile_karta(raw))
    assert tree.pods == 4
    (gang,) = tree.gangs
    assert [m.role for m in gang.members] == ["worker"]
    assert (gang.key, gang.min_member) == ("ml/p", 3)


def test_new_pod_group_format_makes_one_gang_of_its_subgroups() -> None:
    raw = _raw("kubeflow-org-pytorchjob-v1.yaml")
    topology = {"topologyName": "t", "requiredTopologyLevel": "rack",
                "preferredTopologyLevel": "node"}
    raw["spec"]["optimizationInstructions"]["gangScheduling"] = {"podGroup": {
        "name": "job", "topology": topology,
        "subGroups": [{"componentName": "worker", "topology": topology}]}}
    d = compile_karta(raw)
    assert d.gangs.policy is GangPolicy.WORKLOAD
    assert any("subGroups topology is per subgroup" in n for n in d.notes)
    tree = resolve_workload(PYTORCH, d)
    (gang,) = tree.gangs
    assert [(m.role, m.count) for m in gang.members] == [("worker", 3)]
    # KAI's required level is a node label key: the gang keeps to one rack.
    assert gang.topology == TopologyConstraint("rack", required=True)


def test_a_pod_group_topology_level_that_is_not_a_label_key_is_refused_by_path() -> None:
    raw = _raw("kubeflow-org-pytorchjob-v1.yaml")
    raw["spec"]["optimizationInstructions"]["gangScheduling"] = {"podGroup": {
        "name": "job", "topology": {"topologyName": "t", "requiredTopologyLevel": "a rack",
                                    "preferredTopologyLevel": "node"}}}
    with pytest.raises(DescriptorError) as err:
        compile_karta(raw)
    assert err.value.path == ("spec.optimizationInstructions.gangScheduling.podGroup.topology"
                              ".requiredTopologyLevel")


def test_a_subgroup_naming_no_component_is_an_error() -> None:
    raw = _raw("kubeflow-org-pytorchjob-v1.yaml")
    raw["spec"]["optimizationInstructions"]["gangScheduling"] = {"podGroup": {
        "name": "job", "subGroups": [{"componentName": "ghost"}]}}
    with pytest.raises(DescriptorError) as err:
        compile_karta(raw)
    assert err.value.path == ("spec.optimizationInstructions.gangScheduling.podGroup."
                              "subGroups[0].componentName")


def test_pods_find_their_role_through_the_translated_selectors() -> None:
    d = compile_karta(_raw("leaderworkerset-x-k8s-io-leaderworkerset-v1.yaml"))
    assert d.pods.role_labels == ("leaderworkerset.sigs.k8s.io/worker-index",)
    assert dict(d.pods.role_map) == {"0": "leader"}
    assert d.pods.role_default == "worker"
    assert d.pods.replica_label == "leaderworkerset.sigs.k8s.io/group-index"
    assert d.pods.workload_label == "leaderworkerset.sigs.k8s.io/name"
    assert "StatefulSet" in d.pods.owners


# ---------------------------------------------------------------- no tracebacks

_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-3, 5), st.text(max_size=12),
                    st.sampled_from([".spec[", ".spec.replicas * null", "1", "[]", "{}"]))


def _paths(node: object, at: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    out = [at]
    if isinstance(node, dict):
        for k, v in node.items():
            out.extend(_paths(v, (*at, k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.extend(_paths(v, (*at, i)))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(file=st.sampled_from(FILES), pick=st.integers(0, 10_000), leaf=_LEAVES,
       obj_leaf=_LEAVES)
def test_no_karta_or_workload_input_gives_a_traceback(file: Any, pick: int, leaf: object,
                                                      obj_leaf: object) -> None:
    raw = yaml.safe_load(file.read_text(encoding="utf-8"))
    paths = _paths(raw)[1:]
    target = paths[pick % len(paths)]
    node = raw
    for step in target[:-1]:
        node = node[step]
    node[target[-1]] = leaf
    try:
        d = compile_karta(raw)
    except DescriptorError as err:
        assert str(err)
        return
    obj = copy.deepcopy(PYTORCH)
    obj["apiVersion"], obj["kind"] = "x/v1", d.target.kind
    obj["spec"]["replicas"] = obj_leaf
    try:
        resolve_workload(obj, d)
    except WorkloadError as err:
        assert str(err)
