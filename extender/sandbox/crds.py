"""Permissive CustomResourceDefinitions for the workload kinds a sandbox has no operator for.

The real CRDs are large (JobSet's is 800 KB) and validate what their operators need; a sandbox
only needs the API server to store the objects, so each catalog kind gets a schema that keeps
every field (``x-kubernetes-preserve-unknown-fields``) and a status subresource.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from extender.core.workloads.descriptor import Descriptor

#: Groups the API server serves itself.
BUILT_IN_GROUPS = frozenset({"", "apps", "batch"})


def permissive_crds(descriptors: Iterable[Descriptor]) -> list[dict[str, Any]]:
    by_kind: dict[tuple[str, str], dict[str, Any]] = {}
    for d in sorted(descriptors, key=lambda d: d.name):
        target = d.target
        if target.group in BUILT_IN_GROUPS:
            continue
        crd = by_kind.setdefault((target.group, target.kind), {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{target.plural}.{target.group}",
                         "labels": {"muster.dev/sandbox": "permissive"}},
            "spec": {
                "group": target.group,
                "scope": "Namespaced",
                "names": {"kind": target.kind, "plural": target.plural,
                          "singular": target.kind.lower(),
                          "listKind": f"{target.kind}List",
                          **({"shortNames": list(target.short_names)}
                             if target.short_names else {})},
                "versions": [],
            },
        })
        versions = crd["spec"]["versions"]
        for version in target.versions:
            if all(v["name"] != version for v in versions):
                versions.append({
                    "name": version, "served": True, "storage": False,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {
                        "type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                })
    crds = list(by_kind.values())
    for crd in crds:
        crd["spec"]["versions"][-1]["storage"] = True
    return crds
