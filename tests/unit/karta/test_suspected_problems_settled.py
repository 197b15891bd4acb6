"""The two suspected Karta catalog problems the examples could not show, settled with numbers.

Neither shows on ``../shared/examples/``: the LWS examples without a ``leaderTemplate`` ask for
no GPUs, and no NIMService example sets scheduling fields. So each gets a made-up workload
here, resolved through the Karta catalog and through the native catalog; ``docs/compat.md``
quotes these figures.
"""

from __future__ import annotations

from typing import Any

import yaml

from extender.core.gang.constraints import eligible_nodes
from extender.core.karta.compile import compile_karta
from extender.core.karta.kai import kai_gang_minimums
from extender.core.karta.model import read_karta
from extender.core.model.objects import node_from_api
from extender.core.workloads.workload import resolve_workload
from tests.unit.descriptors.examples import catalog
from tests.unit.karta.compat import KARTA_DIR

GPU = "nvidia.com/gpu"


def _karta(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((KARTA_DIR / name).read_text(encoding="utf-8"))
    return data


def lws_without_leader_template() -> dict[str, Any]:
    """replicas 2, size 2, a 4-GPU worker template and no leaderTemplate: LWS then runs the
    leader from the worker template, so 4 pods of 4 GPUs."""
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "serve", "namespace": "ml"},
            "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 2, "workerTemplate": {
                "spec": {"containers": [{"name": "vllm", "image": "vllm",
                                         "resources": {"limits": {GPU: "4"}}}]}}}}}


def test_lws_without_leader_template_loses_the_leaders_gpus_through_the_karta() -> None:
    obj = lws_without_leader_template()
    raw = _karta("leaderworkerset-x-k8s-io-leaderworkerset-v1.yaml")
    by_karta = resolve_workload(obj, compile_karta(raw))
    native = catalog().for_object(obj)
    assert native is not None
    by_native = resolve_workload(obj, native)
    assert (by_karta.pods, by_karta.gpus) == (4, 8)  # leaders counted with no GPU
    assert (by_native.pods, by_native.gpus) == (4, 16)  # leaders take the worker template
    assert [(g.pods, g.min_member) for g in by_karta.gangs] == [(2, 2), (2, 2)]
    assert [(g.pods, g.min_member) for g in by_native.gangs] == [(2, 2), (2, 2)]
    assert kai_gang_minimums(read_karta(raw), obj) == [8, 8]  # replicas x size^2
    leader = next(r for r in by_karta.roles if r.name == "leader")
    assert leader.template["spec"]["containers"] == []


def nimservice() -> dict[str, Any]:
    """A NIMService pinned to H100 nodes in zone a, on a tainted pool, spread one per node."""
    return {"apiVersion": "apps.nvidia.com/v1alpha1", "kind": "NIMService",
            "metadata": {"name": "llm", "namespace": "nim"},
            "spec": {
                "replicas": 1, "resources": {"limits": {GPU: "8"}},
                "nodeSelector": {"nvidia.com/gpu.product": "H100"},
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "nim",
                                 "effect": "NoSchedule"}],
                "affinity": {
                    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "zone", "operator": "In", "values": ["a"]}]}]}},
                    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app": "llm"}}}]}},
                # Before operator v3.1.1 (Oct 2025) this top-level field was the only one.
                "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}}


def node(name: str, labels: dict[str, str], *, tainted: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if tainted:
        spec["taints"] = [{"key": "dedicated", "value": "nim", "effect": "NoSchedule"}]
    alloc = {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: "8"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
            "spec": spec, "status": {"allocatable": alloc, "capacity": alloc}}


NODES = [node("n0", {"nvidia.com/gpu.product": "H100", "zone": "a"}, tainted=True),
         node("n1", {"nvidia.com/gpu.product": "H100", "zone": "b"}),
         node("n2", {"nvidia.com/gpu.product": "A100", "zone": "a"}),
         node("n3", {"nvidia.com/gpu.product": "A100", "zone": "b"})]


def test_nimservice_scheduling_fields_the_karta_reads_and_misses() -> None:
    obj = nimservice()
    by_karta = resolve_workload(obj, compile_karta(_karta(
        "apps-nvidia-com-nimservice-v1alpha1.yaml")))
    native = catalog().for_object(obj)
    assert native is not None
    by_native = resolve_workload(obj, native)
    nodes = [node_from_api(n) for n in NODES]
    [karta_role] = by_karta.roles
    [native_role] = by_native.roles
    # Same pods and GPUs: .spec.affinity is where the current operator keeps it...
    assert (by_karta.pods, by_karta.gpus) == (by_native.pods, by_native.gpus) == (1, 8)
    assert karta_role.template["spec"]["affinity"] == {
        "nodeAffinity": obj["spec"]["affinity"]["nodeAffinity"]}
    # ...but the Karta drops nodeSelector, tolerations and podAntiAffinity, so it sends the
    # NIM to the one A100 node in zone a and never to the only node the operator's pod fits.
    assert eligible_nodes(native_role.shape, nodes) == ("n0",)
    assert eligible_nodes(karta_role.shape, nodes) == ("n2",)
    assert "podAntiAffinity" in native_role.template["spec"]["affinity"]
    assert "podAntiAffinity" not in karta_role.template["spec"]["affinity"]
    for role in (karta_role, native_role):  # neither reads the deprecated top-level field
        assert "podAffinity" not in role.template["spec"]["affinity"]
