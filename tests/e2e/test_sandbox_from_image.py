"""``muster sandbox up --image``: the extender runs from the image `make image` builds (podman,
host network, read-only root, its own non-root user) beside the real control plane, and gangs
are still bound whole or not at all, as API state shows."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from extender.core.workloads.catalog import Catalog
from extender.kube.client import Connection
from extender.sandbox.config import Ports
from extender.sandbox.image import container_name
from extender.sandbox.local import http_ok
from extender.sandbox.sandbox import Sandbox, SandboxSpec
from extender.sandbox.submit import submit
from tests.e2e.conftest import bound, pods_in, scheduled_message, wait_until
from tests.e2e.images import CONTAINERS_CONF, built_image, podman

pytestmark = pytest.mark.e2e

_NAMESPACES = itertools.count()


@pytest.fixture(scope="module")
def image_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    image = built_image()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CONTAINERS_CONF", CONTAINERS_CONF)  # the sandbox's own podman calls
        box = Sandbox(SandboxSpec(directory=tmp_path_factory.mktemp("image-sandbox"), nodes=4,
                                  gpus_per_node=8, ports=Ports(), bind_timeout=15.0,
                                  image=image), say=lambda _m: None)
        box.up()
        try:
            yield box
        finally:
            box.down()
            left = podman("ps", "--all", "--filter", f"name={container_name(box.ports.muster)}",
                          "--format", "{{.Names}}")
            assert left.stdout.strip() == "", "sandbox down left the extender's container"


def _jobset(name: str, namespace: str, pods: int, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": {
            "parallelism": pods, "completions": pods,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": "registry.example/train:1",
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)},
                              "requests": {"cpu": "1"}}}]}}}}}]},
    }


def _of(pods: list[dict[str, Any]], jobset: str) -> list[dict[str, Any]]:
    return [p for p in pods
            if p["metadata"].get("labels", {}).get("jobset.sigs.k8s.io/jobset-name") == jobset]


@pytest.fixture()
def namespace(image_sandbox: Sandbox) -> Iterator[tuple[Connection, str]]:
    conn = image_sandbox.connection()
    name = f"image-{os.getpid()}-{next(_NAMESPACES)}"
    conn.request("POST", "/api/v1/namespaces", body={"metadata": {"name": name}})
    yield conn, name
    conn.request("DELETE", f"/api/v1/namespaces/{name}")


def test_the_extender_is_the_image_running_under_podman(image_sandbox: Sandbox) -> None:
    running = podman("ps", "--filter", f"name={container_name(image_sandbox.ports.muster)}",
                     "--format", "{{.Image}} {{.Command}}")
    assert running.stdout.split()[0] == built_image(), running.stdout
    assert "muster serve" in running.stdout


def test_muster_from_the_image_binds_a_gang_whole_and_none_of_one_that_fits_in_part(
        namespace: tuple[Connection, str], catalog: Catalog) -> None:
    conn, ns = namespace
    # 4 nodes x 8 GPUs: the first gang (3 x 8) fits; the second (2 x 8) then finds one node.
    submit(conn, _jobset("first", ns, 3, 8), catalog)
    assert wait_until(lambda: len(bound(_of(pods_in(conn, ns), "first"))) == 3, timeout=90)
    submit(conn, _jobset("second", ns, 2, 8), catalog)
    assert wait_until(lambda: all(scheduled_message(p) for p in _of(pods_in(conn, ns), "second"))
                      and len(_of(pods_in(conn, ns), "second")) == 2, timeout=60)
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:  # one of its pods would fit alone: none may bind
        assert not bound(_of(pods_in(conn, ns), "second"))
        time.sleep(0.5)
    message = scheduled_message(_of(pods_in(conn, ns), "second")[0])
    assert "gang" in message and "1 of 2 pods fit" in message, message


def test_killing_the_extender_stops_its_container_and_starting_it_runs_a_new_one(
        image_sandbox: Sandbox) -> None:
    name = container_name(image_sandbox.ports.muster)
    image_sandbox.kill("muster")
    assert podman("ps", "--all", "--filter", f"name={name}", "--format", "{{.ID}}").stdout == ""
    assert not http_ok(f"http://127.0.0.1:{image_sandbox.ports.muster}/readyz")
    image_sandbox.start_muster()  # returns once /readyz answers
    running = podman("ps", "--filter", f"name={name}", "--format", "{{.Image}}")
    assert running.stdout.strip() == built_image()
