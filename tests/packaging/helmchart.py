"""Render charts/muster with the Helm built from Go modules, manifests/ with kubectl kustomize.

Both sides become a dict of objects keyed by (kind, namespace, name). What Helm must do differently
from the kustomization is small and named here, in one place:

* the Namespace: the kustomization makes ``muster-system``; Helm keeps its release record in the
  release's namespace, which must exist first (``--create-namespace``), so a chart that also
  rendered it would fail to install;
* ``checksum/config`` on kube-scheduler's pod template: kube-scheduler reads its configuration
  once, at start, so a ``helm upgrade`` that changes it must roll the pods;
* the scheduler configuration inside the ConfigMap is compared as parsed YAML: its comments are
  text, not configuration.
"""

from __future__ import annotations

import copy
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "muster"
MANIFESTS = REPO / "manifests"
NAMESPACE = "muster-system"
SCHEDULER_CONFIG = "scheduler-config.yaml"
CONFIG_CHECKSUM = "checksum/config"

Key = tuple[str, str | None, str]
Objects = dict[Key, dict[str, Any]]


class RenderFailed(AssertionError):
    """helm or kubectl exited non-zero; the message carries its stderr."""

    def __init__(self, args: list[str], stderr: str) -> None:
        super().__init__(f"{' '.join(args)} failed:\n{stderr}")
        self.stderr = stderr


@dataclass(frozen=True)
class Tools:
    helm: Path
    kubectl: Path

    def run(self, *args: str) -> str:
        result = subprocess.run(list(args), capture_output=True, text=True, check=False,
                                timeout=120)
        if result.returncode != 0:
            raise RenderFailed(list(args), result.stderr)
        return result.stdout

    def template(self, *flags: str, namespace: str = NAMESPACE) -> Objects:
        """``helm template`` of the chart with the CRDs, as install would apply them."""
        return objects(self.run(str(self.helm), "template", "muster", str(CHART),
                                "--namespace", namespace, "--include-crds", *flags))

    def kustomize(self, directory: Path) -> Objects:
        return objects(self.run(str(self.kubectl), "kustomize", str(directory)))


def objects(text: str) -> Objects:
    """Every document of a multi-document YAML stream, keyed; a duplicate key is an error."""
    found: Objects = {}
    for doc in yaml.safe_load_all(text):
        if not doc:
            continue
        meta = doc["metadata"]
        key = (doc["kind"], meta.get("namespace"), meta["name"])
        assert key not in found, f"{key} rendered twice"
        found[key] = doc
    return found


def normalised(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object with the differences the module docstring allows taken out."""
    out = copy.deepcopy(dict(obj))
    if out["kind"] == "ConfigMap" and SCHEDULER_CONFIG in out.get("data", {}):
        out["data"][SCHEDULER_CONFIG] = yaml.safe_load(out["data"][SCHEDULER_CONFIG])
    if out["kind"] == "Deployment":
        template_meta = out["spec"]["template"]["metadata"]
        annotations = template_meta.get("annotations", {})
        annotations.pop(CONFIG_CHECKSUM, None)
        if not annotations:
            template_meta.pop("annotations", None)
    return out


def leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, scalar) for every scalar of a document; list items by index, env by name."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from leaves(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            label = v["name"] if isinstance(v, dict) and "name" in v else i
            yield from leaves(v, f"{path}[{label}]")
    else:
        yield path, value


def changed(before: Objects, after: Objects) -> set[tuple[Key, str]]:
    """Every (object, field path) whose value differs, appears or disappears between two renders;
    an object only on one side is (key, "")."""
    diff: set[tuple[Key, str]] = {(k, "") for k in before.keys() ^ after.keys()}
    for key in before.keys() & after.keys():
        a, b = dict(leaves(before[key])), dict(leaves(after[key]))
        diff |= {(key, p) for p in a.keys() | b.keys() if a.get(p) != b.get(p)}
    return diff


def deployment(rendered: Objects, name: str) -> dict[str, Any]:
    return rendered[("Deployment", NAMESPACE, name)]


def pod_annotations(rendered: Objects, name: str) -> dict[str, str]:
    annotations: dict[str, str] = deployment(rendered, name)["spec"]["template"]["metadata"].get(
        "annotations", {})
    return annotations
