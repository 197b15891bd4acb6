"""Failover on the real control plane: two ``muster serve --leader-elect`` replicas on one
Lease, kube-scheduler calling whichever is ready through :mod:`readiness_forwarder` (the
stand-in for a Service routing to ready endpoints). A JobSet gang of 3 x 8 GPUs is created
with one member late, so the other two are held at Muster's bind barrier; the leader is then
killed with SIGKILL. The standby must take the lease within the lease duration, rebuild from
the cluster and become ready; then:

* the late member arrives and the gang fits: it ends whole (all three bound);
* capacity is taken before the late member arrives and the gang no longer fits: none bound.

Bound counts are polled throughout. No Kubernetes write binds several pods at once, so a
gang's release is seen for an instant as some members bound; what must never be seen is a
partial gang that stays partial: any observation with 0 < bound < 3 must be followed within
the release window by all 3 bound, and before the takeover nothing may be bound at all.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from extender.core.workloads.catalog import Catalog
from extender.core.workloads.workload import resolve_workload
from extender.kube.client import Connection
from extender.sandbox.controllers import children
from extender.sandbox.local import free_ports, http_ok, wait_for
from extender.sandbox.sandbox import Sandbox
from extender.sandbox.submit import create
from tests.e2e.conftest import bound, describe, pods_in, wait_until
from tests.e2e.readiness_forwarder import ReadinessForwarder, ready
from tests.e2e.test_gang_scheduling_with_stand_in_operators import jobset
from tests.e2e.test_muster_runs_under_its_service_account import (
    NAMESPACE,
    installed,  # noqa: F401 - the fixture: the manifests' namespace and RBAC, applied
    service_account_kubeconfig,
)

pytestmark = pytest.mark.e2e

LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 6.0, 4.0, 1.0
MEMBERS, GPUS = 3, 8
RELEASE_WINDOW = 5.0
"""Seconds a gang may be seen partly bound while its barrier's Bindings are being posted."""


@dataclass
class Replica:
    name: str
    port: int
    probe: int

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples of ``name`` carrying ``labels``."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.probe}/metrics",
                                    timeout=5) as response:
            text = response.read().decode()
        wanted = [f'{k}="{v}"' for k, v in labels.items()]
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.split("{")[0].split(" ")[0] == name
                   and all(w in line for w in wanted))


@dataclass
class Pair:
    sandbox: Sandbox
    kubeconfig: Path
    lease_namespace: str
    lease: str
    replicas: dict[str, Replica]
    forwarder: ReadinessForwarder

    def holder(self) -> str:
        lease = self.sandbox.connection().request(
            "GET", f"/apis/coordination.k8s.io/v1/namespaces/{self.lease_namespace}/leases/"
                   f"{self.lease}")
        return str(lease["spec"].get("holderIdentity") or "")

    def start(self, name: str) -> None:
        spec, r = self.sandbox.spec, self.replicas[name]
        proc = self.sandbox.table.start(name, [
            sys.executable, "-m", "extender.cli.main", "serve",
            "--kubeconfig", str(self.kubeconfig),
            "--host", "127.0.0.1", "--port", str(r.port), "--probe-port", str(r.probe),
            "--bind-timeout", str(spec.bind_timeout), "--plan-ttl", "120s",
            "--scheduler-names", "muster,default-scheduler",
            "--leader-elect", "--lease-name", self.lease,
            "--lease-namespace", self.lease_namespace, "--leader-identity", name,
            "--lease-duration", f"{LEASE_DURATION:g}s", "--renew-deadline",
            f"{RENEW_DEADLINE:g}s", "--retry-period", f"{RETRY_PERIOD:g}s"])
        wait_for(name, lambda: http_ok(f"http://127.0.0.1:{r.probe}/healthz"), timeout=60,
                 log=Path(proc.log))

    def log(self, name: str) -> str:
        return (self.sandbox.dir / f"{name}.log").read_text()[-4000:]


