"""Two ``muster serve`` processes run side by side on one machine, and one starts with a
read-only HOME (the Deployment's read-only root filesystem): gunicorn's control socket, one
fixed path in $HOME or $XDG_RUNTIME_DIR that a second instance would take over and a read-only
root refuses, is never opened."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
import yaml

from extender.server.runner import gunicorn_options
from tests.unit.server.builders import gpu_node
from tests.unit.server.served import ROOT, free_port
from tests.unit.server.test_served_by_gunicorn_on_loopback import call


def _snapshot(directory: Path) -> Path:
    path = directory / "cluster.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List",
                                    "items": [gpu_node("n0")]}))
    return path


@contextmanager
def _serving(argv: Sequence[str], env: dict[str, str], port: int,
             log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if call(port, "/readyz")[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        else:
            proc.kill()
            proc.wait(timeout=10)
            raise AssertionError(log.read_text())
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _serve_argv(snapshot: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "extender.cli.main", "serve", "--snapshot", str(snapshot),
            "--port", str(port), "--log-level", "debug"]


def _read_only(home: Path, argv: list[str]) -> list[str]:
    """``argv`` run with ``home`` read-only: by permissions, or for root (whom permissions do
    not stop) in a private mount namespace with a read-only tmpfs over it."""
    if os.geteuid() != 0:
        home.chmod(0o500)
        return argv
    if shutil.which("unshare") is None:
        pytest.skip("root without unshare: cannot make HOME read-only")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("no mount namespaces here")
    script = 'mount -t tmpfs -o ro tmpfs "$0" && exec "$@"'
    return ["unshare", "-m", "sh", "-c", script, str(home), *argv]


def test_gunicorn_is_told_to_open_no_control_socket() -> None:
    options = gunicorn_options(host="127.0.0.1", port=1, threads=2, log_level="info")
    assert options["control_socket_disable"] is True


def test_two_instances_start_side_by_side_and_one_with_a_read_only_home(tmp_path: Path) -> None:
    snapshot = _snapshot(tmp_path)
    shared_home = tmp_path / "home"
    shared_home.mkdir()
    runtime = tmp_path / "run"
    runtime.mkdir()
    read_only_home = tmp_path / "ro-home"
    read_only_home.mkdir()
    base = {k: v for k, v in os.environ.items() if k not in ("HOME", "XDG_RUNTIME_DIR")}
    ports = [free_port() for _ in range(3)]
    logs = [tmp_path / f"serve-{i}.log" for i in range(3)]
    with ExitStack() as stack:
        # Two instances of one user: the same HOME and XDG_RUNTIME_DIR.
        for i in range(2):
            stack.enter_context(_serving(
                _serve_argv(snapshot, ports[i]),
                {**base, "HOME": str(shared_home), "XDG_RUNTIME_DIR": str(runtime)},
                ports[i], logs[i]))
        stack.enter_context(_serving(
            _read_only(read_only_home, _serve_argv(snapshot, ports[2])),
            {**base, "HOME": str(read_only_home)}, ports[2], logs[2]))
        for port in ports:
            assert call(port, "/healthz")[0] == 200
        assert sorted(p.name for p in runtime.iterdir()) == []
        assert ".gunicorn" not in {p.name for p in shared_home.iterdir()}
    for log in logs:
        text = log.read_text().lower()
        assert "control socket" not in text.replace("control socket disabled", "")
        assert "control server error" not in text and "traceback" not in text


def test_serve_starts_without_matplotlib_which_writes_under_home() -> None:
    probe = ("import sys\nfrom extender.cli.main import build_parser\nbuild_parser()\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))")
    ran = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True)
    assert ran.stdout.strip() == "[]"
