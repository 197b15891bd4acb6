"""The CRD's OpenAPI schema admits every catalog descriptor and rejects malformed ones.

A small structural checker (types, required, enum, minLength, additionalProperties) stands in
for the API server's validation of the same schema.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.unit.descriptors.examples import REPO

CRD = yaml.safe_load((REPO / "manifests" / "crd-workloaddescriptor.yaml").read_text())
SCHEMA = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def violations(node: Any, schema: dict[str, Any], at: str = "") -> list[str]:
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    kind = schema.get("type")
    out: list[str] = []
    if kind == "object":
        if not isinstance(node, dict):
            return [f"{at}: not an object"]
        out += [f"{at}.{r}: required" for r in schema.get("required", []) if r not in node]
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, value in node.items():
            if key in props:
                out += violations(value, props[key], f"{at}.{key}")
            elif isinstance(extra, dict):
                out += violations(value, extra, f"{at}.{key}")
            elif extra is False:
                out.append(f"{at}.{key}: unknown field")
    elif kind == "array":
        if not isinstance(node, list):
            return [f"{at}: not a list"]
        out += [v for i, item in enumerate(node)
                for v in violations(item, schema.get("items", {}), f"{at}[{i}]")]
    elif kind == "string":
        if not isinstance(node, str):
            out.append(f"{at}: not a string")
        elif "enum" in schema and node not in schema["enum"]:
            out.append(f"{at}: not one of {schema['enum']}")
        elif len(node) < schema.get("minLength", 0):
            out.append(f"{at}: shorter than {schema['minLength']}")
    return out


def test_the_crd_is_cluster_scoped_in_group_muster_dev() -> None:
    assert (CRD["spec"]["group"], CRD["spec"]["scope"]) == ("muster.dev", "Cluster")
    assert CRD["spec"]["names"]["kind"] == "WorkloadDescriptor"


@pytest.mark.parametrize("file", sorted((REPO / "descriptors").glob("*.yaml")),
                         ids=lambda f: f.stem)
def test_the_schema_admits_every_catalog_descriptor(file: Any) -> None:
    assert violations(yaml.safe_load(file.read_text()), SCHEMA) == []


def test_the_schema_rejects_bad_enums_and_missing_targets() -> None:
    doc = yaml.safe_load((REPO / "descriptors" / "jobset.yaml").read_text())
    doc["spec"]["gangs"]["policy"] = "everything"
    del doc["spec"]["target"]
    assert sorted(violations(doc, SCHEMA)) == [
        ".spec.gangs.policy: not one of ['workload', 'replica', 'role', 'roleReplica', "
        "'baseAndScaled', 'none']",
        ".spec.target: required",
    ]


def podcliqueset() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((REPO / "descriptors" / "podcliqueset.yaml").read_text())
    return doc


def test_the_schema_knows_every_field_the_grove_descriptor_uses() -> None:
    # The API server prunes fields its schema does not name; a pruned subReplicas would turn
    # Grove's scaled PodGangs back into one gang without a word.
    role = SCHEMA["properties"]["spec"]["properties"]["roles"]["items"]["properties"]
    pods = SCHEMA["properties"]["spec"]["properties"]["pods"]["properties"]
    doc = podcliqueset()
    assert set(doc["spec"]["roles"][0]) <= set(role)
    assert set(doc["spec"]["roles"][0]["subReplicas"]) <= set(role["subReplicas"]["properties"])
    assert set(doc["spec"]["pods"]) <= set(pods)
    assert set(doc["spec"]["pods"]["role"]) <= set(pods["role"]["properties"])


def _edited(edit: Any) -> dict[str, Any]:
    doc = podcliqueset()
    edit(doc["spec"])
    return doc


@pytest.mark.parametrize(("edit", "problem"), [
    (lambda s: s["roles"][0].update(subReplicas=2), ".spec.roles[0].subReplicas: not an object"),
    (lambda s: s["roles"][0]["subReplicas"].pop("base"),
     ".spec.roles[0].subReplicas.base: required"),
    (lambda s: s["pods"].update(subReplica={}), ".spec.pods.subReplica.label: required"),
    (lambda s: s["pods"]["subReplica"].update(label=""),
     ".spec.pods.subReplica.label: shorter than 1"),
    (lambda s: s["pods"]["subReplica"].update(label=["a"]),
     ".spec.pods.subReplica.label: not a string"),
    (lambda s: s["pods"]["role"].update(match="prefix"),
     ".spec.pods.role.match: not one of ['exact', 'suffix']"),
], ids=["sub-replicas-not-an-object", "sub-replicas-without-base", "sub-replica-without-label",
        "empty-sub-replica-label", "sub-replica-label-not-a-string", "unknown-role-match"])
def test_the_schema_rejects_malformed_sub_replicas(edit: Any, problem: str) -> None:
    assert violations(_edited(edit), SCHEMA) == [problem]


def _objects(schema: Any) -> list[dict[str, Any]]:
    if isinstance(schema, dict):
        return [schema] + [o for v in schema.values() for o in _objects(v)]
    if isinstance(schema, list):
        return [o for v in schema for o in _objects(v)]
    return []


def test_the_schema_is_structural_as_the_api_server_requires() -> None:
    # apiextensions rejects `properties` together with `additionalProperties`; unknown fields
    # are pruned by the server instead, and `muster descriptors validate` reports them.
    assert not [o for o in _objects(SCHEMA)
                if "properties" in o and "additionalProperties" in o]


def pruned(node: Any, schema: dict[str, Any], at: str = "") -> list[str]:
    """Fields the API server would drop (structural pruning): in an object schema that
    neither lists them nor preserves unknown fields or takes additionalProperties."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    out: list[str] = []
    if isinstance(node, dict) and schema.get("type") == "object":
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, value in node.items():
            if key in props:
                out += pruned(value, props[key], f"{at}.{key}")
            elif isinstance(extra, dict):
                out += pruned(value, extra, f"{at}.{key}")
            elif extra is not True:
                out.append(f"{at}.{key}")
    elif isinstance(node, list) and schema.get("type") == "array":
        out += [p for i, item in enumerate(node)
                for p in pruned(item, schema.get("items", {}), f"{at}[{i}]")]
    return out


@pytest.mark.parametrize("file", sorted((REPO / "descriptors").glob("*.yaml")),
                         ids=lambda f: f.stem)
def test_the_api_server_prunes_no_field_of_a_catalog_descriptor(file: Any) -> None:
    # A pruned field changes what the descriptor says once applied (a per-item rule losing
    # its items, `over`, was refused when Muster read it back from the cluster).
    doc = yaml.safe_load(file.read_text())
    assert pruned({k: v for k, v in doc.items() if k in ("spec",)}, SCHEMA) == []
