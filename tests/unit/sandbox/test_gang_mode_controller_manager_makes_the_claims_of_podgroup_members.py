"""kube-controller-manager in a sandbox that serves the Workload API runs with its gate: the
resourceclaim-controller of v1.37.2 refuses, without retrying, to make the claims of a pod
that names a PodGroup unless ``GenericWorkload`` is on, and kube-scheduler never tries a pod
whose claims are not made (so no gang of claim pods bound under the upstream plugin)."""

from __future__ import annotations

from pathlib import Path

from extender.sandbox.components import CONTROLLERS, controller_manager_argv


def _argv(*, workload_api: bool) -> list[str]:
    return controller_manager_argv(Path("/bin"), kubeconfig=Path("/k"), port=1234,
                                   workload_api=workload_api)


def test_with_the_workload_api_the_resourceclaim_controller_runs_with_generic_workload(
        ) -> None:
    argv = _argv(workload_api=True)
    assert "resourceclaim-controller" in CONTROLLERS
    gates = [a.removeprefix("--feature-gates=") for a in argv
             if a.startswith("--feature-gates=")]
    assert gates == ["GenericWorkload=true"]


def test_without_the_workload_api_no_gate_is_turned_on_for_an_api_not_served() -> None:
    assert not any(a.startswith("--feature-gates") for a in _argv(workload_api=False))
    assert controller_manager_argv(Path("/bin"), kubeconfig=Path("/k"), port=1234) == _argv(
        workload_api=False)
