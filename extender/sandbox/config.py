"""The files a sandbox writes: token, kubeconfig, scheduler configuration."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path

import yaml

TOKEN = "muster-sandbox-admin"


class SchedulerMode(StrEnum):
    MUSTER = "muster"
    """kube-scheduler with Muster as its extender (filter, prioritize, preempt, bind)."""
    DEFAULT = "default"
    """kube-scheduler alone: no gang scheduling at all."""
    GANG = "gang"
    """kube-scheduler with the upstream GangScheduling plugin (Workload/PodGroup v1beta1).

    The plugin gates only pods that name a PodGroup in ``spec.schedulingGroup``; submit with
    ``submit(..., workload_api=True)`` so each gang gets its Workload and PodGroup."""


class GateBy(StrEnum):
    """What puts Muster's scheduling gate on new pods (docs/operations.md)."""

    WEBHOOK = "webhook"
    """Muster's admission webhook (manifests/webhook.yaml): gates the pods Muster resolves
    to a gang, one call to Muster per pod created."""
    POLICY = "policy"
    """The API server's MutatingAdmissionPolicy (manifests/gate-policy/): gates every pod
    that may be in a gang, in CEL, with no call; Muster ungates the others at once."""


@dataclass(frozen=True)
class Ports:
    """Loopback ports of one sandbox; 0 means "any free port", picked at ``up`` so that two
    sandboxes (or a sandbox and the tests) run side by side."""

    etcd: int = 0
    etcd_peer: int = 0
    apiserver: int = 0
    scheduler: int = 0
    muster: int = 0
    muster_webhook: int = 0
    controller_manager: int = 0
    kwok: int = 0
    jobset_webhook: int = 0
    jobset_health: int = 0
    lws_webhook: int = 0
    lws_health: int = 0
    kuberay_health: int = 0

    def of(self, operator: str) -> tuple[int, int]:
        """``(webhook, health)`` ports of a real operator (``jobset``, ``lws``); the webhook
        port is 0 for one that serves no webhook here (``kuberay``)."""
        values = self.__dict__
        return values.get(f"{operator}_webhook", 0), values[f"{operator}_health"]

    def chosen(self) -> dict[str, int]:
        return {k: v for k, v in self.__dict__.items() if v}

    def resolved(self, free: Callable[[int], list[int]]) -> Ports:
        """These ports with every 0 replaced by one of ``free(n)`` (n distinct free ports)."""
        unset = [k for k, v in self.__dict__.items() if not v]
        picked = dict(zip(unset, free(len(unset)), strict=True))
        return replace(self, **picked)


def write_tokens(directory: Path) -> Path:
    path = directory / "tokens.csv"
    path.write_text(f'{TOKEN},admin,admin-uid,"system:masters"\n')
    return path


def write_kubeconfig(directory: Path, *, port: int) -> Path:
    path = directory / "kubeconfig"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "muster-sandbox", "cluster": {
            "server": f"https://127.0.0.1:{port}",
            "certificate-authority": str(directory / "pki" / "apiserver.crt"),
        }}],
        "users": [{"name": "admin", "user": {"token": TOKEN}}],
        "contexts": [{"name": "muster-sandbox",
                      "context": {"cluster": "muster-sandbox", "user": "admin"}}],
        "current-context": "muster-sandbox",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


SCHEDULER_NAMES = ("default-scheduler", "muster")
"""The sandbox scheduler's profiles; Muster is told it serves both."""


def scheduler_config(*, kubeconfig: Path, mode: SchedulerMode, muster_port: int,
                     bind_timeout: float) -> dict[str, object]:
    """A KubeSchedulerConfiguration; with Muster, the extender block the docs recommend."""
    config: dict[str, object] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": 200, "burst": 400},
        "leaderElection": {"leaderElect": False},
        "percentageOfNodesToScore": 100,
        "podInitialBackoffSeconds": 1,
        "podMaxBackoffSeconds": 2,
        # Both names: pods written as docs/install.md says (schedulerName: muster) and pods
        # that name none. Extenders apply to every profile.
        "profiles": [{"schedulerName": name} for name in SCHEDULER_NAMES],
    }
    if mode is SchedulerMode.MUSTER:
        config["extenders"] = [{
            "urlPrefix": f"http://127.0.0.1:{muster_port}",
            "filterVerb": "filter",
            "prioritizeVerb": "prioritize",
            "preemptVerb": "preempt",
            "bindVerb": "bind",
            "weight": 10,
            "nodeCacheCapable": True,
            "ignorable": False,
            # The bind barrier holds a request up to bind_timeout; the call must outlive it.
            "httpTimeout": f"{int(bind_timeout + 10)}s",
            # No managedResources: kube-scheduler calls an extender that names some only for
            # pods whose containers request one of them, so a pod whose GPUs come through
            # spec.resourceClaims alone would never reach filter or bind. Only pods of these
            # profiles call Muster; here both are, elsewhere only those naming `muster`.
        }]
    return config


def write_scheduler_config(directory: Path, config: dict[str, object]) -> Path:
    path = directory / "scheduler.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
