"""What the sandbox does on the local machine besides running processes: its directory,
its loopback ports, and waiting for a component to answer."""

from __future__ import annotations

import random
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
              "kuberay", "mpi-operator", "trainer", "kueue", "muster", "kube-scheduler")
#: ``jobset-certs`` is where earlier releases kept the webhook certificates; ``trainer-tmp``
#: is Trainer's TMPDIR, where it finds them; ``kueue-etc`` the overlay on /etc that shows
#: Kueue its metrics certificate.
OWN_ENTRIES = ("etcd", "pki", "sa.key", "tokens.csv", "kubeconfig", "scheduler.yaml",
               "processes.json", "sandbox.json", "webhook-certs", "jobset-certs",
               "jobset-config.yaml", "lws-config.yaml", "trainer-config.yaml", "trainer-tmp",
               "kueue-config.yaml", "kueue-etc",
               "muster-image", *(f"{c}.log" for c in COMPONENTS))


def clear_own(directory: Path) -> None:
    for name in OWN_ENTRIES:
        path = directory / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


#: Where the kernel picks the local port of an outgoing connection. A sandbox port in this
#: range can be taken, while its component is down, by any client's connection (kube-scheduler
#: dialling the stopped extender may even connect to itself), and then the component cannot
#: bind it again; so sandbox ports are chosen below it.
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: The lowest port the sandbox chooses by itself.
LOWEST_PORT = 10000


def ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default, 32768, if unknown)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(count: int, *, rng: random.Random | None = None) -> list[int]:
    """``count`` distinct ports free now, below the kernel's ephemeral range when it leaves
    room (see :data:`EPHEMERAL_RANGE`), else wherever the kernel says."""
    low = ephemeral_low()
    if low - LOWEST_PORT < 1000:
        return _kernel_ports(count)
    pick = rng or random.SystemRandom()
    chosen: list[int] = []
    for _ in range(count * 50):
        port = pick.randrange(LOWEST_PORT, low)
        if port not in chosen and port_free(port):
            chosen.append(port)
            if len(chosen) == count:
                return chosen
    raise SandboxError(f"no {count} free ports between {LOWEST_PORT} and {low}")


def _kernel_ports(count: int) -> list[int]:
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
