"""What a sandbox creates through its API server once it answers: the WorkloadDescriptor and
Gang CRDs with the descriptor catalog, the fake GPU nodes and the DRA objects NVIDIA's driver
would publish for them, and Muster's gate (the MutatingAdmissionPolicy or the webhook).

It starts no process and writes no file: :mod:`.sandbox` starts the components and calls these
once the API server is ready, on the connection it made.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from extender.core.workloads.admission import GATE, may_join_a_gang
from extender.files.catalog import load_catalog, packaged_catalog, packaged_catalog_dir
from extender.files.shipped import manifests_dir
from extender.files.yamlsafe import load_all
from extender.kube.client import Connection, KubeError
from extender.sandbox import dra, operators
from extender.sandbox.config import SCHEDULER_NAMES
from extender.sandbox.crds import permissive_crds
from extender.sandbox.local import SandboxError, wait_for
from extender.sandbox.nodes import fake_node
from extender.sandbox.spec import SandboxSpec

Say = Callable[[str], None]

CRD_FILE = manifests_dir() / "crd-workloaddescriptor.yaml"
GANG_CRD_FILE = manifests_dir() / "crd-gang.yaml"


def require_workload_api(conn: Connection) -> None:
    """Gang mode gates nothing unless the API server serves the PodGroups pods join."""
    try:
        listing = conn.request("GET", "/apis/scheduling.k8s.io/v1beta1")
    except KubeError as err:
        raise SandboxError(f"gang mode: scheduling.k8s.io/v1beta1 is not served: {err}") from err
    served = {r.get("name") for r in listing.get("resources", [])}
    if not {"workloads", "podgroups"} <= served:
        raise SandboxError("gang mode: the API server serves no Workload/PodGroup "
                           f"(scheduling.k8s.io/v1beta1 has {sorted(served)})")


def install_descriptors(conn: Connection, spec: SandboxSpec, bin_dir: Path, say: Say) -> None:
    """Muster's CRDs, a permissive CRD for each kind of the catalog no real operator of
    ``spec`` brings (the operators' own instead), and the packaged descriptors."""
    for crd_file in (CRD_FILE, GANG_CRD_FILE):
        if not crd_file.exists():
            raise SandboxError(f"Muster's CRD is missing: {crd_file}")
    say("descriptors: installing the WorkloadDescriptor and Gang CRDs and the catalog")
    crds = _yaml_docs([CRD_FILE, GANG_CRD_FILE]) + workload_crds(spec, bin_dir)
    for crd in crds:
        conn.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                     body=crd)
    for crd in crds:
        name = crd["metadata"]["name"]

        def established(crd_name: str = name) -> bool:
            status = conn.request(
                "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd_name}"
            ).get("status", {})
            return any(c.get("type") == "Established" and c.get("status") == "True"
                       for c in status.get("conditions") or [])

        wait_for(f"CRD {name}", established, timeout=30, log=None)
    for doc in _yaml_docs(sorted(packaged_catalog_dir().glob("*.yaml"))):
        conn.request("POST", f"/apis/{doc['apiVersion']}/workloaddescriptors", body=doc)


def workload_crds(spec: SandboxSpec, bin_dir: Path) -> list[dict[str, Any]]:
    """A CRD for each kind of the catalog: the release's own for the kinds of the real
    operators ``spec`` runs (validation and all), a permissive one for every other (it lets
    the API server store the kind)."""
    crds = permissive_crds(packaged_catalog().descriptors)
    for op in spec.real_operators():
        real = operators.crds(op, bin_dir)
        # By name, not group: a group holds other operators' kinds too (kubeflow.org's
        # PyTorchJob beside the MPI operator's MPIJob).
        names = {c["metadata"]["name"] for c in real}
        crds = [c for c in crds if c["metadata"]["name"] not in names] + real
    return crds


