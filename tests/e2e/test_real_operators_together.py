"""``muster sandbox up`` as a person runs it: the real JobSet, LeaderWorkerSet and KubeRay
operators by default, side by side (one CA, their own webhook ports), and an upstream JobSet,
LeaderWorkerSet and RayCluster applied with ``kubectl`` alone all run whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from extender.cli.main import main
from extender.sandbox.processes import alive
from extender.sandbox.sandbox import Sandbox, SandboxSpec
from tests.e2e.conftest import SHARED, describe, wait_until, whole
from tests.e2e.test_real_pod_lifecycle import kubectl, muster_gangs

pytestmark = pytest.mark.e2e

EXAMPLES = SHARED / "examples"
APPLIED = (
    EXAMPLES / "jobset" / "jobset__site__static__examples__simple__paralleljobs.yaml",  # 5 pods
    EXAMPLES / "lws" / "lws__docs__examples__sglang__lws.yaml",  # 2 groups of 2, 1 GPU each
    EXAMPLES / "kuberay" / "kuberay__ray-operator__config__samples__ray-cluster.verl.yaml",
)


def test_sandbox_up_runs_the_three_real_operators_by_default_and_down_stops_them(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    assert main(["sandbox", "up", "--dir", str(tmp_path)]) == 0
    box = Sandbox(SandboxSpec(directory=tmp_path), say=lambda _m: None)
    try:
        assert main(["sandbox", "status", "--dir", str(tmp_path)]) == 0
        status = capfd.readouterr().out
        for name in ("jobset", "lws", "kuberay", "kwok", "kube-controller-manager", "muster"):
            assert f"  {name} " in status, status
        for example in APPLIED:
            kubectl(box, "apply", "-n", "default", "-f", str(example))
        conn = box.connection()
        assert wait_until(lambda: whole(conn, "default", 10), timeout=120), \
            describe(conn, "default")
        gangs = {key: (g["minMember"], g["bound"]) for key, g in muster_gangs(box).items()}
        assert gangs == {"default/paralleljobs": (5, 5), "default/sglang/group-0": (2, 2),
                         "default/sglang/group-1": (2, 2), "default/verl-cluster": (1, 1)}, gangs
        pids = box.running()
    finally:
        assert main(["sandbox", "down", "--dir", str(tmp_path)]) == 0
    assert "jobset, lws, kuberay" in capfd.readouterr().out
    assert not [name for name, pid in pids.items() if alive(pid)]
