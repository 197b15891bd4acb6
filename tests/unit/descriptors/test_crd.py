"""The CRD's OpenAPI schema admits every catalog descriptor and rejects malformed ones.

A small structural checker (types, required, enum, additionalProperties) stands in for the
API server's validation of the same schema.
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
        "'none']",
        ".spec.target: required",
    ]


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