@pytest.fixture()
def pair(sandbox: Sandbox, installed: Connection) -> Iterator[Pair]:  # noqa: F811
    """The sandbox's Muster replaced by two electing replicas behind the forwarder, on the
    port kube-scheduler calls, under the manifests' ``muster`` ServiceAccount and RBAC, on
    the manifests' Lease ``muster-system/muster``; ``muster-a`` leads, ``muster-b`` stands
    by."""
    kubeconfig = service_account_kubeconfig(installed, sandbox, "muster")
    ports = free_ports(4)
    replicas = {"muster-a": Replica("muster-a", ports[0], ports[1]),
                "muster-b": Replica("muster-b", ports[2], ports[3])}
    sandbox.kill("muster")
    try:  # whatever fails from here on, the sandbox's Muster is started again for later tests
        forwarder = ReadinessForwarder(sandbox.ports.muster,
                                       [(r.port, r.probe) for r in replicas.values()])
        made = Pair(sandbox, kubeconfig, NAMESPACE, "muster", replicas, forwarder)
        with forwarder:
            made.start("muster-a")
            a = replicas["muster-a"]
            # A Lease left by an earlier test's replicas is waited out first.
            assert wait_until(lambda: ready(a.probe), timeout=60), made.log("muster-a")
            made.start("muster-b")
            assert made.holder() == "muster-a"
            yield made
    finally:
        for name in replicas:
            with contextlib.suppress(KeyError):
                sandbox.kill(name)
        sandbox.start_muster()


def gang_with_a_late_member(conn: Connection, catalog: Catalog, namespace: str) -> str:
    """A JobSet of 3 x 8 GPUs whose Job first makes only 2 pods; returns the Job's path, to
    raise its parallelism when the late member should come."""
    obj = jobset("ha", namespace, ("workers", MEMBERS, GPUS))
    descriptor = catalog.require(obj)
    created = create(conn, obj, descriptor.target.plural)
    tree = resolve_workload(created, descriptor)
    [job], _ = children(created, tree, descriptor, pods_by_caller=False)
    job["spec"]["parallelism"] = MEMBERS - 1
    done = create(conn, job, "jobs")
    return f"/apis/batch/v1/namespaces/{namespace}/jobs/{done['metadata']['name']}"


def late_member_arrives(conn: Connection, job: str) -> None:
    conn.request("PATCH", job, body={"spec": {"parallelism": MEMBERS}},
                 content_type="application/merge-patch+json")


def kill_leader_with_two_members_held(pair: Pair, conn: Connection, namespace: str) -> float:
    a = pair.replicas["muster-a"]
    assert wait_until(lambda: a.metric("muster_binds_waiting") == MEMBERS - 1, timeout=60), (
        describe(conn, namespace), pair.log("muster-a"))
    assert bound(pods_in(conn, namespace)) == []
    pair.sandbox.kill("muster-a")  # SIGKILL: no release, no goodbye
    return time.monotonic()


def takeover_seconds(pair: Pair, killed: float, observe: list[tuple[float, int]],
                     conn: Connection, namespace: str) -> float:
    """Wait for muster-b to lead and be ready, observing bound counts meanwhile."""
    b = pair.replicas["muster-b"]
    deadline = killed + LEASE_DURATION + 20
    while time.monotonic() < deadline:
        observe.append((time.monotonic(), len(bound(pods_in(conn, namespace)))))
        if ready(b.probe):
            break
        time.sleep(0.2)
    assert ready(b.probe), pair.log("muster-b")
    assert pair.holder() == "muster-b"
    return time.monotonic() - killed


def watch_bound(conn: Connection, namespace: str, observe: list[tuple[float, int]], *,
                seconds: float, until_whole: bool) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        count = len(bound(pods_in(conn, namespace)))
        observe.append((time.monotonic(), count))
        if until_whole and count == MEMBERS:
            return
        time.sleep(0.2)


def partial_spells(observe: list[tuple[float, int]]) -> list[tuple[float, float]]:
    """(start, length) of each run of observations with a partly bound gang."""
    spells, start = [], None
    for at, count in observe:
        if 0 < count < MEMBERS and start is None:
            start = at
        elif not 0 < count < MEMBERS and start is not None:
            spells.append((start, at - start))
            start = None
    if start is not None:
        spells.append((start, float("inf")))
    return spells


