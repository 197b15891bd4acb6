"""A kind described only by a Karta is gang scheduled: ``serve --no-builtin --descriptors``.

The Karta catalog's PyTorchJob descriptor, with the packaged catalog left out, is the only
thing that tells Muster a PyTorchJob's pods are one gang. Filter and bind must then admit the
gang whole, and keep a gang too big for the cluster waiting whole, through the Flask app built
by the same code ``muster serve`` runs, and through gunicorn itself.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from flask.testing import FlaskClient

from extender.cli.serve import base_catalog, settings_from
from extender.server.app import create_app
from extender.server.settings import Settings, SettingsError, build_settings
from extender.state.build import CatalogSnapshots
from extender.state.memory import MemoryBinder
from extender.state.ports import MemoryEvents
from extender.state.store import DESCRIPTORS, NODES, PODS, StateStore
from tests.unit.server.builders import bind_body, filter_body, gpu_node
from tests.unit.server.served import free_port
from tests.unit.server.test_served_by_gunicorn_on_loopback import call

ROOT = Path(__file__).resolve().parents[3]
KARTAS = ROOT.parent / "shared" / "karta-catalog"
NODE_NAMES = ["n0", "n1", "n2", "n3"]
GPU = "nvidia.com/gpu"


def pytorchjob(name: str, *, workers: int, gpus: int) -> dict[str, Any]:
    def spec(role: str, replicas: int) -> dict[str, Any]:
        return {"replicas": replicas, "template": {"spec": {"containers": [{
            "name": "pytorch", "image": "registry.example/train:1",
            "resources": {"limits": {GPU: str(gpus)}}}]}}}

    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name, "namespace": "ml", "uid": f"pt-{name}"},
            "spec": {"pytorchReplicaSpecs": {"Master": spec("master", 1),
                                             "Worker": spec("worker", workers)}}}


def member(job: dict[str, Any], role: str, index: int, *, gpus: int) -> dict[str, Any]:
    """A pod as the training operator makes it: owned by the job, labelled by role."""
    name = job["metadata"]["name"]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-{role}-{index}", "namespace": "ml",
                         "uid": f"uid-{name}-{role}-{index}",
                         "labels": {"training.kubeflow.org/job-name": name,
                                    "training.kubeflow.org/replica-type": role},
                         "ownerReferences": [{"apiVersion": "kubeflow.org/v1",
                                              "kind": "PyTorchJob", "name": name,
                                              "uid": job["metadata"]["uid"],
                                              "controller": True}]},
            "spec": {"schedulerName": "muster", "containers": [{
                "name": "pytorch", "image": "registry.example/train:1",
                "resources": {"limits": {GPU: str(gpus)}, "requests": {GPU: str(gpus)}}}]},
            "status": {"phase": "Pending"}}


def members(job: dict[str, Any], *, gpus: int) -> list[dict[str, Any]]:
    workers = job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
    return [member(job, "master", 0, gpus=gpus),
            *(member(job, "worker", i, gpus=gpus) for i in range(workers))]


def karta_only_settings(**more: Any) -> Settings:
    return build_settings({"no_builtin": True, "descriptors": (str(KARTAS),), **more}, {})


class KartaWorld:
    def __init__(self, objects: list[dict[str, Any]], *, bind_timeout: float = 2.0) -> None:
        settings = karta_only_settings(bind_timeout=bind_timeout)
        self.store = StateStore(CatalogSnapshots(base_catalog(settings)),
                                expected=[NODES, PODS, DESCRIPTORS])
        self.store.load(objects)
        self.binder = MemoryBinder(self.store)
        app = create_app(settings, self.store, time.time, binder=self.binder,
                         events=MemoryEvents())
        self.client: FlaskClient = app.test_client()

    def post(self, verb: str, body: bytes) -> Any:
        response = self.client.post(f"/{verb}", data=body,
                                    headers={"Content-Type": "application/json"})
        assert response.status_code == 200, response.data
        return orjson.loads(response.data)

    def gangs(self) -> list[dict[str, Any]]:
        gangs: list[dict[str, Any]] = orjson.loads(self.client.get("/inspect/gangs").data)[
            "gangs"]
        return gangs


def assign(gang: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, str]:
    """Each pod's node in the gang's plan (slots are per role), as kube-scheduler would pick."""
    free = [(slot["role"], slot["node"]) for slot in gang["plan"]
            for _ in range(slot["pods"])]
    out = {}
    for pod in pods:
        role = pod["metadata"]["labels"]["training.kubeflow.org/replica-type"]
        slot = next(s for s in free if s[0] == role)
        free.remove(slot)
        out[pod["metadata"]["name"]] = slot[1]
    return out


def nodes() -> list[dict[str, Any]]:
    return [gpu_node(n, gpus=8) for n in NODE_NAMES]


def test_no_builtin_leaves_the_karta_as_the_only_descriptor_of_a_catalog_kind() -> None:
    with_builtin = base_catalog(build_settings({"descriptors": (str(KARTAS),)}, {}))
    found = with_builtin.for_api("kubeflow.org/v1", "PyTorchJob")
    assert found is not None and found.format == "muster"  # native wins when it is there
    only = base_catalog(karta_only_settings()).for_api("kubeflow.org/v1", "PyTorchJob")
    assert only is not None and (only.name, only.format) == ("kubeflow-org-pytorchjob-v1",
                                                             "karta")


def test_a_gang_described_only_by_a_karta_is_filtered_and_bound_whole() -> None:
    job = pytorchjob("train", workers=3, gpus=8)
    pods = members(job, gpus=8)
    world = KartaWorld([*nodes(), job, *pods])
    [tree] = world.store.snapshot().workloads.values()
    assert (tree.descriptor_format, tree.descriptor) == ("karta", "kubeflow-org-pytorchjob-v1")
    offered = [world.post("filter", filter_body(pod, NODE_NAMES)) for pod in pods]
    assert all(r["Error"] == "" and r["NodeNames"] for r in offered), offered
    [gang] = world.gangs()
    assert (gang["gang"], gang["minMember"], gang["pods"]) == ("ml/train", 4, 4)
    planned = assign(gang, pods)
    assert sorted(planned.values()) == NODE_NAMES  # four 8-GPU pods: one whole node each
    for pod, result in zip(pods, offered, strict=True):
        assert planned[pod["metadata"]["name"]] in result["NodeNames"]
    errors: dict[str, str] = {}

    def bind(pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        errors[name] = world.post("bind", bind_body(pod, planned[name]))["Error"]

    threads = [threading.Thread(target=bind, args=(p,)) for p in pods]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert errors == {p["metadata"]["name"]: "" for p in pods}
    assert sorted(world.binder.bindings.values()) == NODE_NAMES
    [gang] = world.gangs()
    assert (gang["state"], gang["bound"]) == ("bound", 4)


def test_a_karta_gang_too_big_for_the_cluster_waits_whole() -> None:
    job = pytorchjob("huge", workers=4, gpus=8)  # 5 x 8 GPUs on 4 x 8: 4 would fit alone
    pods = members(job, gpus=8)
    world = KartaWorld([*nodes(), job, *pods], bind_timeout=0.3)
    for pod in pods:
        result = world.post("filter", filter_body(pod, NODE_NAMES))
        assert result["NodeNames"] == [], result
        reasons = {**result["FailedNodes"], **result["FailedAndUnresolvableNodes"]}
        assert set(reasons) == set(NODE_NAMES)
        assert all("ml/huge" in why for why in reasons.values()), reasons
    # Even a bind kube-scheduler sends anyway is held and then refused: nothing binds.
    assert "ml/huge" in world.post("bind", bind_body(pods[0], "n0"))["Error"]
    assert world.binder.bindings == {}
    [gang] = world.gangs()
    assert (gang["state"], gang["bound"], gang["minMember"]) == ("waiting", 0, 5)


def test_no_builtin_comes_from_the_environment_and_is_checked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert build_settings({}, {"MUSTER_NO_BUILTIN": "true"}).no_builtin is True
    assert build_settings({}, {"MUSTER_NO_BUILTIN": "0"}).no_builtin is False
    with pytest.raises(SettingsError, match="MUSTER_NO_BUILTIN='sometimes': expected true or "
                                            "false"):
        build_settings({}, {"MUSTER_NO_BUILTIN": "sometimes"})
    args = type("Args", (), {"descriptors": ["a", "b"], "no_builtin": None})()
    assert settings_from(args, {"MUSTER_NO_BUILTIN": "yes"}).no_builtin is True  # type: ignore[arg-type]
    assert settings_from(args, {}).descriptors == ("a", "b")  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def karta_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    snapshot = tmp_path_factory.mktemp("karta-snap") / "cluster.yaml"
    job = pytorchjob("train", workers=1, gpus=8)
    items = [gpu_node("n0"), gpu_node("n1"), job, *members(job, gpus=8)]
    snapshot.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    port = free_port()
    env = {**os.environ, "MUSTER_BIND_TIMEOUT": "2", "MUSTER_LOG_LEVEL": "info",
           "MUSTER_NO_BUILTIN": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "extender.cli.main", "serve", "--snapshot", str(snapshot),
         "--port", str(port), "--descriptors", str(KARTAS / "kubeflow-org-pytorchjob-v1.yaml"),
         "--descriptors", str(KARTAS / "kubeflow-org-mpijob-v2beta1.yaml")],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if call(port, "/readyz")[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        else:
            proc.kill()
            raise AssertionError(proc.communicate(timeout=10)[0].decode())
        yield port
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            out = proc.communicate(timeout=20)[0].decode()
        except subprocess.TimeoutExpired:
            proc.kill()
            out = proc.communicate(timeout=10)[0].decode()
        # Two repeatable --descriptors files, and the packaged catalog left out.
        assert "descriptors=2 builtin=false" in out, out


def test_gunicorn_serves_a_karta_only_gang_whole(karta_server: int) -> None:
    job = pytorchjob("train", workers=1, gpus=8)
    pods = members(job, gpus=8)
    for pod in pods:
        status, data = call(karta_server, "/filter", filter_body(pod, ["n0", "n1"]))
        assert status == 200 and orjson.loads(data)["NodeNames"], data
    [gang] = orjson.loads(call(karta_server, "/inspect/gangs")[1])["gangs"]
    planned = assign(gang, pods)
    assert sorted(planned.values()) == ["n0", "n1"]
    errors: dict[str, str] = {}

    def bind(pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        status, data = call(karta_server, "/bind", bind_body(pod, planned[name]))
        errors[name] = orjson.loads(data)["Error"] if status == 200 else str(status)

    threads = [threading.Thread(target=bind, args=(p,)) for p in pods]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert errors == {p["metadata"]["name"]: "" for p in pods}
    [gang] = orjson.loads(call(karta_server, "/inspect/gangs")[1])["gangs"]
    assert (gang["gang"], gang["state"], gang["bound"]) == ("ml/train", "bound", 2)
