"""A tenant with the cluster's default ``edit`` role in a namespace lists the Gangs there, on the
real API server with RBAC on: ``manifests/rbac-tenants.yaml`` applied as it is, its rules
aggregated into ``view``, ``edit`` and ``admin`` by the real ``clusterrole-aggregation``
controller, and the user impersonated as ``kubectl --as`` does (``muster get gangs --as``
too). Reading only: the tenant may not write a Gang, nor read another namespace's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from extender.kube.client import Connection, Forbidden
from extender.sandbox.sandbox import Sandbox
from tests.e2e.conftest import scratch_namespace, wait_until
from tests.e2e.test_muster_runs_under_its_service_account import apply, manifests
from tests.unit.cli.helpers import muster

pytestmark = pytest.mark.e2e

USER = "alice"
RBAC = "/apis/rbac.authorization.k8s.io/v1"


def gang(namespace: str) -> dict[str, object]:
    return {"apiVersion": "muster.dev/v1alpha1", "kind": "Gang",
            "metadata": {"name": "jobset-train", "namespace": namespace}}


def as_user(sandbox: Sandbox, user: str) -> Connection:
    conn = sandbox.connection()
    conn.api.set_default_header("Impersonate-User", user)
    return conn


@pytest.fixture
def tenant_namespace(sandbox: Sandbox) -> Iterator[str]:
    """A namespace where ``alice`` has ``edit``, with one Gang in it."""
    admin = sandbox.connection()
    for doc in manifests("rbac-tenants.yaml"):
        apply(admin, doc)

    def aggregated(role: str) -> bool:
        rules = admin.request("GET", f"{RBAC}/clusterroles/{role}").get("rules") or []
        return any("gangs" in r.get("resources", []) and "muster.dev" in r.get("apiGroups", [])
                   for r in rules)

    assert wait_until(lambda: all(aggregated(r) for r in ("view", "edit", "admin")),
                      timeout=60)
    with scratch_namespace(admin, "tenant") as namespace:
        admin.request("POST", f"{RBAC}/namespaces/{namespace}/rolebindings", body={
            "metadata": {"name": f"{USER}-edit"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "edit"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": USER}]})
        admin.request("POST", f"/apis/muster.dev/v1alpha1/namespaces/{namespace}/gangs",
                      body=gang(namespace))
        yield namespace


def test_a_namespaced_edit_user_lists_the_gangs_of_its_namespace(
        sandbox: Sandbox, tenant_namespace: str) -> None:
    alice = as_user(sandbox, USER)
    listed = alice.request("GET", f"/apis/muster.dev/v1alpha1/namespaces/{tenant_namespace}/gangs")
    assert [g["metadata"]["name"] for g in listed["items"]] == ["jobset-train"]


def test_the_edit_user_may_not_write_gangs_nor_read_another_namespaces(
        sandbox: Sandbox, tenant_namespace: str) -> None:
    alice = as_user(sandbox, USER)
    with pytest.raises(Forbidden):
        alice.request("DELETE", f"/apis/muster.dev/v1alpha1/namespaces/{tenant_namespace}"
                                "/gangs/jobset-train")
    with pytest.raises(Forbidden):
        alice.request("GET", "/apis/muster.dev/v1alpha1/namespaces/default/gangs")


def test_muster_get_gangs_as_the_edit_user_lists_them_and_as_a_stranger_is_forbidden(
        sandbox: Sandbox, tenant_namespace: str, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = sandbox.dir / "kubeconfig"
    ran = muster(capsys, "get", "gangs", "-n", tenant_namespace, "--as", USER, "-o", "name",
                 "--kubeconfig", kubeconfig)
    assert ran.code == 0, ran.err
    assert ran.out.split() == ["gang.muster.dev/jobset-train"]
    ran = muster(capsys, "get", "gangs", "-n", tenant_namespace, "--as", "mallory",
                 "--kubeconfig", kubeconfig)
    assert ran.code == 1 and "forbidden" in ran.err.lower()
