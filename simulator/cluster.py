"""The simulated cluster: nodes, pods, and free capacity per node and per GPU device.

Two pictures of capacity are kept, as in a real cluster:

- the *scheduler cache* (:attr:`ClusterModel.cache`): bound pods plus pods kube-scheduler has
  assumed onto a node while their bind is pending (held at Muster's barrier);
- the *cluster* the extender observes (:meth:`ClusterModel.snapshot`): bound pods only. Pods at
  the barrier are charged by Muster's ledger as in flight, exactly as in the extender.

The snapshot's derived index (base capacity per node, capacity classes, a gang's pods) is kept
up to date as pods bind and finish and handed to the core with
:func:`~extender.core.gang.capacity.attach_index`, instead of the core deriving it from every node
and pod for each of the tens of thousands of snapshots a day's replay makes. For the same
reason a snapshot's mappings are read-only *views* of the model: the model makes a new
snapshot object after every change, and the engine never keeps an old one.

All arithmetic is the core's (:mod:`extender.core.gang.charging`: whole devices, shares of one
device); nodes with the same free capacity and the same kind form a *class*, so kube-scheduler's
filter (:mod:`simulator.cache_filter`) and score look at a few hundred classes rather than ten
thousand nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from types import MappingProxyType

from extender.core.gang.capacity import (
    Capacities,
    Classes,
    SnapshotIndex,
    attach_empty,
    attach_gated,
    attach_index,
    classes_of,
    is_gated,
)
from extender.core.gang.charging import charge_pod, node_capacity, take
from extender.core.gang.nodecapacity import DEVICE, Demand, NodeCapacity, demand_of, empty_capacity
from extender.core.model.resources import GPU
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.sortednames import SortedNames
from extender.core.model.values import (
    Gang,
    GangKey,
    Membership,
    NodeInfo,
    NodeName,
    PodInfo,
    PodPhase,
    PodShape,
    WorkloadTree,
)
from simulator.cache_filter import CacheFilter
from simulator.preferences import Preferred

_NO_NAMES: SortedNames[NodeName] = SortedNames()


def devices_taken(before: NodeCapacity, after: NodeCapacity, demand: Demand) -> tuple[int, ...]:
    """Device indexes a pod took (where free milli dropped), so it frees the same ones."""
    if not (demand.whole or demand.share):
        return ()
    return tuple(i for i, (b, a) in enumerate(zip(before.devices, after.devices, strict=True))
                 if a < b)


class ClusterModel:
    """Mutable state of one replay; never shared between replays."""

    def __init__(self, nodes: Iterable[NodeInfo], *, gpu: str = GPU) -> None:
        self.gpu = gpu
        self.nodes: dict[NodeName, NodeInfo] = {n.name: n for n in sorted(nodes,
                                                                         key=lambda n: n.name)}
        self._nodes_view = MappingProxyType(self.nodes)
        self.empty = {name: empty_capacity(n, gpu=gpu) for name, n in self.nodes.items()}
        self._empty_view = Capacities(MappingProxyType(self.empty))
        """The nodes never change in a replay: one empty view serves every snapshot."""
        self.cache: dict[NodeName, NodeCapacity] = dict(self.empty)
        """Free capacity as kube-scheduler's cache sees it (bound + assumed pods)."""
        self.pods: dict[str, PodInfo] = {}
        self.memberships: dict[str, Membership] = {}
        self.workloads: dict[str, WorkloadTree] = {}
        self.gangs: dict[GangKey, Gang] = {}
        self.assumed: dict[str, NodeName] = {}
        """Pods kube-scheduler assumed onto a node, bind pending."""
        self.gated: set[str] = set()
        """Pods with a scheduling gate (:meth:`set_gates`): kept here, as the server's store
        keeps them, so an ungating look does not pass over every pod."""
        self.preferred: dict[str, Preferred] = {}
        """Pod -> its preferred node affinity (only kube-scheduler's score reads it)."""
        self.on_node: dict[NodeName, set[str]] = {n: set() for n in self.nodes}
        """Pods bound or assumed on each node."""
        self.total_gpu_milli = sum(len(c.devices) for c in self.empty.values()) * DEVICE
        self.used_gpu_milli = 0
        """GPU milli held by bound pods."""
        self.revision = 0
        """Bumped whenever what the extender observes changes."""
        self.cache_revision = 0
        """Bumped whenever the scheduler cache's free capacity changes."""
        self._snapshot: ClusterSnapshot | None = None
        self._filter = CacheFilter(self.nodes, self.cache)
        self.personal = self._filter.personal
        """Label keys left out of node kinds (their value differs on every node)."""
        # The extender's view, maintained incrementally (see the module docstring).
        self.base: dict[NodeName, NodeCapacity] = dict(self.empty)
        self._base_classes: Classes = classes_of(self.base)
        """The classes as the core reads them; a move copies one chunk of two of them."""
        self._bound_on: dict[NodeName, set[str]] = {}
        self._unpinned: set[NodeName] = set()
        """Nodes with a bound GPU pod whose devices are not known (recorded without them):
        charging one more pod there may move it, so capacity is recomputed from scratch."""
        self._pods_on: dict[NodeName, tuple[str, ...]] = {}
        self._demands: dict[PodShape, Demand] = {}
        self._gang_members: dict[str, set[str]] = {}
        self._gang_pods: dict[str, tuple[str, ...]] = {}
        self._eligible: dict[PodShape, tuple[NodeName, ...]] = {}
        """Shape -> eligible nodes; nodes never change, so one memo serves every snapshot."""

    # reading ---------------------------------------------------------------------------------
    def snapshot(self) -> ClusterSnapshot:
        """What the extender observes now: nodes, pods (bound ones carry their node), the
        resolved workloads, memberships and gangs. Rebuilt only after a change."""
        if self._snapshot is None:
            snapshot = ClusterSnapshot(
                nodes=self._nodes_view,
                pods=MappingProxyType(self.pods),
                workloads=MappingProxyType(self.workloads),
                memberships=MappingProxyType(self.memberships),
                gangs=MappingProxyType(self.gangs),
                revision=self.revision,
            )
            proxy = MappingProxyType(self.base)
            base = Capacities(proxy, classes=dict(self._base_classes))
            attach_empty(snapshot, self._empty_view, gpu=self.gpu)
            attach_gated(snapshot, frozenset(self.gated))
            attach_index(snapshot, SnapshotIndex(
                base=base, pods_on=MappingProxyType(self._pods_on),
                gang_pods=MappingProxyType(self._gang_pods), eligible=self._eligible,
            ), gpu=self.gpu)
            self._snapshot = snapshot
        return self._snapshot

    def demand(self, shape: PodShape) -> Demand:
        """:func:`~extender.core.gang.nodecapacity.demand_of`, once per shape."""
        found = self._demands.get(shape)
        if found is None:
            found = self._demands[shape] = demand_of(shape, gpu=self.gpu)
        return found

    def _rebase(self, node: NodeName, *, added: PodInfo | None = None) -> None:
        """What the extender sees free on ``node``: recomputed from its bound pods, or, for one
        pod ``added`` whose devices are known, charged on top (the same value: charging pods
        with known devices does not depend on their order)."""
        bound = self._bound_on.get(node, set())
        demand = None if added is None else self.demand(added.shape)
        if demand is not None and added is not None and node not in self._unpinned and (
                added.gpu_devices or not (demand.whole or demand.share)):
            cap = charge_pod(self.base[node], added, gpu=self.gpu)
        else:
            pods = [self.pods[u] for u in sorted(bound)]
            cap = node_capacity(self.nodes[node], pods, gpu=self.gpu)
            if any(not p.gpu_devices and (self.demand(p.shape).whole or self.demand(p.shape).share)
                   for p in pods):
                self._unpinned.add(node)
            else:
                self._unpinned.discard(node)
        if bound:
            self._pods_on[node] = tuple(sorted(bound))
        else:
            self._pods_on.pop(node, None)
        old = self.base[node]
        if old == cap:
            return
        rest = self._base_classes[old].removing(node)
        if rest:
            self._base_classes[old] = rest
        else:
            del self._base_classes[old]
        self._base_classes[cap] = self._base_classes.get(cap, _NO_NAMES).adding(node)
        self.base[node] = cap

    def _gang_member(self, uid: str, gang: str | None, *, present: bool) -> None:
        if gang is None:
            return
        members = self._gang_members.setdefault(gang, set())
        if present:
            members.add(uid)
        else:
            members.discard(uid)
        if members:
            self._gang_pods[gang] = tuple(sorted(members))
        else:
            self._gang_members.pop(gang, None)
            self._gang_pods.pop(gang, None)

    def _changed(self) -> None:
        self.revision += 1
        self._snapshot = None

    def kind_node(self, name: NodeName) -> NodeInfo:
        """A node of the same kind (same allocatable, labels, taints)."""
        return self._filter.kind_node(name)

    def feasible(self, shape: PodShape, demand: Demand) -> Iterator[tuple[NodeCapacity,
                                                                         list[NodeName]]]:
        """:meth:`CacheFilter.feasible`: kube-scheduler's filter plugins, class by class."""
        return self._filter.feasible(shape, demand)

    def feasible_among(self, shape: PodShape, demand: Demand,
                       names: Iterable[NodeName]) -> list[NodeName]:
        """Those of ``names`` :meth:`feasible` would yield, in the order given."""
        return self._filter.feasible_among(shape, demand, names)

    # workloads and pods ----------------------------------------------------------------------
    def add_workload(self, tree: WorkloadTree) -> None:
        self.workloads[tree.ref.key] = tree
        for gang in tree.gangs:
            self.gangs[gang.key] = gang
        self._changed()

    def remove_workload(self, key: str) -> None:
        tree = self.workloads.pop(key, None)
        if tree is not None:
            for gang in tree.gangs:
                self.gangs.pop(gang.key, None)
            self._changed()

    def add_pod(self, pod: PodInfo, membership: Membership | None, *,
                preferred: Preferred = ()) -> None:
        """A pod appears (created pending, or recorded already bound)."""
        self.pods[pod.uid] = pod
        if is_gated(pod):
            self.gated.add(pod.uid)
        if preferred:
            self.preferred[pod.uid] = preferred
        if membership is not None:
            self.memberships[pod.uid] = membership
            self._gang_member(pod.uid, membership.gang, present=True)
        node = pod.node_name
        if node is not None and pod.holds_resources and node in self.nodes:
            self.on_node[node].add(pod.uid)
            self._bound_on.setdefault(node, set()).add(pod.uid)
            self.used_gpu_milli += self._gpu_milli(pod)
            self._recharge(node)
            self._rebase(node)
        self._changed()

    def _set_cap(self, node: NodeName, cap: NodeCapacity) -> None:
        current = self.cache[node]
        if current == cap:
            return
        self.cache[node] = cap
        self.cache_revision += 1
        self._filter.moved(node, current, cap)

    def _recharge(self, node: NodeName) -> None:
        """Recompute a node's free capacity from its pods (recorded pods may oversubscribe,
        and a freed pod must give back the very devices it took)."""
        pods = [self._placed(u, node) for u in sorted(self.on_node[node])]
        self._set_cap(node, node_capacity(self.nodes[node], pods, gpu=self.gpu))

    def _placed(self, uid: str, node: NodeName) -> PodInfo:
        pod = self.pods[uid]
        return pod if pod.node_name is not None else replace(pod, node_name=node)

    def _gpu_milli(self, pod: PodInfo) -> int:
        return self.demand(pod.shape).gpu_milli

    def set_gates(self, uid: str, gates: tuple[str, ...]) -> None:
        """The pod's scheduling gates are now ``gates`` (added at its creation by admission,
        removed by Muster's ungating)."""
        pod = self.pods[uid]
        if pod.gates == gates:
            return
        self.pods[uid] = updated = replace(pod, gates=gates)
        if is_gated(updated):
            self.gated.add(uid)
        else:
            self.gated.discard(uid)
        self._changed()

    def assume(self, uid: str, node: NodeName) -> None:
        """kube-scheduler reserves ``node`` for the pod while its bind is pending."""
        pod = self.pods[uid]
        demand = self.demand(pod.shape)
        before = self.cache[node]
        after = take(before, demand)
        self._set_cap(node, after)
        self.on_node[node].add(uid)
        self.assumed[uid] = node
        self.pods[uid] = replace(pod, gpu_devices=devices_taken(before, after, demand))

    def forget(self, uid: str) -> None:
        """The bind failed: give the assumed capacity back."""
        node = self.assumed.pop(uid, None)
        if node is None:
            return
        self.on_node[node].discard(uid)
        self.pods[uid] = replace(self.pods[uid], gpu_devices=())
        self._recharge(node)

    def bind(self, uid: str, node: NodeName) -> PodInfo:
        """The Binding is posted: the pod runs on ``node`` (it must have been assumed there)."""
        assumed = self.assumed.pop(uid)
        if assumed != node:
            raise ValueError(f"pod {uid} was assumed on {assumed}, not {node}")
        pod = replace(self.pods[uid], node_name=node, phase=PodPhase.RUNNING)
        self.pods[uid] = pod
        self.used_gpu_milli += self._gpu_milli(pod)
        self._bound_on.setdefault(node, set()).add(uid)
        self._rebase(node, added=pod)
        self._changed()
        return pod

    def remove_pod(self, uid: str) -> PodInfo | None:
        """The pod finished or was deleted: it holds nothing any more."""
        return self.remove_pods([uid]).get(uid)

    def remove_pods(self, uids: Iterable[str]) -> dict[str, PodInfo]:
        """Pods finish together (a gang): each node they leave is recomputed once."""
        gone: dict[str, PodInfo] = {}
        left: set[NodeName] = set()
        for uid in uids:
            if uid in self.assumed:
                self.forget(uid)
            pod = self.pods.pop(uid, None)
            self.preferred.pop(uid, None)
            self.gated.discard(uid)
            member = self.memberships.pop(uid, None)
            if member is not None:
                self._gang_member(uid, member.gang, present=False)
            if pod is None:
                continue
            gone[uid] = pod
            node = pod.node_name
            if node is not None and uid in self.on_node.get(node, ()):
                self.on_node[node].discard(uid)
                self._bound_on[node].discard(uid)
                self.used_gpu_milli -= self._gpu_milli(pod)
                left.add(node)
        for node in sorted(left):
            self._rebase(node)
            if any(u in self.assumed for u in self.on_node[node]):
                self._recharge(node)
            else:  # nothing assumed there: the scheduler cache sees what the extender sees
                self._set_cap(node, self.base[node])
        if gone:
            self._changed()
        return gone

    # checks ----------------------------------------------------------------------------------
    def oversubscribed(self, node: NodeName) -> dict[str, int]:
        """Resources of ``node`` its bound pods drive below zero (what the extender observes;
        the tests check that this kept value equals one recomputed from scratch)."""
        return self.base[node].oversubscribed()

    def oversubscribed_from_scratch(self, node: NodeName) -> dict[str, int]:
        """The same, recomputed from the node's bound pods."""
        bound = [self.pods[u] for u in self.on_node[node] if u not in self.assumed]
        return node_capacity(self.nodes[node], bound, gpu=self.gpu).oversubscribed()
