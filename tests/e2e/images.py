"""Build (once per session) the image `make image` makes, for the tests that run it.

``packaging/image/build.sh`` caches the Debian root filesystem and the wheelhouse under
``~/.cache/muster``, so a rebuild takes seconds; ``MUSTER_IMAGE`` names an image already built
instead. Podman runs with the repository's ``packaging/image/containers.conf`` (runc, no
default ulimits), which this machine needs.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from extender import __version__

REPO = Path(__file__).resolve().parents[2]
CONTAINERS_CONF = str(REPO / "packaging" / "image" / "containers.conf")
PODMAN_ENV = {**os.environ, "CONTAINERS_CONF": CONTAINERS_CONF}


def podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], env=PODMAN_ENV, capture_output=True, text=True,
                          timeout=timeout, check=False)


@functools.cache
def built_image() -> str:
    """The image's name; skips the test when podman, runc or mmdebstrap is not installed."""
    given = os.environ.get("MUSTER_IMAGE")
    if given:
        return given
    missing = [t for t in ("podman", "mmdebstrap", "runc") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}: apt-get install -y mmdebstrap podman runc")
    name = f"localhost/muster-test:{__version__}"
    built = subprocess.run(["bash", str(REPO / "packaging" / "image" / "build.sh"), name],
                           env={**PODMAN_ENV, "PYTHON": sys.executable}, capture_output=True,
                           text=True, timeout=900, check=False)
    assert built.returncode == 0, built.stderr
    assert built.stdout.split()[0] == name
    return name