def create_release_objects(conn: Connection, op: operators.Operator, bin_dir: Path,
                           say: Say) -> None:
    """The cluster objects ``op``'s release ships (Trainer's ``torch-distributed``
    ClusterTrainingRuntime), once its webhooks are installed (they validate them)."""
    for path, obj in operators.release_objects(op, bin_dir):
        say(f"{op.name}: creating {obj['kind']} {obj['metadata']['name']} of {op.release}")
        conn.request("POST", path, body=obj)


def create_nodes(conn: Connection, spec: SandboxSpec, say: Say) -> None:
    """The fake nodes of ``spec``: device-plugin nodes, then DRA nodes and their objects."""
    plugin, dra_count = spec.node_counts()
    kinds = ([f"{plugin} with nvidia.com/gpu"] if plugin else []) + \
        ([f"{dra_count} whose GPUs only DRA publishes"] if dra_count else [])
    say(f"nodes: creating fake nodes of {spec.gpus_per_node} GPUs: " + " and ".join(kinds))
    nodes = [fake_node(i, gpus=spec.gpus_per_node, cpu=spec.cpu_per_node,
                       memory_gi=spec.memory_gi_per_node,
                       nodes_per_rack=spec.nodes_per_rack, ready=not spec.kwok)
             for i in range(plugin)]
    # Racks count on through the DRA nodes: each rack is one NVLink clique.
    dra_nodes = [dra.dra_node(i, slot=plugin + i, cpu=spec.cpu_per_node,
                              memory_gi=spec.memory_gi_per_node,
                              nodes_per_rack=spec.nodes_per_rack, ready=not spec.kwok)
                 for i in range(dra_count)]
    for node in nodes + dra_nodes:
        created = conn.request("POST", "/api/v1/nodes", body=node)
        if not created.get("status", {}).get("allocatable"):
            # Some releases drop status on create; the status subresource takes it.
            conn.request("PATCH", f"/api/v1/nodes/{node['metadata']['name']}/status",
                         body={"status": node["status"]})
    if dra_nodes:
        _publish_dra(conn, spec, dra_nodes, say)


def _publish_dra(conn: Connection, spec: SandboxSpec, nodes: list[dict[str, Any]],
                 say: Say) -> None:
    """What NVIDIA's GPU DRA driver would publish; no driver runs here (its kubelet plugins
    would need a kubelet): the DeviceClasses its chart ships and each node's ResourceSlices,
    posted once."""
    say(f"dra: publishing the DeviceClasses and the ResourceSlices of {len(nodes)} "
        f"nodes ({spec.gpu_model.value}"
        + (", partitionable GPUs" if spec.dra_partitions else "") + ")")
    objects = dra.device_classes(spec.gpu_model) + [
        made for node in nodes for made in dra.node_slices(
            node, gpus=spec.gpus_per_node, partitions=spec.dra_partitions)]
    plural = {"DeviceClass": "deviceclasses", "ResourceSlice": "resourceslices"}
    for obj in objects:
        conn.request("POST", f"/apis/{dra.API_VERSION}/{plural[obj['kind']]}", body=obj)


def install_gate_policy(conn: Connection, *, descriptor_dirs: Iterable[str], say: Say) -> None:
    """manifests/gate-policy/ for the sandbox's scheduler names and catalog (created once; a
    restarted Muster reuses it), then wait until the API server gates with it."""
    base = "/apis/admissionregistration.k8s.io/v1"
    plural = {"MutatingAdmissionPolicy": "mutatingadmissionpolicies",
              "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings"}
    for doc in gate_policy(descriptor_dirs=descriptor_dirs):
        path = f"{base}/{plural[doc['kind']]}"
        try:
            conn.request("GET", f"{path}/{doc['metadata']['name']}")
        except KubeError:
            if doc["kind"] == "MutatingAdmissionPolicy":
                say("muster: gating new gang pods (the API server's "
                    f"MutatingAdmissionPolicy {doc['metadata']['name']})")
            conn.request("POST", path, body=doc)
    # The API server applies a policy once its own informer has it: until a pod it would
    # gate is gated (a dry run: admitted, never stored), pods could be created ungated.
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {
                 "generateName": "muster-gate-probe-", "namespace": "default",
                 "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                                      "name": "muster-gate-probe",
                                      "uid": "00000000-0000-0000-0000-000000000000"}]},
             "spec": {"schedulerName": SCHEDULER_NAMES[-1],
                      "containers": [{"name": "probe", "image": "probe"}]}}

    def gating() -> bool:
        made = conn.request("POST", "/api/v1/namespaces/default/pods?dryRun=All", body=probe)
        return any(g.get("name") == GATE
                   for g in made.get("spec", {}).get("schedulingGates") or [])

    wait_for("the gate policy", gating, timeout=30, log=None)


