"""The serving image `make image` builds without a registry (packaging/image/build.sh) runs
Muster as a non-root user on a read-only root filesystem, with the catalog inside and no
simulator-only dependency. The image is built once per session (:mod:`tests.e2e.images`).
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from collections.abc import Iterator

import pytest

from extender import __version__
from extender.sandbox.local import free_ports
from tests.e2e.images import REPO, built_image, podman

DATA = REPO / "tests" / "unit" / "cli" / "data"
EXAMPLES = REPO / "docs" / "examples"
#: Not even /tmp is writable: podman's --read-only alone mounts tmpfs on /tmp, /var/tmp and
#: /run, which a pod's readOnlyRootFilesystem does not.
READ_ONLY = ("--read-only", "--read-only-tmpfs=false")


@pytest.fixture(scope="module")
def image() -> str:
    return built_image()


GPU_POD = {"metadata": {"name": "p", "namespace": "ml"}, "spec": {"containers": [
    {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}
"""A pod taking a GPU: Muster's to decide (a pod taking none passes every candidate)."""


def test_the_image_reports_its_version_on_a_read_only_root(image: str) -> None:
    done = podman("run", "--rm", *READ_ONLY, image, "muster", "--version")
    assert (done.returncode, done.stdout.strip()) == (0, f"muster {__version__}"), done.stderr


def test_the_image_describes_a_mounted_manifest_with_the_catalog_inside(image: str) -> None:
    done = podman("run", "--rm", *READ_ONLY, "-v", f"{DATA}:/manifests:ro", image,
                  "muster", "describe", "-f", "/manifests/story-jobset.yaml", "-o", "json")
    assert done.returncode == 0, done.stderr
    described = json.loads(done.stdout)
    assert (described["descriptor"], described["descriptorSource"]) == ("jobset", "catalog")
    assert [g["minMember"] for g in described["gangs"]] == [3]


def test_the_image_runs_as_a_numeric_non_root_user(image: str) -> None:
    configured = podman("image", "inspect", "--format", "{{.Config.User}}", image)
    assert configured.stdout.strip() == "10001:10001"
    done = podman("run", "--rm", *READ_ONLY, image, "id", "-u")
    assert done.stdout.strip() == "10001"


def test_the_image_holds_no_simulator_only_dependency(image: str) -> None:
    probe = ("import importlib.util; print([m for m in ('numpy', 'matplotlib', 'ray', 'pip') "
             "if importlib.util.find_spec(m)])")
    done = podman("run", "--rm", *READ_ONLY, image, "python3", "-c", probe)
    assert done.stdout.strip() == "[]", done.stderr


@pytest.fixture()
def serving(image: str) -> Iterator[int]:
    """``muster serve`` from the image on a read-only root, on the host's network."""
    [port] = free_ports(1)
    name = f"muster-image-test-{os.getpid()}"
    started = podman("run", "--detach", "--rm", "--name", name, *READ_ONLY, "--network", "host",
                     "-v", f"{EXAMPLES}:/snapshots:ro", image, "muster", "serve", "--snapshot",
                     "/snapshots/gang-snapshot.yaml", "--host", "127.0.0.1", "--port", str(port))
    assert started.returncode == 0, started.stderr
    try:
        yield port
    finally:
        podman("rm", "--force", "--time", "5", name)


def test_the_image_serves_the_extender_on_a_read_only_root(serving: int, image: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{serving}/readyz", timeout=2) as r:
                ready = json.loads(r.read())
                break
        except OSError:
            assert time.monotonic() < deadline, "muster serve in the image never became ready"
            time.sleep(0.5)
    assert ready["ready"] is True
    body = json.dumps({"Pod": GPU_POD,
                       "NodeNames": ["gpu-a", "gpu-z"]}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{serving}/filter", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as r:
        assert json.loads(r.read())["NodeNames"] == ["gpu-a"]
