"""What the sandbox does on the local machine besides running processes: its directory,
its loopback ports, and waiting for a component to answer."""

from __future__ import annotations

import shutil
import socket
import ssl
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path


class SandboxError(RuntimeError):
    """Something a person can fix (port in use, build failed, already running)."""


#: Everything a sandbox writes into its directory; ``up`` removes only these, so whatever
#: else the directory holds survives ``up`` and ``down``.
COMPONENTS = ("etcd", "kube-apiserver", "kwok", "kube-controller-manager", "jobset", "lws",
              "kuberay", "muster", "kube-scheduler")
#: ``jobset-certs`` is where earlier releases kept the webhook certificates.
OWN_ENTRIES = ("etcd", "pki", "sa.key", "tokens.csv", "kubeconfig", "scheduler.yaml",
               "processes.json", "sandbox.json", "webhook-certs", "jobset-certs",
               "jobset-config.yaml", "lws-config.yaml", "muster-image",
               *(f"{c}.log" for c in COMPONENTS))


def clear_own(directory: Path) -> None:
    for name in OWN_ENTRIES:
        path = directory / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports the kernel says are free now (bound together)."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_for(name: str, check: Callable[[], bool], *, timeout: float, log: Path | None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    tail = ""
    if log is not None and log.exists():
        tail = "\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:])
    raise SandboxError(f"{name} did not become ready within {timeout:.0f}s{tail}")


def http_ok(url: str, *, token: str | None = None, cafile: Path | None = None) -> bool:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    context = None
    try:
        if url.startswith("https"):
            # The API server writes its self-signed certificate as it starts: a file that
            # exists but is still empty or half-written is "not ready yet", like no answer.
            context = (ssl.create_default_context(cafile=str(cafile))
                       if cafile and cafile.exists() else ssl._create_unverified_context())
        with urllib.request.urlopen(request, timeout=2, context=context) as response:
            return bool(response.status == 200)
    except (OSError, ValueError):
        return False
