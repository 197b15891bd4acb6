"""docs/install.md's commands, read from the page and run as written against a real API server
(a sandbox control plane of its own, with the controller manager, which finishes the
uninstall's namespace deletion; Muster's pods never run: their image is not there): step 2's
certificates, Helm with the gate it picks on this 1.37 cluster (the admission policy) and
with the webhook given the CA, then the kustomization with the webhook and its CA patch, the
switch to the admission policy, and each uninstall, which must leave nothing a later install
would trip on.

The commands that need Muster running (``rollout status``, logs, port-forwards) are not read:
they live under their own heading, which this test never runs.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from extender.sandbox.binaries import control_plane_bin
from extender.sandbox.sandbox import Sandbox
from tests.e2e.conftest import start_sandbox

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
INSTALL = REPO / "docs" / "install.md"
_FENCE = re.compile(r"^```sh\n(.*?)^```", re.M | re.S)
_COMMENT = re.compile(r"\s+#\s.*$")


def doc_blocks() -> dict[str, list[list[str]]]:
    """Each heading's ``sh`` blocks, each a list of commands (continued lines joined, comments
    after a command dropped)."""
    out: dict[str, list[list[str]]] = {}
    for part in re.split(r"^(?=#{2,3} )", INSTALL.read_text(), flags=re.M):
        heading = part.splitlines()[0].lstrip("#").strip() if part.startswith("#") else ""
        for block in _FENCE.findall(part):
            joined = block.replace("\\\n", " ")
            commands = [_COMMENT.sub("", line).strip() for line in joined.splitlines()]
            out.setdefault(heading, []).append([c for c in commands if c])
    return out


class Shell:
    """Runs the doc's commands with bash in a directory holding the checkout's manifests,
    descriptors and chart, on the sandbox's kubeconfig, with its kubectl and helm first on
    PATH."""

    def __init__(self, box: Sandbox, workdir: Path) -> None:
        self.cwd = workdir
        for name in ("manifests", "descriptors", "charts"):
            (workdir / name).symlink_to(REPO / name)
        self.env = {**os.environ, "KUBECONFIG": str(box.dir / "kubeconfig"),
                    "PATH": f"{control_plane_bin(quiet=True)}:{os.environ['PATH']}"}

    def run(self, command: str) -> str:
        command = command.replace("REGISTRY/", "registry.example/")
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=self.cwd,
                              env=self.env, capture_output=True, text=True, timeout=180,
                              check=False)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def run_block(self, commands: list[str]) -> None:
        for command in commands:
            self.run(command)

    def names(self, kind: str) -> set[str]:
        out = self.run(f"kubectl get {kind} -o name")
        return {line.split("/", 1)[1] for line in out.split()}

    def gates(self) -> dict[str, set[str]]:
        return {kind: self.names(kind) for kind in (
            "mutatingwebhookconfigurations", "mutatingadmissionpolicies",
            "mutatingadmissionpolicybindings")}

    def webhook_ca(self) -> str:
        webhook = json.loads(self.run("kubectl get mutatingwebhookconfiguration muster-gate "
                                      "-o json"))
        return str(webhook["webhooks"][0]["clientConfig"].get("caBundle", ""))


POLICY = {"mutatingwebhookconfigurations": set(), "mutatingadmissionpolicies": {"muster-gate"},
          "mutatingadmissionpolicybindings": {"muster-gate"}}
WEBHOOK = {"mutatingwebhookconfigurations": {"muster-gate"}, "mutatingadmissionpolicies": set(),
           "mutatingadmissionpolicybindings": set()}
NONE: dict[str, set[str]] = {k: set() for k in POLICY}


@pytest.fixture(scope="module")
def shell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shell]:
    box = start_sandbox(tmp_path_factory.mktemp("install-doc"), nodes=1,
                        install_descriptors=False)
    try:
        yield Shell(box, tmp_path_factory.mktemp("install-doc-cwd"))
    finally:
        box.down()


def test_the_doc_has_the_blocks_this_test_runs() -> None:
    blocks = doc_blocks()
    shape = {h: [len(b) for b in blocks.get(h, [])] for h in (
        "2. Certificates", "With kubectl (kustomize)", "With Helm", "Uninstall")}
    assert shape == {"2. Certificates": [4], "With kubectl (kustomize)": [2, 1, 2],
                     "With Helm": [2, 2], "Uninstall": [3, 2]}


def test_both_install_paths_with_both_gates_as_the_doc_says(shell: Shell) -> None:
    blocks = doc_blocks()
    shell.run_block(blocks["2. Certificates"][0])
    assert {"muster-extender-tls", "muster-scheduler-tls"} <= shell.names(
        "secrets -n muster-system")
    ca = base64.b64encode((shell.cwd / "certs" / "ca.crt").read_bytes()).decode()
    helm_auto, helm_webhook = blocks["With Helm"]
    kustomize, ca_patch, to_policy = blocks["With kubectl (kustomize)"]
    kustomize_uninstall, helm_uninstall = blocks["Uninstall"]

    # Helm, gating: auto on a cluster that serves MutatingAdmissionPolicy v1.
    shell.run_block(helm_auto)
    assert shell.gates() == POLICY
    assert "jobset" in shell.names("workloaddescriptors")
    shell.run_block(helm_uninstall)
    assert shell.gates() == NONE and not {"muster-extender", "muster-catalog"} & shell.names(
        "clusterroles")

    # Helm, the webhook, given the CA.
    shell.run_block(helm_webhook)
    assert shell.gates() == WEBHOOK and shell.webhook_ca() == ca
    shell.run_block(helm_uninstall)
    assert shell.gates() == NONE and not {"muster-extender", "muster-catalog"} & shell.names(
        "clusterroles")

    # The kustomization: the webhook, then its CA, then the policy in its place.
    shell.run_block(kustomize)
    assert shell.gates() == WEBHOOK and shell.webhook_ca() == ""
    assert {"muster", "muster-scheduler"} <= shell.names("deployments -n muster-system")
    shell.run_block(ca_patch)
    assert shell.webhook_ca() == ca
    shell.run_block(to_policy)
    assert shell.gates() == POLICY

    shell.run_block(kustomize_uninstall)
    assert shell.gates() == NONE
    assert "muster-extender" not in shell.names("clusterroles")
    assert "muster-system" not in shell.names("namespaces")
