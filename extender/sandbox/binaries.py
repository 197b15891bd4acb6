"""Find (or build, once, with caching) the control-plane binaries."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kubectl")
BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "tests" / "e2e" / "controlplane" / "build.sh"


class BinariesMissing(RuntimeError):
    """The control plane is neither built nor buildable here."""


def control_plane_bin(*, build: bool = True, quiet: bool = False) -> Path:
    """The directory holding etcd, kube-apiserver, kube-scheduler and kubectl.

    ``$MUSTER_CONTROLPLANE_BIN`` wins; otherwise ``build.sh`` (idempotent, cached under
    ``~/.cache/muster``) builds them from the pinned Go modules, streaming its progress.
    """
    override = os.environ.get("MUSTER_CONTROLPLANE_BIN")
    if override:
        return _checked(Path(override))
    if not BUILD_SCRIPT.exists():  # an installed package: the Go build lives in the checkout
        raise BinariesMissing(
            f"no control plane: set MUSTER_CONTROLPLANE_BIN to a directory holding "
            f"{', '.join(BINARIES)} (and kwok, kube-controller-manager), or run from a Muster "
            f"checkout, whose tests/e2e/controlplane/build.sh builds them"
        )
    if not build:
        raise BinariesMissing("control plane not built; run: bash tests/e2e/controlplane/build.sh")
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL if quiet else sys.stderr, text=True, check=False,
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise BinariesMissing(f"building the control plane failed (exit {result.returncode}); "
                              f"see the messages above, or run bash {BUILD_SCRIPT}")
    return _checked(Path(lines[-1]))


def _checked(path: Path) -> Path:
    missing = [b for b in BINARIES if not (path / b).is_file()]
    if missing:
        raise BinariesMissing(f"{path} lacks {', '.join(missing)}")
    return path
