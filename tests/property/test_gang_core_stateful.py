"""The core beside a naive model of kube-scheduler and the cluster, through random histories.

The machine plays kube-scheduler: it picks a pending pod, computes the candidate nodes the
way kube-scheduler's own filters would (constraints, and scalar fit counting bound pods and the
pods it has assumed), asks the core to filter, picks a passed node, and asks the core to bind.
Pods held at the bind barrier stay assumed on their node. Between steps the clock advances,
pods are deleted, nodes are lost, and the informer confirms binds.

After every step: no node's resources, and no GPU device, are oversubscribed (checked by a
naive exact packing, not by the core's arithmetic); no gang ever has fewer than its minimum
bound once any member is bound; no plan outlives its deadline; the same inputs give the same
decision.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from extender.core.constraints import ineligibility
from extender.core.decisions import (
    BindOutcome,
    CoreSettings,
    decide_bind,
    decide_filter,
    expired_barriers,
    withdraw,
)
from extender.core.ledger import Ledger
from extender.core.model import Gang, Membership, NodeInfo, NodeName, PodInfo, PodPhase
from extender.core.resources import GPU
from extender.core.snapshot import ClusterSnapshot
from tests.unit.core.builders import gang_pods, make_gang, make_node, make_pod, make_shape, tree_of

SETTINGS = CoreSettings(plan_ttl=10.0, bind_timeout=5.0)

node_specs = st.lists(st.tuples(st.sampled_from([4, 8]), st.sampled_from([8, 16, 32])),
                      min_size=1, max_size=4)
role_specs = st.lists(
    st.tuples(st.integers(1, 3), st.integers(1, 8), st.integers(1, 6), st.booleans()),
    min_size=1, max_size=2,
)
loner_specs = st.lists(st.tuples(st.integers(0, 2), st.sampled_from([0, 0, 300, 500, 700])),
                       max_size=3)


def _devices_fit(gpus: int, whole: list[int], shares: list[int]) -> bool:
    """Naive exact check: whole-GPU pods take whole devices, and the shares pack onto the
    devices left (first-fit over every order of the shares, which is exact for so few)."""
    free_devices = gpus - sum(whole)
    if free_devices < 0:
        return False
    if not shares:
        return True
    for order in itertools.permutations(sorted(shares)):
        bins = [1000] * free_devices
        ok = True
        for s in order:
            for i, b in enumerate(bins):
                if b >= s:
                    bins[i] -= s
                    break
            else:
                ok = False
                break
        if ok:
            return True
    return False


class GangCoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.ledger = Ledger()
        self.nodes: dict[NodeName, NodeInfo] = {}
        self.pods: dict[str, PodInfo] = {}
        self.memberships: dict[str, Membership] = {}
        self.gangs: dict[str, Gang] = {}
        self.held: dict[str, NodeName] = {}
        """Pods kube-scheduler assumed and the core holds at the bind barrier."""
        self.ever_bound: dict[str, set[str]] = {}

    @initialize(nodes=node_specs, gangs=st.lists(role_specs, min_size=1, max_size=3),
                loners=loner_specs)
    def build(self, nodes: list[tuple[int, int]], gangs: list[list[tuple[int, int, int, bool]]],
              loners: list[tuple[int, int]]) -> None:
        for i, (gpus, cpu) in enumerate(nodes):
            node = make_node(f"n{i}", gpus=gpus, cpu=cpu)
            self.nodes[node.name] = node
        for g, roles in enumerate(gangs):
            gang = make_gang(
                f"g{g}", created=float(g),
                roles=[(f"r{r}", count, make_shape(gpus=gpus, cpu=cpu))
                       for r, (count, gpus, cpu, _) in enumerate(roles)],
                minimum={f"r{r}": count - 1 if elastic and count > 1 else count
                         for r, (count, _, _, elastic) in enumerate(roles)},
            )
            self.gangs[gang.key] = gang
            self.ever_bound[gang.key] = set()
            pods, members = gang_pods(gang)
            self.pods.update({p.uid: p for p in pods})
            self.memberships.update(members)
        for i, (gpus, share) in enumerate(loners):
            pod = make_pod(f"loner{i}", shape=make_shape(gpus=0 if share else gpus, cpu=1,
                                                          share=share))
            self.pods[pod.uid] = pod

    # -- the cluster as the core sees it ---------------------------------------------------
    def snapshot(self) -> ClusterSnapshot:
        trees = [tree_of(g) for g in self.gangs.values()]
        members = {u: m for u, m in self.memberships.items() if u in self.pods}
        return ClusterSnapshot.of(self.nodes.values(), self.pods.values(), trees, members)

    def _on_node(self, node: NodeName) -> list[PodInfo]:
        out = [p for p in self.pods.values() if p.node_name == node]
        out += [self.pods[u] for u, n in self.held.items() if n == node]
        return out

    def candidates(self, pod: PodInfo) -> list[NodeName]:
        """kube-scheduler's view: constraints, then scalar fit of bound plus assumed pods."""
        out = []
        for name, node in sorted(self.nodes.items()):
            if ineligibility(pod.shape, node) is not None:
                continue
            used = pod.shape.requests
            for other in self._on_node(name):
                used = used + other.shape.requests
            if used.fits_in(node.allocatable):
                out.append(name)
        return out

    def pending(self) -> list[str]:
        return sorted(u for u, p in self.pods.items()
                      if p.node_name is None and u not in self.held)

    def _bind(self, uid: str, node: NodeName) -> None:
        self.held.pop(uid, None)
        self.pods[uid] = replace(self.pods[uid], node_name=node, phase=PodPhase.RUNNING)
        member = self.memberships.get(uid)
        if member is not None and member.gang is not None:
            self.ever_bound[member.gang].add(uid)

    # -- rules ------------------------------------------------------------------------------
    @precondition(lambda self: bool(self.pending()))
    @rule(data=st.data())
    def schedule_one(self, data: st.DataObject) -> None:
        uid = data.draw(st.sampled_from(self.pending()))
        pod = self.pods[uid]
        candidates = self.candidates(pod)
        if not candidates:
            return  # kube-scheduler would not call the extender at all
        snap = self.snapshot()
        twin = self.ledger.clone()
        decision = decide_filter(pod, candidates, snapshot=snap, ledger=self.ledger,
                                 now=self.now, settings=SETTINGS)
        again = decide_filter(pod, candidates, snapshot=snap, ledger=twin, now=self.now,
                              settings=SETTINGS)
        assert (decision.passed, dict(decision.failed), dict(decision.unresolvable),
                decision.outcome, decision.reason) == (
            again.passed, dict(again.failed), dict(again.unresolvable), again.outcome,
            again.reason), "identical inputs gave different decisions"
        assert set(decision.passed) <= set(candidates)
        if not decision.passed:
            return
        node = decision.passed[0]
        self.held[uid] = node  # assumed by kube-scheduler while bind runs
        bind = decide_bind(uid, node, snapshot=snap, ledger=self.ledger, now=self.now,
                           settings=SETTINGS)
        if bind.outcome is BindOutcome.BIND:
            for released, where in bind.release:
                self._bind(released, where)
            if not bind.release:
                self.held.pop(uid, None)
        elif bind.outcome is BindOutcome.REJECT:
            self.held.pop(uid, None)
            for rejected, _ in bind.rejected:
                self.held.pop(rejected, None)

    @rule(dt=st.sampled_from([0.5, 1.0, 3.0, 6.0, 11.0]))
    def advance_clock(self, dt: float) -> None:
        self.now += dt
        self.ledger.expire(self.now)  # the server's housekeeping tick
        for gang in expired_barriers(ledger=self.ledger, now=self.now, settings=SETTINGS):
            for uid, _ in withdraw(gang, ledger=self.ledger).rejected:
                self.held.pop(uid, None)

    @rule()
    def informer_confirms_binds(self) -> None:
        for uid, flight in sorted(self.ledger.in_flight().items()):
            pod = self.pods.get(uid)
            if pod is not None and pod.node_name is not None:
                self.ledger.confirm_bound(uid, flight.node)

    @precondition(lambda self: bool(self.pods))
    @rule(data=st.data(), coin=st.integers(0, 3))
    def delete_pod(self, data: st.DataObject, coin: int) -> None:
        if coin:
            return  # deletions are rarer than scheduling, as in a real cluster
        uid = data.draw(st.sampled_from(sorted(self.pods)))
        del self.pods[uid]
        self.held.pop(uid, None)
        self.ledger.forget_pod(uid)

    @precondition(lambda self: len(self.nodes) > 1)
    @rule(data=st.data(), coin=st.integers(0, 5))
    def lose_node(self, data: st.DataObject, coin: int) -> None:
        if coin:
            return
        name = data.draw(st.sampled_from(sorted(self.nodes)))
        del self.nodes[name]
        for uid in [u for u, p in self.pods.items() if p.node_name == name]:
            del self.pods[uid]  # the pod garbage collector removes pods of a lost node
            self.ledger.forget_pod(uid)
        for uid in [u for u, n in self.held.items() if n == name]:
            del self.held[uid]
            self.ledger.forget_pod(uid)

    # -- invariants ---------------------------------------------------------------------------
    @invariant()
    def no_node_or_device_is_oversubscribed(self) -> None:
        for name, node in self.nodes.items():
            on = self._on_node(name)
            used = sum((p.shape.requests for p in on), start=type(node.allocatable)())
            scalar = {k: v for k, v in used.items() if k != GPU}
            for k, v in scalar.items():
                assert v <= node.allocatable.get(k, 0), f"{name} oversubscribed on {k}"
            whole = [p.shape.gpus for p in on if p.shape.gpu_share == 0 and p.shape.gpus]
            shares = [p.shape.gpu_share for p in on if p.shape.gpu_share]
            assert _devices_fit(node.gpu_devices, whole, shares), f"{name} GPU devices overfull"

    @invariant()
    def gangs_are_bound_all_or_none_below_their_minimum(self) -> None:
        for key, gang in self.gangs.items():
            bound = self.ever_bound[key]
            assert not bound or len(bound) >= gang.min_member, (
                f"gang {key}: {len(bound)} bound, minimum {gang.min_member}")

    @invariant()
    def no_plan_outlives_its_deadline(self) -> None:
        for gang, res in self.ledger.reservations():
            assert res.deadline > self.now, f"plan of {gang} is past its deadline"
            assert res.deadline <= res.reserved_at + SETTINGS.plan_ttl

    @invariant()
    def no_member_waits_at_the_barrier_past_the_timeout(self) -> None:
        for gang, started in self.ledger.barriers():
            assert self.now < started + SETTINGS.bind_timeout, gang


TestGangCore = GangCoreMachine.TestCase
