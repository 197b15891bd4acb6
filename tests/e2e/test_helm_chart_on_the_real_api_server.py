"""The chart against the real API server: ``gating: auto`` reads the cluster's API list
through Helm's own discovery (``helm install --dry-run=server``), and on this 1.37 control
plane, which serves ``admissionregistration.k8s.io/v1`` ``MutatingAdmissionPolicy``, it
installs the admission policy and no webhook; the objects it renders are accepted by the API
server (a server-side dry run: validated, admitted, not stored)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from extender.sandbox.binaries import control_plane_bin
from extender.sandbox.sandbox import Sandbox
from tests.e2e.conftest import start_sandbox

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "muster"


def run(*args: str) -> str:
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{' '.join(args)}:\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """A control plane of its own: Helm refuses to install over objects of the same names
    that it does not own, and other tests leave Muster's RBAC and namespace in the shared
    sandbox."""
    box = start_sandbox(tmp_path_factory.mktemp("helm"), nodes=1, controller_manager=False)
    try:
        yield box
    finally:
        box.down()


def test_gating_auto_installs_the_policy_on_a_cluster_that_serves_it(
        fresh: Sandbox, tmp_path: Path) -> None:
    bin_dir = control_plane_bin(quiet=True)
    kubeconfig = str(fresh.dir / "kubeconfig")
    out = run(str(bin_dir / "helm"), "install", "muster", str(CHART), "-n", "muster-system",
              "--kubeconfig", kubeconfig, "--dry-run=server", "--set", "tls.mode=existing")
    manifest, _, notes = out.partition("NOTES:")
    docs = [d for d in yaml.safe_load_all(manifest.split("MANIFEST:", 1)[1]) if d]
    kinds = {d["kind"] for d in docs}
    assert {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"} <= kinds
    assert "MutatingWebhookConfiguration" not in kinds
    assert "Scheduling gates: the MutatingAdmissionPolicy muster-gate;" in notes
    # The API server takes the chart's policy and binding as they are.
    gate = [d for d in docs if d["kind"].startswith("MutatingAdmissionPolicy")]
    path = tmp_path / "gate.yaml"
    path.write_text(yaml.safe_dump_all(gate))
    applied = run(str(bin_dir / "kubectl"), "--kubeconfig", kubeconfig, "apply",
                  "--dry-run=server", "-f", str(path))
    for kind in ("mutatingadmissionpolicy", "mutatingadmissionpolicybinding"):
        assert re.search(rf"^{kind}\.admissionregistration\.k8s\.io/muster-gate "
                         r"(created|configured|unchanged) \(server dry run\)$", applied, re.M), \
            applied
