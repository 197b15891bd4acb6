"""A plain (non-editable) install of the wheel, in a venv of its own, runs every serving command
from its package data alone: no checkout on the path, no simulator-only dependency installed.

The wheelhouse and the venv are cached under ``~/.cache/muster`` keyed by the dependencies
(``packaging/wheel.sh``): the first run fills them from PyPI, later runs rebuild and reinstall
only Muster's own wheel, offline.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from extender import __version__
from extender.files.catalog import packaged_catalog

REPO = Path(__file__).resolve().parents[2]
STORY = REPO / "tests" / "unit" / "cli" / "data" / "story-jobset.yaml"
SNAPSHOT = REPO / "docs" / "examples" / "gang-snapshot.yaml"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "muster"


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The venv the wheel is installed in (its dependencies from the wheelhouse, offline)."""
    built = subprocess.run(
        ["bash", str(REPO / "packaging" / "wheel.sh"), str(tmp_path_factory.mktemp("dist"))],
        env={**os.environ, "PYTHON": sys.executable}, capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr
    wheel, house = built.stdout.split()
    root = CACHE / "wheel-venv" / Path(house).name
    pip = [str(root / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "--quiet",
           "install", "--no-index", "--find-links", house]
    if not (root / ".complete").exists():
        shutil.rmtree(root, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
        subprocess.run([*pip, wheel], check=True)
        (root / ".complete").touch()
    else:  # the same dependencies: only Muster's own code is new
        subprocess.run([*pip, "--no-deps", "--force-reinstall", wheel], check=True)
    return root


def _muster(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``muster`` from the venv, run away from the checkout and without its PYTHONPATH."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "MUSTER_CONTROLPLANE_BIN", "VIRTUAL_ENV")}
    return subprocess.run([str(venv / "bin" / "muster"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


GPU_POD = {"metadata": {"name": "p", "namespace": "ml"}, "spec": {"containers": [
    {"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}
"""A pod taking a GPU: Muster's to decide (a pod taking none passes every candidate)."""


def test_the_installed_muster_reports_the_version_it_was_built_as(venv: Path,
                                                                   tmp_path: Path) -> None:
    done = _muster(venv, "--version", cwd=tmp_path)
    assert (done.returncode, done.stdout.strip()) == (0, f"muster {__version__}")


def test_a_serving_install_pulls_in_no_simulator_only_dependency(venv: Path,
                                                                 tmp_path: Path) -> None:
    probe = ("import importlib.util; print([m for m in ('numpy', 'matplotlib', 'ray') "
             "if importlib.util.find_spec(m)])")
    done = subprocess.run([str(venv / "bin" / "python"), "-c", probe], cwd=tmp_path,
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_installed_muster_describes_a_workload_with_the_packaged_catalog(
        venv: Path, tmp_path: Path) -> None:
    done = _muster(venv, "describe", "-f", str(STORY), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "descriptor: jobset (muster, catalog)" in done.stdout
    assert "gang: ml/story (minimum 3 of 3 pods, 12 GPUs)" in done.stdout
    listed = _muster(venv, "descriptors", "list", "-o", "json", cwd=tmp_path)
    names = {d["name"] for d in json.loads(listed.stdout)["descriptors"]}
    assert names == {d.name for d in packaged_catalog().descriptors}  # the checkout's, all


def test_the_installed_muster_answers_fit_from_a_snapshot(venv: Path, tmp_path: Path) -> None:
    done = _muster(venv, "fit", "-f", str(STORY), "--snapshot", str(SNAPSHOT), "-o", "json",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    [cluster] = json.loads(done.stdout)["clusters"]
    assert cluster["fits"] and cluster["gangs"][0]["placed"] == 3


def test_the_installed_muster_serves_a_snapshot_until_stopped(venv: Path, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    server = subprocess.Popen(
        [str(venv / "bin" / "muster"), "serve", "--snapshot", str(SNAPSHOT),
         "--host", "127.0.0.1", "--port", str(port)],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert server.poll() is None, server.communicate()[1]
                assert time.monotonic() < deadline, "muster serve never became ready"
                time.sleep(0.3)
        body = json.dumps({"Pod": GPU_POD,
                           "NodeNames": ["gpu-a", "gpu-z"]}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/filter", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as r:
            answer = json.loads(r.read())
        assert answer["NodeNames"] == ["gpu-a"]  # the snapshot's node kept, the unknown one not
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_installed_package_ships_the_files_the_sandbox_reads(venv: Path,
                                                                 tmp_path: Path) -> None:
    probe = ("from extender.sandbox.components import KWOK_STAGES; "
             "from extender.sandbox.sandbox import CRD_FILE; print(CRD_FILE); print(KWOK_STAGES)")
    done = subprocess.run([str(venv / "bin" / "python"), "-c", probe], cwd=tmp_path,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                          capture_output=True, text=True, check=True)
    crd, stages = (Path(line) for line in done.stdout.split())
    assert crd.is_file() and venv in crd.parents
    assert sorted(p.name for p in stages.glob("*.yaml")) == ["nodes.yaml", "pods.yaml"]


def test_the_sandbox_without_a_control_plane_says_in_one_line_where_to_point_it(
        venv: Path, tmp_path: Path) -> None:
    # --no-mpi-operator: the MPI operator's fixed port 8080 is checked first, and another
    # sandbox on this machine (a benchmark's, a developer's) may hold it.
    done = _muster(venv, "sandbox", "up", "--dir", str(tmp_path / "sb"), "--no-mpi-operator",
                   cwd=tmp_path)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 1
    assert len(errors) == 1 and "MUSTER_CONTROLPLANE_BIN" in errors[0], done.stderr
    assert "Traceback" not in done.stderr


def test_a_trace_replay_without_the_sim_extra_says_how_to_install_it(venv: Path,
                                                                     tmp_path: Path) -> None:
    for name in ("pods.csv", "nodes.csv"):
        (tmp_path / name).write_text("")
    done = _muster(venv, "simulate", "--trace", "openb", "--pods", str(tmp_path / "pods.csv"),
                   "--nodes", str(tmp_path / "nodes.csv"), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.strip() == ("error: --trace needs numpy, which a serving install leaves "
                                   "out; install the simulator's extra: pip install 'muster[sim]'")
