"""A kind described only by a Karta object in the cluster, gang scheduled for real.

The Workload Map CRD (``kartas.run.ai``, the real one from the Karta catalog) and a Karta for
the made-up ``TrainingRun`` kind are applied to the sandbox's API server; no WorkloadDescriptor
and nothing packaged describes the kind. The running Muster must pick the Karta up without a
restart, and kube-scheduler with Muster as its extender must then bind a run's pods all at once,
or keep a run too big for the cluster entirely unbound. Assertions read API state only.
"""

from __future__ import annotations

import contextlib
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import yaml

from extender.core.karta.compile import compile_karta
from extender.core.workloads.catalog import Catalog
from extender.kube.client import Connection, KubeError
from extender.sandbox.controllers import adopt, children
from extender.sandbox.sandbox import Sandbox
from extender.sandbox.submit import create, submit
from tests.e2e.conftest import SHARED, bound, pods_in, scheduled_message, wait_until
from tests.unit.karta.builders import (
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    training_run,
    training_run_karta,
)

pytestmark = pytest.mark.e2e

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def established(conn: Connection, name: str) -> bool:
    status = conn.request("GET", f"{CRDS}/{name}").get("status", {})
    return any(c.get("type") == "Established" and c.get("status") == "True"
               for c in status.get("conditions") or [])


def run_crd() -> dict[str, Any]:
    """What an operator's chart would install: a namespaced kind with a status subresource."""
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{PLURAL}.{GROUP}"},
            "spec": {"group": GROUP, "scope": "Namespaced",
                     "names": {"kind": KIND, "plural": PLURAL, "singular": KIND.lower(),
                               "listKind": f"{KIND}List"},
                     "versions": [{"name": VERSION, "served": True, "storage": True,
                                   "subresources": {"status": {}},
                                   "schema": {"openAPIV3Schema": {
                                       "type": "object",
                                       "x-kubernetes-preserve-unknown-fields": True}}}]}}


def muster_gangs(sandbox: Sandbox) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{sandbox.ports.muster}/inspect/gangs"
    with urllib.request.urlopen(url, timeout=5) as response:
        gangs: list[dict[str, Any]] = orjson.loads(response.read())["gangs"]
    return gangs


def muster_sees(sandbox: Sandbox, gang: str, pods: int) -> bool:
    with contextlib.suppress(OSError):
        return any(g["gang"] == gang and g["pods"] == pods for g in muster_gangs(sandbox))
    return False


@pytest.fixture(scope="module")
def karta_catalog(sandbox: Sandbox) -> Iterator[Catalog]:
    """The Karta CRD, the TrainingRun CRD and the Karta, applied once for this module."""
    conn = sandbox.connection()
    karta_crd = yaml.safe_load((SHARED / "karta-catalog" / "crd" / "run.ai_kartas.yaml")
                               .read_text())
    for crd in (karta_crd, run_crd()):
        conn.request("POST", CRDS, body=crd)
        assert wait_until(lambda name=crd["metadata"]["name"]: established(conn, name),
                          timeout=30)
    karta = training_run_karta()
    # Retried: the API server may need a moment after Established to serve the new group.
    assert wait_until(lambda: _created(conn, "/apis/run.ai/v1alpha1/kartas", karta),
                      timeout=30)
    yield Catalog.of([compile_karta(karta)])
    with contextlib.suppress(KubeError):
        conn.request("DELETE", "/apis/run.ai/v1alpha1/kartas/trainingrun")


def _created(conn: Connection, path: str, body: dict[str, Any]) -> bool:
    try:
        conn.request("POST", path, body=body)
    except KubeError as err:
        return "already exists" in str(err)
    return True


def stage(conn: Connection, sandbox: Sandbox, run: dict[str, Any],
          catalog: Catalog) -> list[dict[str, Any]]:
    """Create the run, wait until Muster describes it as a gang, return its pods to create.

    kube-scheduler retries a pod Muster turned away only on a cluster event, so the pods are
    created only once Muster knows the run is one gang (otherwise the first ones would be
    taken for lone pods, or wait for an event that never comes).
    """
    sub = submit(conn, run, catalog, with_children=False)
    key = f"{run['metadata']['namespace']}/{run['metadata']['name']}"
    assert wait_until(lambda: muster_sees(sandbox, key, sub.tree.pods), timeout=60), \
        f"Muster never reported gang {key} from the cluster's Karta"
    _, pods = children(sub.workload, sub.tree, catalog.require(sub.workload))
    return [adopt(p, {}) for p in pods]


def test_a_gang_described_only_by_a_karta_object_is_bound_whole(
        sandbox: Sandbox, namespace: str, karta_catalog: Catalog) -> None:
    conn = sandbox.connection()
    run = training_run("train", workers=3, gpus=8, namespace=namespace)
    pods = stage(conn, sandbox, run, karta_catalog)
    assert len(pods) == 3
    for pod in pods:
        create(conn, pod, "pods")
    assert wait_until(lambda: len(bound(pods_in(conn, namespace))) == 3, timeout=60), \
        [scheduled_message(p) for p in pods_in(conn, namespace)]
    nodes = {p["spec"]["nodeName"] for p in pods_in(conn, namespace)}
    assert len(nodes) == 3  # 8 GPUs each on 8-GPU nodes: one whole node per member
    [gang] = [g for g in muster_gangs(sandbox) if g["gang"] == f"{namespace}/train"]
    assert (gang["state"], gang["bound"], gang["minMember"]) == ("bound", 3, 3)


def test_a_karta_gang_too_big_for_the_cluster_binds_no_member(
        sandbox: Sandbox, namespace: str, karta_catalog: Catalog) -> None:
    conn = sandbox.connection()
    # 5 x 8 GPUs on 4 x 8: one by one, 4 would bind; as a gang, none may.
    run = training_run("huge", workers=5, gpus=8, namespace=namespace)
    for pod in stage(conn, sandbox, run, karta_catalog):
        create(conn, pod, "pods")
    assert wait_until(lambda: all(scheduled_message(p) for p in pods_in(conn, namespace)),
                      timeout=30)
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        assert not bound(pods_in(conn, namespace))
        time.sleep(0.5)
    message = scheduled_message(pods_in(conn, namespace)[0])
    assert "gang" in message and "4 of 5 pods fit" in message, message
