"""Every rule Muster's ServiceAccount holds is one a line of its code uses, and kube-scheduler's
ServiceAccount holds the scheduler's roles, not Muster's (and the other way round).

The table below names, for each (apiGroup, resource, verb) of Muster's role, the function that
makes that request and a piece of its source that makes it; the test fails when rbac.yaml
grants something the table does not justify, when the table names a rule rbac.yaml lacks, when
the named code no longer makes the request, or when the serving code makes an API request in
a function the table does not know.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from extender.files.catalog import packaged_catalog
from extender.kube import live

ROOT = Path(__file__).resolve().parents[3]
MANIFESTS = ROOT / "manifests"
AGGREGATE = "muster.dev/aggregate-to-muster"


@dataclass(frozen=True)
class Use:
    where: str
    """``module:Qualified.name`` of the function making the request."""
    needle: str
    """Source text of that function that makes it."""


INFORMER_LIST = Use("extender.kube.informer:Informer._list", '"GET", self.rtype.path()')
INFORMER_WATCH = Use("extender.kube.informer:Informer._watch", '("watch", "true")')
FIXED_INFORMERS = ("NODE_TYPE", "POD_TYPE", "DESCRIPTOR_TYPE", "KARTA_TYPE")
"""The informers live.Watches.start starts (``live.FIXED``) whatever the catalog says; the
webhook's process starts a subset of them (``live.OWNERS_ONLY``)."""

USES: dict[tuple[str, str, str], tuple[Use, ...]] = {
    ("", "pods", "get"): (Use(
        "extender.kube.binder:KubeBinder._already_on",
        '"GET", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"'),),
    ("", "pods/binding", "create"): (
        Use("extender.kube.binder:KubeBinder.bind",
            'path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding"'),
        Use("extender.kube.binder:KubeBinder.bind", 'self.conn.request("POST", path')),
    ("", "pods", "patch"): (Use(
        "extender.kube.ungate:KubeUngater._write",
        '"PATCH", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}",'),),
    ("", "pods/status", "patch"): (Use(
        "extender.kube.requeue:KubeRequeuer._write",
        '"PATCH", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"'),),
    ("", "pods/eviction", "create"): (Use(
        "extender.kube.evict:KubeEvictor._write",
        '"POST", f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/eviction"'),),
    ("muster.dev", "gangs", "create"): (Use(
        "extender.kube.gangobjects:KubeGangObjects._write", 'self.conn.request("POST", base'),),
    ("muster.dev", "gangs", "patch"): (Use(
        "extender.kube.gangobjects:KubeGangObjects._patch",
        'self.conn.request("PATCH", f"{base}/{name}"'),),
    ("muster.dev", "gangs", "delete"): (Use(
        "extender.kube.gangobjects:KubeGangObjects._write",
        'self.conn.request("DELETE", f"{base}/{name}")'),),
    ("resource.k8s.io", "resourceclaims", "get"): (Use(
        "extender.kube.binder:KubeBinder.reserve_claims",
        'claim = self.conn.request("GET", path)'),),
    ("resource.k8s.io", "resourceclaims/status", "update"): (Use(
        "extender.kube.binder:KubeBinder.reserve_claims",
        'self.conn.request("PUT", path + "/status", body=body)'),),
    ("", "events", "create"): (Use(
        "extender.kube.events:KubeEvents._write",
        '"POST", f"/api/v1/namespaces/{namespace}/events"'),),
}
LEASE = "coordination.k8s.io"
LEASE_USES: dict[tuple[str, str, str], tuple[Use, ...]] = {
    (LEASE, "leases", "get"): (Use("extender.kube.lease:LeaseLock.get",
                                   '"GET", f"{self.path}/{self.name}"'),),
    (LEASE, "leases", "create"): (Use("extender.kube.lease:LeaseLock.create",
                                      '"POST", self.path'),),
    (LEASE, "leases", "update"): (Use("extender.kube.lease:LeaseLock.update",
                                      '"PUT", f"{self.path}/{self.name}"'),),
}
"""Leader election (``--leader-elect``): the elector's Lease, in Muster's namespaced Role."""
ELECTION_MODULES = ("extender.kube.lease", "extender.kube.elector")
"""Modules ``muster serve --leader-elect`` uses besides those live.py imports."""