def install_gate_webhook(conn: Connection, *, port: int, ca: bytes,
                         descriptor_dirs: Iterable[str], say: Say) -> None:
    """manifests/webhook.yaml, pointed at Muster's webhook on loopback with the sandbox's CA,
    for the sandbox's scheduler names (created once; a restarted Muster reuses it)."""
    path = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
    hook = gate_webhook(port=port, ca=ca, descriptor_dirs=descriptor_dirs)
    try:
        conn.request("GET", f"{path}/{hook['metadata']['name']}")
    except KubeError:
        say(f"muster: gating new gang pods (webhook on https://127.0.0.1:{port})")
        conn.request("POST", path, body=hook)


def gate_webhook(*, port: int, ca: bytes, descriptor_dirs: Iterable[str] = ()) -> dict[str, Any]:
    """Muster's MutatingWebhookConfiguration as installed (manifests/webhook.yaml), served
    at ``https://127.0.0.1:port`` with ``ca``, matching the sandbox's scheduler names and the
    pods that may join a gang of the catalog Muster serves (the packaged one and
    ``descriptor_dirs``)."""
    [hook] = _yaml_docs([manifests_dir() / "webhook.yaml"])
    may_join = may_join_a_gang(load_catalog([packaged_catalog_dir(), *descriptor_dirs]))
    for entry in hook["webhooks"]:
        path = entry["clientConfig"]["service"]["path"]
        entry["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}",
                                 "caBundle": base64.b64encode(ca).decode()}
        entry["matchConditions"] = [{"name": "muster-scheduler",
                                     "expression": _scheduler_condition()}]
        if may_join is not None:
            entry["matchConditions"].append({"name": "may-join-a-gang",
                                             "expression": may_join})
    return hook


def gate_policy(*, descriptor_dirs: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Muster's MutatingAdmissionPolicy and its binding as installed
    (manifests/gate-policy/), matching the sandbox's scheduler names and the pods that
    may join a gang of the catalog Muster serves (the packaged one and ``descriptor_dirs``)."""
    policy, binding = _yaml_docs([manifests_dir() / "gate-policy" / "gate-policy.yaml"])
    may_join = may_join_a_gang(load_catalog([packaged_catalog_dir(), *descriptor_dirs]))
    expressions = {"muster-scheduler": _scheduler_condition(), "may-join-a-gang": may_join}
    policy["spec"]["matchConditions"] = [
        {**c, "expression": expressions.get(c["name"], c["expression"])}
        for c in policy["spec"]["matchConditions"]
        if c["name"] not in expressions or expressions[c["name"]] is not None]
    return [policy, binding]


def _scheduler_condition() -> str:
    names = ", ".join(f"'{n}'" for n in SCHEDULER_NAMES)
    return f"object.spec.schedulerName in [{names}]"


def _yaml_docs(paths: Iterable[Path]) -> list[dict[str, Any]]:
    docs = []
    for path in paths:
        for doc in load_all(path.read_text()):
            if isinstance(doc, dict):
                docs.append(doc)
    return docs
