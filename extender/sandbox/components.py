"""How the sandbox runs the real pod lifecycle: kube-controller-manager and KWOK.

kube-controller-manager (the same Kubernetes release as the API server) creates the pods of
Jobs, StatefulSets, Deployments and ReplicaSets and the ResourceClaims of pods' claim
templates, collects garbage and empties deleted namespaces. KWOK plays the kubelet of every
fake node: it keeps the nodes Ready and their Leases renewed, starts bound pods, finishes pods
that ask for a runtime and completes graceful deletion. Pure: paths and ports in, argument
vectors out.
"""

from __future__ import annotations

from pathlib import Path

from extender.files.shipped import manifests_dir
from extender.sandbox.nodes import FAKE_NODE_ANNOTATION

#: The Stages KWOK plays for nodes and pods (documented in the files themselves).
KWOK_STAGES = manifests_dir() / "sandbox" / "kwok"
#: A pod annotated with a Go duration (``90s``) succeeds that long after it became Ready.
RUNTIME_ANNOTATION = "muster.dev/sandbox-runtime"
#: A pod annotated with a Go duration (``5s``) stays terminating that long when deleted with a
#: grace period (2s without it), as on a kubelet, before KWOK removes it.
SHUTDOWN_ANNOTATION = "muster.dev/sandbox-shutdown"

#: What a scheduling test needs, nothing that needs a cloud. Left out on purpose:
#: ``node-lifecycle-controller`` and ``taint-eviction-controller`` would taint every fake
#: node unreachable and evict its pods whenever KWOK's Leases lapse (KWOK left out with
#: ``--no-kwok``, or stopped by a test); ``pod-garbage-collector-controller`` would delete the
#: pods of a node a test removes, which is the test's to decide; ``disruption-controller``
#: stays out so PodDisruptionBudgets keep the status a test gives them; the
#: ``serviceaccount-token-controller`` is not needed because the API server runs without the
#: ServiceAccount admission plugin (no pod mounts a token); ``device-taint-eviction-controller``
#: has nothing to do: no fake device is ever tainted.
CONTROLLERS = (
    "job-controller",
    "statefulset-controller",
    "replicaset-controller",
    "deployment-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    # Fills in ClusterRoles that aggregate labelled ones, as on any cluster: Muster's role in
    # manifests/rbac.yaml is built that way.
    "clusterrole-aggregation-controller",
    # Makes each pod's ResourceClaims from its ResourceClaimTemplates, drops the reservations
    # of pods that are gone, deallocates claims no pod uses and deletes generated ones.
    # (v1.37.2's canonical name; ``resource-claim-controller`` is its alias.)
    "resourceclaim-controller",
)

#: KWOK hands pods IPs from this range; its default (a /24) runs out at 254 pods.
POD_CIDR = "10.64.0.0/12"


#: The gate of the Workload API (``scheduling.k8s.io/v1beta1``) in v1.37.2. The
#: resourceclaim-controller reads it too: without it, it refuses for good to make the claims
#: of a pod that names a PodGroup ("Pod is a member of PodGroup ... but GenericWorkload feature
#: is disabled", a non-retryable error), so that pod never leaves kube-scheduler's PreEnqueue.
WORKLOAD_API_GATE = "--feature-gates=GenericWorkload=true"


def controller_manager_argv(bin_dir: Path, *, kubeconfig: Path, port: int,
                            workload_api: bool = False) -> list[str]:
    """``workload_api``: the API server serves the Workload API (gang mode), so the
    controllers run with its gate, as the API server and kube-scheduler do. Without that
    API the gate is left off: the resourceclaim-controller would watch PodGroups that are
    not served."""
    return [
        str(bin_dir / "kube-controller-manager"),
        f"--kubeconfig={kubeconfig}",
        f"--controllers={','.join(CONTROLLERS)}",
        "--leader-elect=false",
        "--use-service-account-credentials=false",
        "--bind-address=127.0.0.1", f"--secure-port={port}",
        # Garbage collection and namespace deletion follow every served kind: look again
        # soon, so the CRDs the sandbox installs are collected in seconds.
        "--concurrent-gc-syncs=20",
        "-v=1",
        *([WORKLOAD_API_GATE] if workload_api else []),
    ]


def kwok_argv(bin_dir: Path, *, kubeconfig: Path, port: int,
              stages: Path = KWOK_STAGES) -> list[str]:
    argv = [
        str(bin_dir / "kwok"),
        f"--kubeconfig={kubeconfig}",
        f"--manage-nodes-with-annotation-selector={FAKE_NODE_ANNOTATION}=true",
        f"--server-address=127.0.0.1:{port}",
        f"--cidr={POD_CIDR}",
        "--node-lease-duration-seconds=40",
    ]
    for path in sorted(stages.glob("*.yaml")):
        argv.append(f"--config={path}")
    return argv