for _type in (*(getattr(live, n) for n in FIXED_INFORMERS), *live.DEVICE_TYPES):
    assert _type in {t for t, _ in live.FIXED}
    _started = Use("extender.kube.live:Watches.start", "self.fixed")
    USES[(_type.group, _type.plural, "list")] = (_started, INFORMER_LIST)
    USES[(_type.group, _type.plural, "watch")] = (_started, INFORMER_WATCH)

OWNER_RESOURCES = {
    "Job": ("batch", "jobs"), "ReplicaSet": ("apps", "replicasets"),
    "Deployment": ("apps", "deployments"), "StatefulSet": ("apps", "statefulsets"),
    "Revision": ("serving.knative.dev", "revisions"),
    "Configuration": ("serving.knative.dev", "configurations"),
    "PodClique": ("grove.io", "podcliques"),
    "PodCliqueScalingGroup": ("grove.io", "podcliquescalinggroups"),
    "DynamoComponentDeployment": ("nvidia.com", "dynamocomponentdeployments"),
}
"""Owner kinds the catalog names that no descriptor targets (whose plural it would give)."""


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((MANIFESTS / name).read_text()) if d]


def rbac() -> list[dict[str, Any]]:
    return documents("rbac.yaml")


def rules_of(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    out = set()
    for rule in role.get("rules") or []:
        assert "nonResourceURLs" not in rule, rule  # discovery is every user's already
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.update((group, resource, verb) for verb in rule["verbs"])
    return out


def aggregated(label: str) -> list[dict[str, Any]]:
    return [d for d in rbac() if d["kind"] == "ClusterRole"
            and (d["metadata"].get("labels") or {}).get(label) == "true"]


def function(where: str) -> Any:
    module, qualname = where.split(":")
    target: Any = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def catalog_resources() -> set[tuple[str, str]]:
    """(group, plural) of every kind the packaged catalog targets or walks through."""
    descriptors = packaged_catalog().descriptors
    targets = {d.target.kind: (d.target.group, d.target.plural) for d in descriptors}
    out = set(targets.values())
    for d in descriptors:
        for owner in d.pods.owners:
            assert owner in targets or owner in OWNER_RESOURCES, (
                f"{d.name} walks through {owner}: add it to OWNER_RESOURCES and rbac.yaml")
            out.add(targets.get(owner) or OWNER_RESOURCES[owner])
    return out


def bindings_of(account: str) -> set[tuple[str, str, str]]:
    """(binding kind, role kind, role name) bound to ServiceAccount ``account``."""
    return {(d["kind"], d["roleRef"]["kind"], d["roleRef"]["name"]) for d in rbac()
            if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
            for s in d["subjects"]
            if s == {"kind": "ServiceAccount", "name": account, "namespace": "muster-system"}}


def test_every_rule_of_musters_core_role_is_a_request_its_code_makes() -> None:
    [core] = [r for r in aggregated(AGGREGATE) if r["metadata"]["name"] == "muster-core"]
    assert rules_of(core) == set(USES)
    for rule, uses in USES.items():
        for use in uses:
            source = inspect.getsource(function(use.where))
            assert use.needle in source, f"{rule}: {use.where} no longer has {use.needle!r}"


def test_every_api_request_of_the_serving_code_is_in_the_table() -> None:
    """The modules ``muster serve`` talks to the API through (those live.py imports) make
    requests only in functions the table justifies: a new request needs a rule and a row."""
    justified = {use.where for uses in (*USES.values(), *LEASE_USES.values()) for use in uses}
    tree = ast.parse(inspect.getsource(live))
    modules = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
               and node.module and node.module.startswith("extender.kube.")
               and node.module != "extender.kube.client"}  # the facade: its callers count
    modules |= set(ELECTION_MODULES)
    found = set()
    for module in sorted(modules):
        source = Path(importlib.import_module(module).__file__ or "").read_text()
        for cls in ast.walk(ast.parse(source)):
            if not isinstance(cls, ast.ClassDef):
                continue
            for fn in cls.body:
                calls = [c for c in ast.walk(fn) if isinstance(c, ast.Call)
                         and isinstance(c.func, ast.Attribute)
                         and c.func.attr in ("request", "call_api")]
                if isinstance(fn, ast.FunctionDef) and calls:
                    found.add(f"{module}:{cls.name}.{fn.name}")
    assert found == justified - {"extender.kube.live:Watches.start"}