def test_the_standby_takes_over_and_the_gang_ends_whole(
        pair: Pair, sandbox: Sandbox, namespace: str, catalog: Catalog) -> None:
    conn = sandbox.connection()
    job = gang_with_a_late_member(conn, catalog, namespace)
    killed = kill_leader_with_two_members_held(pair, conn, namespace)
    observe: list[tuple[float, int]] = []
    took = takeover_seconds(pair, killed, observe, conn, namespace)
    assert took <= LEASE_DURATION + RETRY_PERIOD * 1.2 + 3, took  # + rebuild and probe lag
    assert all(count == 0 for _, count in observe), observe  # nothing bound leaderless
    late_member_arrives(conn, job)
    watch_bound(conn, namespace, observe, seconds=90, until_whole=True)
    assert observe[-1][1] == MEMBERS, (describe(conn, namespace), pair.log("muster-b"))
    assert all(length <= RELEASE_WINDOW for _, length in partial_spells(observe)), observe
    # Still whole a moment later, one 8-GPU member per node.
    pods = pods_in(conn, namespace)
    assert len(bound(pods)) == MEMBERS
    assert len({p["spec"]["nodeName"] for p in pods}) == MEMBERS
    b = pair.replicas["muster-b"]
    assert b.metric("muster_leader") == 1
    decided = (b.metric("muster_decisions_total", verb="bind")
               - b.metric("muster_decisions_total", verb="bind", outcome="standby"))
    assert decided >= MEMBERS  # b, leading, answered the binds


def test_a_gang_that_no_longer_fits_after_the_takeover_ends_with_none_bound(
        pair: Pair, sandbox: Sandbox, namespace: str, catalog: Catalog) -> None:
    conn = sandbox.connection()
    job = gang_with_a_late_member(conn, catalog, namespace)
    killed = kill_leader_with_two_members_held(pair, conn, namespace)
    # While no one leads, two whole nodes are taken: 16 of 32 GPUs stay free, the gang
    # needs 24.
    nodes = sorted(n["metadata"]["name"] for n in conn.request("GET", "/api/v1/nodes")["items"])
    for i, node in enumerate(nodes[:2]):
        conn.request("POST", f"/api/v1/namespaces/{namespace}/pods", body={
            "metadata": {"name": f"filler-{i}"},
            "spec": {"nodeName": node, "containers": [{
                "name": "main", "image": "registry.example/other:1",
                "resources": {"limits": {"nvidia.com/gpu": str(GPUS)}}}],
                "tolerations": [{"operator": "Exists"}]}})
    observe: list[tuple[float, int]] = []

    def gang_bound() -> int:
        return len([p for p in bound(pods_in(conn, namespace))
                    if not p["metadata"]["name"].startswith("filler-")])

    took = takeover_seconds(pair, killed, [], conn, namespace)
    assert took <= LEASE_DURATION + RETRY_PERIOD * 1.2 + 3, took
    late_member_arrives(conn, job)
    b = pair.replicas["muster-b"]
    filters_before = b.metric("muster_decisions_total", verb="filter")
    deadline = time.monotonic() + 25
    while time.monotonic() < deadline:
        observe.append((time.monotonic(), gang_bound()))
        time.sleep(0.2)
    assert {count for _, count in observe} == {0}, (observe, describe(conn, namespace))
    gang = [p for p in pods_in(conn, namespace) if not p["metadata"]["name"].startswith("f")]
    assert len(gang) == MEMBERS
    # The new leader was asked and refused (it decided; it did not just go unasked).
    assert b.metric("muster_decisions_total", verb="filter") > filters_before, pair.log("muster-b")




def test_a_leader_stopped_cleanly_gives_the_lease_up_and_the_standby_takes_it_at_once(
        pair: Pair, sandbox: Sandbox) -> None:
    [proc] = [p for p in sandbox.table.load() if p.name == "muster-a"]
    stopped = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)  # a rollout or a drain: gunicorn stops its worker
    b = pair.replicas["muster-b"]
    assert wait_until(lambda: ready(b.probe), timeout=LEASE_DURATION + 10), pair.log("muster-a")
    took = time.monotonic() - stopped
    assert pair.holder() == "muster-b"
    assert "event=lease-released" in pair.log("muster-a")
    assert took < LEASE_DURATION / 2, took  # at b's next try, not after the lease ran out
