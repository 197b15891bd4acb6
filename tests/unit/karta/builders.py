"""A made-up kind described only by a Karta, for the tests of Kartas read from the cluster.

``TrainingRun`` (``examples.muster.dev/v1``) runs ``spec.workers`` pods from ``spec.template``,
owned by the run itself; its Karta gangs them by the run's label, so the whole run is one gang.
No native descriptor describes the kind, so Muster can only schedule it through the Karta.
"""

from __future__ import annotations

from typing import Any

GROUP = "examples.muster.dev"
VERSION = "v1"
KIND = "TrainingRun"
PLURAL = "trainingruns"
API_VERSION = f"{GROUP}/{VERSION}"
RUN_LABEL = f"{GROUP}/run"
GPU = "nvidia.com/gpu"
KARTA_PATH = "/apis/run.ai/v1alpha1/kartas"


def training_run_karta(name: str = "trainingrun") -> dict[str, Any]:
    return {
        "apiVersion": "run.ai/v1alpha1", "kind": "Karta", "metadata": {"name": name},
        "spec": {
            "structureDefinition": {
                "rootComponent": {
                    "name": "run",
                    "kind": {"group": GROUP, "version": VERSION, "kind": KIND},
                    "statusDefinition": {"phaseDefinition": {"path": ".status.phase"},
                                         "statusMappings": {"running": [{"byPhase": "Running"}]}},
                },
                "childComponents": [{
                    "name": "worker", "ownerRef": "run",
                    "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "specDefinition": {"podTemplateSpecPath": ".spec.template"},
                    "scaleDefinition": {"replicasPath": ".spec.workers // 1"},
                }],
            },
            "optimizationInstructions": {"gangScheduling": {"podGroups": [{
                "name": "run", "members": [{
                    "componentName": "worker",
                    "groupByKeyPaths": [f'.metadata.labels["{RUN_LABEL}"]']}]}]}},
        },
    }


def training_run(name: str, *, workers: int, gpus: int, namespace: str = "ml",
                 uid: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if uid:
        meta["uid"] = uid
    return {
        "apiVersion": API_VERSION, "kind": KIND, "metadata": meta,
        "spec": {"workers": workers, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "registry.example/train:1",
                            "resources": {"requests": {"cpu": "1", GPU: str(gpus)},
                                          "limits": {GPU: str(gpus)}}}]}}},
    }


def training_run_pod(run: dict[str, Any], index: int, *,
                     node: str | None = None) -> dict[str, Any]:
    """Worker ``index`` of ``run``, as the run's controller would make it."""
    meta = run["metadata"]
    spec: dict[str, Any] = {**run["spec"]["template"]["spec"], "schedulerName": "muster"}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{meta['name']}-worker-{index}", "namespace": meta["namespace"],
                     "uid": f"uid-{meta['name']}-{index}",
                     "labels": {RUN_LABEL: meta["name"]},
                     "ownerReferences": [{"apiVersion": API_VERSION, "kind": KIND,
                                          "name": meta["name"], "uid": meta.get("uid", ""),
                                          "controller": True}]},
        "spec": spec, "status": {"phase": "Running" if node else "Pending"},
    }


def kartas_discovery() -> list[dict[str, Any]]:
    """What discovery says about ``run.ai/v1alpha1`` once the Karta CRD is installed."""
    return [{"name": "kartas", "kind": "Karta", "namespaced": False, "shortNames": ["krt"]}]


def runs_discovery() -> list[dict[str, Any]]:
    return [{"name": PLURAL, "kind": KIND, "namespaced": True}]