def test_musters_catalog_role_reads_exactly_the_kinds_the_catalog_needs() -> None:
    [catalog] = [r for r in aggregated(AGGREGATE) if r["metadata"]["name"] == "muster-catalog"]
    wanted = catalog_resources() - {(g, r) for g, r, _ in USES}  # pods: in the core role
    assert rules_of(catalog) == {(g, r, v) for g, r in wanted for v in ("list", "watch")}


def test_musters_role_is_the_aggregate_of_the_labelled_roles_only() -> None:
    [role] = [d for d in rbac() if d["kind"] == "ClusterRole"
              and d["metadata"]["name"] == "muster-extender"]
    assert role["aggregationRule"] == {"clusterRoleSelectors": [
        {"matchLabels": {AGGREGATE: "true"}}]}
    assert role["rules"] == []
    assert bindings_of("muster") == {("ClusterRoleBinding", "ClusterRole", "muster-extender"),
                                     ("RoleBinding", "Role", "muster-extender-leader-election")}


def test_musters_lease_role_is_the_requests_its_elector_makes_on_its_one_lease() -> None:
    from extender.server.settings import Settings  # noqa: PLC0415

    [role] = [d for d in rbac() if d["kind"] == "Role"
              and d["metadata"]["name"] == "muster-extender-leader-election"]
    assert rules_of(role) == set(LEASE_USES)
    for rule, uses in LEASE_USES.items():
        for use in uses:
            source = inspect.getsource(function(use.where))
            assert use.needle in source, f"{rule}: {use.where} no longer has {use.needle!r}"
    [muster] = documents("deployment.yaml")
    env = {e["name"]: e for e in muster["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["MUSTER_LEADER_ELECT"]["value"] == "true"
    lease_name = env.get("MUSTER_LEASE_NAME", {}).get("value") or Settings().lease_name
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named == [{"apiGroups": [LEASE], "resources": ["leases"],
                      "resourceNames": [lease_name], "verbs": ["get", "update"]}]
    # The Lease is in the pod's namespace, which is the Role's.
    assert env["MUSTER_LEASE_NAMESPACE"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.namespace"}}
    assert role["metadata"]["namespace"] == muster["metadata"]["namespace"]


def test_kube_scheduler_holds_the_scheduler_roles_and_its_own_lease_only() -> None:
    assert bindings_of("muster-scheduler") == {
        ("ClusterRoleBinding", "ClusterRole", "system:kube-scheduler"),
        ("ClusterRoleBinding", "ClusterRole", "system:volume-scheduler"),
        ("RoleBinding", "Role", "muster-leader-election"),
        ("RoleBinding", "Role", "extension-apiserver-authentication-reader"),
    }
    [cm] = documents("scheduler-config.yaml")
    election = yaml.safe_load(cm["data"]["scheduler-config.yaml"])["leaderElection"]
    [lease] = [d for d in rbac() if d["kind"] == "Role"
               and d["metadata"]["name"] == "muster-leader-election"]
    assert lease["metadata"]["namespace"] == election["resourceNamespace"]
    named = [r for r in lease["rules"] if r.get("resourceNames")]
    assert named == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                      "resourceNames": [election["resourceName"]], "verbs": ["get", "update"]}]


def test_each_deployment_runs_under_its_own_service_account() -> None:
    accounts = {d["metadata"]["name"] for d in rbac() if d["kind"] == "ServiceAccount"}
    [muster] = documents("deployment.yaml")
    [scheduler] = documents("scheduler-deployment.yaml")
    images = {name: [c["image"].split(":")[0] for c in d["spec"]["template"]["spec"][
        "containers"]] for name, d in (("muster", muster), ("muster-scheduler", scheduler))}
    assert images == {"muster": ["ghcr.io/muster-dev/muster"],
                      "muster-scheduler": ["registry.k8s.io/kube-scheduler"]}
    assert {d["spec"]["template"]["spec"]["serviceAccountName"]
            for d in (muster, scheduler)} == accounts == {"muster", "muster-scheduler"}
    assert muster["spec"]["template"]["spec"]["serviceAccountName"] == "muster"


def test_the_informers_started_whatever_the_catalog_says_are_the_tables_and_no_more() -> None:
    assert [t for t, _ in live.FIXED] == [*(getattr(live, n) for n in FIXED_INFORMERS),
                                          *live.DEVICE_TYPES]
    assert {t for t, _ in live.OWNERS_ONLY} <= {t for t, _ in live.FIXED}
