"""Muster under exactly the permissions ``manifests/rbac.yaml`` gives its ServiceAccount, on the
real API server: the manifests' RBAC applied as they are, Muster's aggregated role filled in by
the real ``clusterrole-aggregation`` controller, a token of the ``muster`` ServiceAccount from
the TokenRequest API instead of the sandbox's admin token. Muster must sync every served kind
of the catalog (no ``forbidden``), bind a gang whole and write its events; and neither
identity may do what only the other needs. Last, the shipped layout whole: the real
kube-scheduler under the ``muster-scheduler`` token, with the manifests' leader election and
extender ``tlsConfig``, calls Muster over mutual TLS (certificates from
``manifests/tls/make-certs.sh``) and a gang is bound whole.
"""

from __future__ import annotations

import contextlib
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from extender.core.workloads.catalog import Catalog
from extender.kube.client import Connection, KubeError
from extender.sandbox.local import free_ports, http_ok, wait_for
from extender.sandbox.sandbox import Sandbox
from extender.sandbox.submit import submit
from tests.e2e.conftest import bound, pods_in, wait_until
from tests.e2e.test_gang_scheduling_with_stand_in_operators import jobset

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "muster-system"
MUSTER = f"system:serviceaccount:{NAMESPACE}:muster"
SCHEDULER = f"system:serviceaccount:{NAMESPACE}:muster-scheduler"


def _path(doc: dict[str, Any]) -> str:
    group, _, version = doc["apiVersion"].rpartition("/")
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    namespace = doc["metadata"].get("namespace")
    plural = doc["kind"].lower() + "s"  # the kinds rbac.yaml and namespace.yaml hold
    return f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"


def apply(conn: Connection, doc: dict[str, Any]) -> None:
    """Create ``doc``, or replace it when a previous session left it."""
    try:
        conn.request("POST", _path(doc), body=doc)
    except KubeError as err:
        if "409" not in str(err):
            raise
        current = conn.request("GET", f"{_path(doc)}/{doc['metadata']['name']}")
        doc = {**doc, "metadata": {**doc["metadata"],
                                   "resourceVersion": current["metadata"]["resourceVersion"]}}
        conn.request("PUT", f"{_path(doc)}/{doc['metadata']['name']}", body=doc)


def manifests(*names: str) -> list[dict[str, Any]]:
    return [d for name in names
            for d in yaml.safe_load_all((REPO / "manifests" / name).read_text()) if d]


def allowed(conn: Connection, user: str, verb: str, resource: str, *, group: str = "",
            namespace: str = "default", subresource: str = "", name: str = "") -> bool:
    review = conn.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body={
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": ["system:serviceaccounts",
                                          f"system:serviceaccounts:{NAMESPACE}",
                                          "system:authenticated"],
                 "resourceAttributes": {"verb": verb, "resource": resource, "group": group,
                                        "namespace": namespace, "subresource": subresource,
                                        "name": name}}})
    return bool(review["status"].get("allowed"))


@pytest.fixture(scope="module")
def installed(sandbox: Sandbox) -> Connection:
    """The manifests' namespace and RBAC, applied, with the aggregated role filled in."""
    conn = sandbox.connection()
    for doc in manifests("namespace.yaml", "rbac.yaml"):
        apply(conn, doc)
    # The sandbox's controller manager runs the clusterrole-aggregation controller, as a
    # cluster's does: it fills Muster's role from the labelled ones.
    def aggregated() -> bool:
        role = conn.request(
            "GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/muster-extender")
        return len(role.get("rules") or []) > 5

    assert wait_until(aggregated, timeout=60)
    return conn


def service_account_kubeconfig(conn: Connection, sandbox: Sandbox, account: str) -> Path:
    request = conn.request(
        "POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{account}/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
              "spec": {"expirationSeconds": 3600}})
    admin = yaml.safe_load((sandbox.dir / "kubeconfig").read_text())
    admin["users"] = [{"name": account, "user": {"token": request["status"]["token"]}}]
    admin["contexts"][0]["context"]["user"] = account
    path = sandbox.dir / f"kubeconfig-{account}"
    path.write_text(yaml.safe_dump(admin))
    return path


