"""Muster in the sandbox from its image (``muster sandbox up --image IMAGE``) instead of the
checkout: ``podman run`` on the host's network, the image's own user, a read-only root.

The container sees only ``DIR/muster-image``, mounted read-only at ``/sandbox``: a kubeconfig
naming the CA by its path in there, and the CA. The files are world-readable (the sandbox's
directory may be private to its owner, the image's user is another uid) and hold only the
sandbox's own loopback credentials. ``podman run`` itself is started (and its PID kept) by the
sandbox's process table; here podman only checks the image and removes a container that a
SIGKILL of ``podman run`` left running under conmon.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import yaml

from extender.files.yamlsafe import load_all
from extender.sandbox.local import SandboxError

STAGED = "muster-image"
INSIDE = "/sandbox"


def container_name(port: int) -> str:
    """One name per extender port: a container a killed ``podman run`` left behind is found
    (and removed) by the next start on that port."""
    return f"muster-sandbox-{port}"


def check_image(image: str) -> None:
    """The image is in podman's local storage: never pulled, so a typo fails at once."""
    if shutil.which("podman") is None:
        raise SandboxError("--image needs podman (apt-get install podman runc)")
    found = subprocess.run(["podman", "image", "exists", image], capture_output=True, check=False)
    if found.returncode != 0:
        raise SandboxError(f"image {image} is not in podman's local storage; build it with "
                           "make image (packaging/image/build.sh)")


def stage(directory: Path) -> Path:
    """Write what the container reads into ``DIR/muster-image`` and return that folder."""
    staged = directory / STAGED
    staged.mkdir(mode=0o755, exist_ok=True)
    staged.chmod(0o755)
    [config] = load_all((directory / "kubeconfig").read_text())
    ca = staged / "ca.crt"
    shutil.copyfile(directory / "pki" / "apiserver.crt", ca)
    for entry in config["clusters"]:
        entry["cluster"]["certificate-authority"] = f"{INSIDE}/ca.crt"
    kubeconfig = staged / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
    for path in (ca, kubeconfig):
        path.chmod(0o644)
    return staged


def remove_container(port: int) -> None:
    """Kill and remove the extender's container if one is left: a SIGKILL of ``podman run``
    (a crash, for tests) leaves conmon running it. Nothing to remove is not an error."""
    subprocess.run(["podman", "rm", "--force", "--time", "0", container_name(port)],
                   capture_output=True, check=False)


def muster_argv(image: str, *, directory: Path, port: int, serve_args: Sequence[str],
                descriptor_dirs: Sequence[str] = ()) -> list[str]:
    """Stage the files, remove a container left on ``port``, and return the ``podman run``."""
    staged = stage(directory)
    remove_container(port)
    return run_argv(image, staged=staged, port=port, serve_args=serve_args,
                    descriptor_dirs=descriptor_dirs)


def run_argv(image: str, *, staged: Path, port: int, serve_args: Sequence[str],
             descriptor_dirs: Sequence[str] = ()) -> list[str]:
    """``podman run`` of ``muster serve`` in ``image``, in the foreground: SIGTERM to podman
    reaches Muster (``--sig-proxy``), and ``--rm`` removes the container when it ends."""
    mounts = ["-v", f"{staged.resolve()}:{INSIDE}:ro"]
    inside: list[str] = []
    for i, extra in enumerate(descriptor_dirs):
        mounts += ["-v", f"{Path(extra).resolve()}:{INSIDE}-descriptors-{i}:ro"]
        inside += ["--descriptors", f"{INSIDE}-descriptors-{i}"]
    return [
        "podman", "run", "--rm", "--name", container_name(port), "--pull=never",
        "--network=host", "--read-only", "--read-only-tmpfs=false", "--sig-proxy=true",
        *mounts, image,
        "muster", "serve", "--kubeconfig", f"{INSIDE}/kubeconfig", "--host", "127.0.0.1",
        "--port", str(port), *serve_args, *inside,
    ]
