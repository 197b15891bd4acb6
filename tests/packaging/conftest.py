"""The helm and kubectl the chart tests run: built from Go modules by the control plane's
``build.sh`` (cached under ``~/.cache/muster`` with a stamp per binary: after the first build,
about a second and no Go command)."""

from __future__ import annotations

import pytest

from extender.sandbox.binaries import BinariesMissing, control_plane_bin
from tests.packaging.helmchart import Tools


@pytest.fixture(scope="session")
def tools() -> Tools:
    try:
        bin_dir = control_plane_bin(quiet=True)
    except BinariesMissing as err:
        pytest.fail(f"the chart tests need helm and kubectl: {err}")
    helm, kubectl = bin_dir / "helm", bin_dir / "kubectl"
    if not helm.is_file():  # MUSTER_CONTROLPLANE_BIN pointing at a directory built without it
        pytest.fail(f"{bin_dir} has no helm; build it with bash tests/e2e/controlplane/build.sh")
    return Tools(helm=helm, kubectl=kubectl)