@contextlib.contextmanager
def muster_as(sandbox: Sandbox, kubeconfig: Path) -> Iterator[str]:
    """The sandbox's Muster replaced by one using ``kubeconfig``, on the same port (the
    sandbox's kube-scheduler calls it there); the sandbox's own comes back afterwards."""
    spec, port = sandbox.spec, sandbox.ports.muster
    sandbox.kill("muster")
    proc = sandbox.table.start("muster", [
        sys.executable, "-m", "extender.cli.main", "serve", "--kubeconfig", str(kubeconfig),
        "--host", "127.0.0.1", "--port", str(port), "--bind-timeout", str(spec.bind_timeout),
        "--plan-ttl", str(spec.plan_ttl)])
    try:
        wait_for("muster", lambda: http_ok(f"http://127.0.0.1:{port}/readyz"), timeout=60,
                 log=Path(proc.log))
        yield f"http://127.0.0.1:{port}"
    finally:
        sandbox.kill("muster")
        sandbox.start_muster()


def test_muster_syncs_every_served_kind_and_binds_a_gang_with_its_own_token(
        sandbox: Sandbox, installed: Connection, namespace: str, catalog: Catalog) -> None:
    kubeconfig = service_account_kubeconfig(installed, sandbox, "muster")
    with muster_as(sandbox, kubeconfig) as url:
        with urllib.request.urlopen(f"{url}/readyz", timeout=5) as response:
            readiness = orjson.loads(response.read())
        # Every catalog kind the sandbox serves is granted: nothing "cannot watch".
        assert readiness == {"ready": True, "reason": "all sources synced"}, readiness
        conn = sandbox.connection()
        submit(conn, jobset("own-token", namespace, ("workers", 2, 8)), catalog)
        assert wait_until(lambda: len(bound(pods_in(conn, namespace))) == 2, timeout=60)
        events = conn.request("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
        assert "GangAdmitted" in {e["reason"] for e in events
                                  if e.get("source", {}).get("component") == "muster"}


def test_neither_identity_may_do_what_only_the_other_needs(installed: Connection) -> None:
    conn = installed
    # Muster binds and writes events, and may not delete pods or take a scheduler's lease.
    assert allowed(conn, MUSTER, "create", "pods", subresource="binding")
    assert allowed(conn, MUSTER, "create", "events")
    assert allowed(conn, MUSTER, "patch", "pods", subresource="status")
    assert not allowed(conn, MUSTER, "delete", "pods")
    assert not allowed(conn, MUSTER, "update", "pods")
    assert not allowed(conn, MUSTER, "get", "nodes", namespace="")
    assert not allowed(conn, MUSTER, "update", "leases", group="coordination.k8s.io",
                       namespace=NAMESPACE, name="muster-scheduler")
    assert not allowed(conn, MUSTER, "update", "leases", group="coordination.k8s.io",
                       namespace="kube-system", name="kube-scheduler")
    # Muster's replicas elect their leader on their own Lease, and on no other.
    assert allowed(conn, MUSTER, "get", "leases", group="coordination.k8s.io",
                   namespace=NAMESPACE, name="muster")
    assert allowed(conn, MUSTER, "update", "leases", group="coordination.k8s.io",
                   namespace=NAMESPACE, name="muster")
    assert allowed(conn, MUSTER, "create", "leases", group="coordination.k8s.io",
                   namespace=NAMESPACE)
    assert not allowed(conn, MUSTER, "update", "leases", group="coordination.k8s.io",
                       namespace="kube-system", name="muster")
    assert not allowed(conn, SCHEDULER, "update", "leases", group="coordination.k8s.io",
                       namespace=NAMESPACE, name="muster")
    # kube-scheduler schedules and holds its own lease, and reads no workload kind.
    assert allowed(conn, SCHEDULER, "update", "leases", group="coordination.k8s.io",
                   namespace=NAMESPACE, name="muster-scheduler")
    assert allowed(conn, SCHEDULER, "create", "pods", subresource="binding")
    assert not allowed(conn, SCHEDULER, "list", "jobsets", group="jobset.x-k8s.io")
    assert not allowed(conn, SCHEDULER, "list", "workloaddescriptors", group="muster.dev",
                       namespace="")


def scheduler_config(sandbox: Sandbox, kubeconfig: Path, certs: Path) -> Path:
    """The sandbox's kube-scheduler configuration with the manifests' extender TLS and leader
    election, calling Muster at https://127.0.0.1 (the certificate names that address)."""
    config = yaml.safe_load((sandbox.dir / "scheduler.yaml").read_text())
    [cm] = manifests("scheduler-config.yaml")
    shipped = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
    [extender] = config["extenders"]
    [shipped_extender] = shipped["extenders"]
    files = {"tls.crt": "scheduler.crt", "tls.key": "scheduler.key", "ca.crt": "ca.crt"}
    extender["tlsConfig"] = {key: str(certs / files[Path(path).name])
                             for key, path in shipped_extender["tlsConfig"].items()}
    extender["urlPrefix"] = f"https://127.0.0.1:{sandbox.ports.muster}"
    config["leaderElection"] = shipped["leaderElection"]
    config["clientConnection"]["kubeconfig"] = str(kubeconfig)
    path = sandbox.dir / "scheduler-as-service-account.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@contextlib.contextmanager
def scheduler_as(sandbox: Sandbox, config: Path) -> Iterator[None]:
    argv = sandbox.table.killed_argv("kube-scheduler")
    sandbox.table.start("kube-scheduler", [
        f"--config={config}" if a.startswith("--config=") else a for a in argv])
    try:
        yield
    finally:
        sandbox.kill("kube-scheduler")
        sandbox.table.start("kube-scheduler", argv)


def test_the_shipped_layout_schedules_a_gang_over_mutual_tls_under_two_accounts(
        sandbox: Sandbox, installed: Connection, namespace: str, catalog: Catalog) -> None:
    certs = sandbox.dir / "extender-certs"
    subprocess.run(["sh", str(REPO / "manifests" / "tls" / "make-certs.sh"), str(certs),
                    "IP:127.0.0.1"], check=True, capture_output=True, timeout=60)
    spec, port = sandbox.spec, sandbox.ports.muster
    [probe_port] = free_ports(1)
    muster = service_account_kubeconfig(installed, sandbox, "muster")
    scheduler = service_account_kubeconfig(installed, sandbox, "muster-scheduler")
    sandbox.kill("muster")
    proc = sandbox.table.start("muster", [
        sys.executable, "-m", "extender.cli.main", "serve", "--kubeconfig", str(muster),
        "--host", "0.0.0.0", "--port", str(port), "--probe-port", str(probe_port),
        "--tls-cert", str(certs / "muster.crt"), "--tls-key", str(certs / "muster.key"),
        "--tls-client-ca", str(certs / "ca.crt"), "--bind-timeout", str(spec.bind_timeout),
        "--plan-ttl", str(spec.plan_ttl)])
    try:
        wait_for("muster", lambda: http_ok(f"http://127.0.0.1:{probe_port}/readyz"),
                 timeout=60, log=Path(proc.log))
        with scheduler_as(sandbox, scheduler_config(sandbox, scheduler, certs)):
            conn = sandbox.connection()
            submit(conn, jobset("mtls", namespace, ("workers", 2, 8)), catalog)
            assert wait_until(lambda: len(bound(pods_in(conn, namespace))) == 2, timeout=90), \
                Path(proc.log).read_text()[-3000:]
            # Only the holder of the client certificate reaches the verbs.
            no_cert = ssl.create_default_context(cafile=str(certs / "ca.crt"))
            with pytest.raises((ssl.SSLError, ConnectionResetError, urllib.error.URLError)):
                urllib.request.urlopen(f"https://127.0.0.1:{port}/inspect/gangs",
                                       timeout=5, context=no_cert)
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(urllib.request.Request(
                    f"http://127.0.0.1:{probe_port}/bind", data=b"{}"), timeout=5)
            assert refused.value.code == 404
            lease = conn.request("GET", "/apis/coordination.k8s.io/v1/namespaces/"
                                        f"{NAMESPACE}/leases/muster-scheduler")
            assert lease["spec"]["holderIdentity"]
    finally:
        sandbox.kill("muster")
        sandbox.start_muster()
