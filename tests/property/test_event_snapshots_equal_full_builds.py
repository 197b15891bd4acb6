"""Snapshots carried forward event by event equal snapshots built from every object.

The store hands its builder only the objects each event touched (the change log); the builder
re-parses those, re-resolves the workloads they are or reach, places again the pods whose
membership could depend on them, and moves the capacity index by the changed pods and nodes.
Anything it forgets to carry would make Muster decide on a cluster that does not exist, so
random histories of informer events (nodes, pods, JobSets, their Jobs, refused workloads,
orphaned pods, the server's upserts and assumed binds, full relists, DRA claims made, allocated,
freed and deleted for pods on nodes whose GPUs are in ResourceSlices) compare its snapshot with
a from-scratch :func:`build_snapshot` (DRA lowered afresh) and :func:`index_of` after every
event.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.core.devices.attach import lower_objects
from extender.core.gang.capacity import _build_index, classes_of, gated_of, index_of
from extender.core.model.objects import DEVICE_SUPPLY
from extender.core.model.podspec import DEVICE_DEMAND
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.workloads.cluster import build_snapshot
from extender.files.catalog import packaged_catalog
from extender.state.build import CatalogSnapshots
from extender.state.store import NODES, PODS, StateStore
from tests.unit.core.devices.dra_objects import (
    claim,
    claim_pod,
    device_class,
    gpu_node_slice,
    node,
    template,
)
from tests.unit.server.builders import gpu_node, job_of, jobset, jobset_pod, plain_pod

CATALOG = packaged_catalog()
JOBSETS = "jobset.x-k8s.io/v1alpha2/JobSet"
JOBS = "batch/v1/Job"
NODE_NAMES = [f"n{i}" for i in range(5)]
GANGS = ["g0", "g1", "g2"]

KINDS = ["node+", "node~", "node-", "jobset+", "jobset~", "jobset-", "refuse", "job+", "job-",
         "job~owner", "member+", "plain+", "orphan+", "bind", "unbind", "finish", "gate",
         "ungate", "deleting", "pod-", "upsert", "assume", "relist", "cpod+", "claim+",
         "alloc", "dealloc", "claim-"]
CLAIMS = "resource.k8s.io/v1/ResourceClaim"
DRA_NODES = ["d0", "d1"]
# Pods come and go far more often than anything else, as in a cluster.
event = st.tuples(st.sampled_from(KINDS + ["plain+", "member+", "bind", "bind", "pod-"] * 2),
                  st.integers(0, 7), st.sampled_from(NODE_NAMES))


class Cluster:
    """What the informers have seen, driven into a store as watch events."""

    def __init__(self) -> None:
        self.builder = CatalogSnapshots(CATALOG)
        self.store = StateStore(self.builder)
        self.pods: dict[str, dict[str, Any]] = {}
        self.claims: dict[str, dict[str, Any]] = {}
        self.dra = [device_class(), template("two", count=2),
                    *(gpu_node_slice(n, gpus=4) for n in DRA_NODES)]
        self.store.load([*(gpu_node(n) for n in NODE_NAMES[:3]),
                         *(node(n) for n in DRA_NODES), *self.dra])
        for source in (JOBSETS, JOBS):
            self.store.replace(source, [])

    def pod_event(self, pod: dict[str, Any], kind: str = "MODIFIED") -> None:
        self.pods[pod["metadata"]["name"]] = pod
        self.store.apply(PODS, kind, pod)

    def step(self, what: str, n: int, node: str) -> None:
        gang = GANGS[n % 3]
        some = sorted(self.pods)[n % len(self.pods)] if self.pods else None
        if what in {"node+", "node~"}:
            self.store.apply(NODES, "MODIFIED", gpu_node(node, gpus=8 - n % 3, rack=f"r{n}"))
        elif what == "node-":
            self.store.apply(NODES, "DELETED", gpu_node(node))
        elif what in ("jobset+", "jobset~"):
            self.store.apply(JOBSETS, "MODIFIED", jobset(gang, workers=1 + n % 3, gpus=2))
        elif what == "jobset-":
            self.store.apply(JOBSETS, "DELETED", jobset(gang, workers=1, gpus=2))
        elif what == "refuse":  # a field of the wrong type: the workload is refused
            bad = jobset(gang, workers=2, gpus=2)
            bad["spec"]["replicatedJobs"][0]["replicas"] = "many"
            self.store.apply(JOBSETS, "MODIFIED", bad)
        elif what == "job+":
            self.store.apply(JOBS, "ADDED", job_of(gang))
        elif what == "job-":
            self.store.apply(JOBS, "DELETED", job_of(gang))
        elif what == "job~owner":  # the Job now answers to another JobSet
            moved = job_of(gang)
            moved["metadata"]["ownerReferences"][0]["name"] = GANGS[(n + 1) % 3]
            self.store.apply(JOBS, "MODIFIED", moved)
        elif what == "member+":
            self.pod_event(jobset_pod(gang, n % 3, gpus=2), "ADDED")
        elif what == "plain+":
            self.pod_event(plain_pod(f"p{n}", gpus=n % 3), "ADDED")
        elif what == "orphan+":  # owned by a Job nobody has seen: pending, not alone
            pod = jobset_pod(f"ghost{n % 2}", 0, gpus=1)
            self.pod_event(pod, "ADDED")
        elif what in ("bind", "unbind", "finish", "gate", "ungate", "deleting") and some:
            pod = copy.deepcopy(self.pods[some])
            if what == "gate":  # as Muster's webhook would have created it
                pod["spec"]["schedulingGates"] = [{"name": "muster.dev/gang"}]
            elif what == "ungate":
                pod["spec"].pop("schedulingGates", None)
            elif what == "deleting":
                pod["metadata"]["deletionTimestamp"] = "2026-12-04T00:00:00Z"
            elif what == "bind":
                pod["spec"]["nodeName"] = node
                pod["status"] = {"phase": "Running"}
            elif what == "unbind":
                pod["spec"].pop("nodeName", None)
            else:
                pod["status"] = {"phase": "Succeeded"}
            self.pod_event(pod)
        elif what == "pod-" and some is not None:
            self.store.apply(PODS, "DELETED", self.pods.pop(some))
        elif what == "upsert":  # a filter request for a pod the informer has not shown
            self.store.upsert_pod(plain_pod(f"early{n % 2}", gpus=1))
        elif what == "assume" and some is not None:
            meta = self.pods[some]["metadata"]
            self.store.assume_bound(meta["namespace"], meta["name"], node)
        elif what == "relist":
            self.store.replace(PODS, list(self.pods.values()))
        elif what == "cpod+":  # takes 2 GPUs through a claim from the template "two"
            self.pod_event(claim_pod(f"c{n % 4}", template_name="two"), "ADDED")
        elif what in ("claim+", "alloc", "dealloc", "claim-"):
            self.claim_event(what, f"c{n % 4}", DRA_NODES[n % 2], n)

    def claim_event(self, what: str, pod_name: str, dra_node: str, n: int) -> None:
        name = f"{pod_name}-gpus"
        if what == "claim-":
            if name in self.claims:
                self.store.apply(CLAIMS, "DELETED", self.claims.pop(name))
            return
        if what == "claim+" or name not in self.claims:
            made = claim(name, count=2, owner_uid=f"uid-{pod_name}")
            made["metadata"]["ownerReferences"][0]["name"] = pod_name
            self.claims[name] = made
            if pod_name in self.pods:  # kube-controller-manager names it in the pod's status
                pod = copy.deepcopy(self.pods[pod_name])
                pod["status"] = {"resourceClaimStatuses": [{"name": "gpus",
                                                            "resourceClaimName": name}]}
                self.pod_event(pod)
        made = copy.deepcopy(self.claims[name])
        if what == "alloc":
            first = 2 * (n % 2)
            made["status"] = {"allocation": {"devices": {"results": [
                {"request": "gpus", "driver": "gpu.nvidia.com", "pool": dra_node,
                 "device": f"gpu-{first + i}"} for i in range(2)]}},
                "reservedFor": [{"resource": "pods", "name": pod_name,
                                 "uid": f"uid-{pod_name}"}]}
        elif what == "dealloc":
            made.pop("status", None)
        self.claims[name] = made
        self.store.apply(CLAIMS, "MODIFIED", made)


def fresh(store: StateStore, cluster: Cluster | None = None) -> ClusterSnapshot:
    """From every object, DRA lowered again from nothing (not through the store's view)."""
    raw = store.raw()
    dra = [*cluster.dra, *cluster.claims.values()] if cluster is not None else []
    nodes = [{k: v for k, v in o.items() if k != DEVICE_SUPPLY} for o in raw.nodes]
    pods = [{**o, "spec": {k: v for k, v in o["spec"].items() if k != DEVICE_DEMAND}}
            for o in raw.pods]
    lowered = lower_objects([*nodes, *pods, *dra])
    return build_snapshot(nodes=lowered[:len(nodes)], pods=lowered[len(nodes):len(raw.pods)
                                                                  + len(nodes)],
                          objects=raw.objects, catalog=CATALOG, revision=raw.revision)


def assert_same(kept: ClusterSnapshot, built: ClusterSnapshot) -> None:
    assert list(kept.nodes) == list(built.nodes)  # placement reads nodes in name order
    for field in ("nodes", "pods", "workloads", "memberships", "gangs", "unresolved",
                  "refused"):
        assert dict(getattr(kept, field)) == dict(getattr(built, field)), field
    assert kept.revision == built.revision
    index, derived = index_of(kept), _build_index(built, "nvidia.com/gpu")
    assert dict(index.base) == dict(derived.base)
    assert dict(index.pods_on) == dict(derived.pods_on)
    assert dict(index.gang_pods) == dict(derived.gang_pods)
    assert index.base.classes == classes_of(dict(derived.base))
    assert gated_of(kept) == frozenset(p.uid for p in built.pods.values()
                                       if p.gates and p.node_name is None and not p.deleting)


@settings(max_examples=200, deadline=None)
@given(st.lists(event, min_size=5, max_size=50))
def test_every_event_leaves_the_snapshot_a_full_build_would_give(
        events: list[tuple[str, int, str]]) -> None:
    cluster = Cluster()
    assert_same(cluster.store.snapshot(), fresh(cluster.store, cluster))
    for what, n, node_name in events:
        cluster.step(what, n, node_name)
        assert_same(cluster.store.snapshot(), fresh(cluster.store, cluster))


def test_a_pod_event_is_carried_forward_not_rebuilt() -> None:
    cluster = Cluster()
    cluster.step("jobset+", 0, "n0")
    cluster.step("job+", 0, "n0")
    before = cluster.store.snapshot()
    cluster.step("member+", 0, "n0")
    after = cluster.store.snapshot()
    assert after.nodes is before.nodes  # shared, not copied: no node changed
    assert cluster.builder._delta is not None
    assert cluster.builder._delta.index.recomputed == 0  # a pending pod charges no node
    cluster.step("bind", 0, "n1")
    cluster.store.snapshot()
    assert cluster.builder._delta.index.recomputed == 1
