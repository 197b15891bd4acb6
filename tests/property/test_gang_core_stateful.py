"""The core beside a naive model of kube-scheduler and the cluster, through random histories.

The machine plays kube-scheduler: it picks a pending pod, computes the candidate nodes the
way kube-scheduler's own filters would (constraints, pod count and scalar fit counting bound
pods and the pods it has assumed), asks the core to filter and assumes the pod on a passed
node. The bind comes later, as a separate step, so plans can expire, other gangs can be
planned and nodes can go in between. Pods held at the bind barrier stay assumed on their
node. Between steps the clock advances, pods and nodes go, new gangs and lone pods arrive,
the informer confirms binds, the extender restarts (its ledger rebuilt from the cluster), and
housekeeping breaks deadlocks between gangs.

Races are played too: a held bind retried by kube-scheduler after its timeout (a second bind
of the same pod, perhaps to another node), a node deleted while members are held there, and a
pod asking for a billion GPUs bound by hand.

After every step: no node's resources, pod slots or GPU devices are oversubscribed (checked by
an exact packing of the pods actually on each node, not by the core's arithmetic); no gang ever
has fewer than its minimum bound once any member is bound; no pod is bound to a node that is
gone, nor for GPUs onto a node the billion-GPU pod fills; no plan outlives its deadline; no
member waits at the barrier past the timeout. JobSet-like gangs under exclusive-topology
(each Job a leader, then a follower the operator creates once its leader is bound, pinned to
the leader's rack) keep every Job to one rack, a rack of its own, shared with no other gang.
Every filter and bind is asked twice of
identical inputs and must answer the same.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from extender.core.decide.decisions import (
    BindDecision,
    BindOutcome,
    CoreSettings,
    barriers_on_lost_nodes,
    decide_bind,
    decide_filter,
    expired_barriers,
    withdraw,
)
from extender.core.decide.yields import decide_yields
from extender.core.gang.constraints import ineligibility
from extender.core.gang.ledger import Ledger
from extender.core.model.resources import GPU, PODS
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.model.values import (
    Gang,
    Membership,
    NodeInfo,
    NodeName,
    PodInfo,
    PodPhase,
    SubgroupKind,
    SubgroupTopology,
    TopologyConstraint,
    WorkloadRef,
)
from tests.unit.core.builders import gang_pods, make_gang, make_node, make_pod, make_shape, tree_of

SETTINGS = CoreSettings(plan_ttl=10.0, bind_timeout=5.0, stage_ttl=20.0, replacement_ttl=8.0)
STEPS = 80
EXAMPLES = 150
"""At least this many histories, whatever the profile: fewer miss the races between filter and
bind this machine exists to find."""
MAX_GANGS = 6
RACKS = ("a", "b", "c")
# What a gang asks of racks: nothing (most), one rack, one rack alone, or one rack if any fits.
# "jobs": a JobSet under exclusive-topology, each Job alone in a rack of its own; "jobs+ps"
# the same with a second replicatedJob (r2) that asks for no rack and may go anywhere (the
# Jobs' racks too, on what they leave free); "lws": an LWS group whose
# subgroups each keep to a rack of their own.
topologies = st.sampled_from([None, None, "required", "exclusive", "preferred", "jobs",
                              "jobs+ps", "lws", "lws"])
def _lws_subgroups(workers: int) -> SubgroupTopology:
    """Subgroups of 2 of a group of one leader r0 and ``workers`` r1 (LWS's numbering: the
    leader is extra in subgroup 0 when the workers alone divide by 2)."""
    first = 2 if workers % 2 == 0 else 1
    rest = (workers - first) // 2
    kinds = [SubgroupKind("r0", (("r0", 1), ("r1", first)), 1, ("0",))]
    if rest:
        kinds.append(SubgroupKind("r1", (("r1", 2),), rest,
                                  tuple(str(i) for i in range(1, rest + 1))))
    return SubgroupTopology("rack", tuple(kinds), label="subgroup-index")


def _lws_subgroup(member: Membership, workers: int) -> str:
    """The subgroup-index LWS's webhook gives the pod (builders' worker i is index i + 1)."""
    if member.role == "r0":
        return "0"
    index = (member.replica or 0) + 1
    return str((index - 1) // 2 if workers % 2 == 0 else index // 2)


_TOPOLOGY = {
    None: None,
    "jobs": None,
    "jobs+ps": None,
    "lws": None,
    "required": TopologyConstraint("rack", required=True),
    "exclusive": TopologyConstraint("rack", required=True, exclusive=True),
    "preferred": TopologyConstraint("rack", required=False),
}

# Small, crowded clusters: contention between gangs, lone pods and GPU shares is the point.
# Each node is in one of a few racks (label ``rack``), for gangs that keep to one.
node_specs = st.lists(
    st.tuples(st.sampled_from([1, 2, 2, 4]), st.sampled_from([8, 16, 32]),
              st.sampled_from([3, 6, 110, 110]), st.sampled_from(RACKS)),
    min_size=1, max_size=4,
)
# (pods, whole GPUs, CPUs, elastic, milli of one GPU for a sharing pod or 0)
role_spec = st.tuples(st.integers(1, 3), st.sampled_from([0, 1, 1, 2, 4]), st.integers(1, 6),
                      st.booleans(), st.sampled_from([0, 300, 500, 700]))
role_specs = st.lists(role_spec, min_size=1, max_size=2)
loner_spec = st.tuples(st.integers(0, 2), st.sampled_from([0, 300, 500, 700]))


@cache
def _shares_pack(bins: tuple[int, ...], shares: tuple[int, ...]) -> bool:
    """Exact: whether ``shares`` (sorted, largest first) fit into devices with ``bins`` free."""
    if not shares:
        return True
    first, rest = shares[0], shares[1:]
    tried = set()
    for i, room in enumerate(bins):
        if room >= first and room not in tried:
            tried.add(room)
            left = tuple(sorted((*bins[:i], room - first, *bins[i + 1:])))
            if _shares_pack(left, rest):
                return True
    return False


def _devices_fit(gpus: int, whole: list[int], shares: list[int]) -> bool:
    """Naive exact check: whole-GPU pods take whole devices; the shares must pack onto the
    devices left, each share on one device."""
    free_devices = gpus - sum(whole)
    if free_devices < 0:
        return False
    return _shares_pack((1000,) * free_devices, tuple(sorted(shares, reverse=True)))


class GangCoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.ledger = Ledger()
        self.nodes: dict[NodeName, NodeInfo] = {}
        self.pods: dict[str, PodInfo] = {}
        self.memberships: dict[str, Membership] = {}
        self.gangs: dict[str, Gang] = {}
        self.assumed: dict[str, NodeName] = {}
        """Pods kube-scheduler assumed after filter, their bind not asked yet."""
        self.held: dict[str, NodeName] = {}
        """Pods kube-scheduler assumed and the core holds at the bind barrier."""
        self.ever_bound: dict[str, set[str]] = {}
        self.loners = 0
        self.gone: set[str] = set()
        """Gangs whose workload was deleted."""
        self.unborn: dict[str, list[tuple[PodInfo, Membership]]] = {}
        """Staged gangs: the later stage's pods, which the operator creates only once the
        first stage is bound (Ready)."""
        self.hogs: dict[str, NodeName] = {}
        """Pods asking for a billion GPUs, bound by hand (the API server accepts it), and their
        nodes: full for GPUs while the hog is there, whatever the arithmetic."""
        self.departed: list[tuple[PodInfo, Membership]] = []
        """Bound gang members deleted, which their operator makes again (a Job's backoff)."""

    @initialize(nodes=node_specs,
                gangs=st.lists(st.tuples(role_specs, topologies, st.booleans()), min_size=1,
                               max_size=3),
                loners=st.lists(loner_spec, max_size=3))
    def build(self, nodes: list[tuple[int, int, int, str]],
              gangs: list[tuple[list[tuple[int, int, int, bool, int]], str | None, bool]],
              loners: list[tuple[int, int]]) -> None:
        for i, (gpus, cpu, max_pods, rack) in enumerate(nodes):
            node = make_node(f"n{i}", gpus=gpus, cpu=cpu, max_pods=max_pods,
                             labels={"rack": rack})
            self.nodes[node.name] = node
        for roles, topology, staged in gangs:
            self._add_gang(roles, topology, staged=staged)
        for gpus, share in loners:
            self._add_loner(gpus, share)

    def _add_gang(self, roles: list[tuple[int, int, int, bool, int]],
                  topology: str | None = None, *, staged: bool = False) -> None:
        g = len(self.gangs)
        if topology in ("jobs", "jobs+ps"):
            # Each Job: its leader r0 (stage 0) and one follower r1, created once the leader
            # is bound (JobSet's pod webhook); the Jobs of one gang are alike. r2: the pods of
            # a replicatedJob in no subgroup.
            jobs, gpus, cpu, _, share = roles[0]
            ps = roles[1][0] if len(roles) > 1 else 1
            roles = [(jobs, gpus, cpu, False, share)] * 2
            if topology == "jobs+ps":
                roles.append((ps, gpus, cpu, False, share))
            staged = True
        if topology == "lws":
            # One LWS group: a leader r0 and workers r1, in subgroups of 2 as LWS's pod
            # webhook numbers them (the leader in subgroup 0), each subgroup alone in a rack.
            workers, gpus, cpu, _, share = roles[0]
            roles = [(1, gpus, cpu, False, share), (workers, gpus, cpu, False, share)]
            staged = False
        # A staged gang's second role is created only once the first is Ready (JobSet
        # dependsOn, LWS LeaderReady): a later stage, its capacity held meanwhile.
        staged = staged and len(roles) > 1
        gang = make_gang(
            f"g{g}", created=self.now + g / 100, topology=_TOPOLOGY[topology],
            stages={"r1": 1} if staged else None,
            roles=[(f"r{r}", count, make_shape(gpus=0 if share else gpus, cpu=cpu, share=share))
                   for r, (count, gpus, cpu, _, share) in enumerate(roles)],
            minimum={f"r{r}": count - 1 if elastic and count > 1 else count
                     for r, (count, _, _, elastic, _) in enumerate(roles)},
        )
        if topology in ("jobs", "jobs+ps"):
            kind = SubgroupKind("r0", (("r0", 1), ("r1", 1)), roles[0][0])
            gang = replace(gang, subgroups=SubgroupTopology("rack", (kind,)))
        if topology == "lws":
            gang = replace(gang, subgroups=_lws_subgroups(roles[1][0]))
        self.gangs[gang.key] = gang
        self.ever_bound[gang.key] = set()
        pods, members = gang_pods(gang)
        if topology == "lws":
            members = {u: replace(m, subgroup=_lws_subgroup(m, roles[1][0]))
                       for u, m in members.items()}
        self.memberships.update(members)
        later = [(p, members[p.uid]) for p in pods if gang.stage_of(members[p.uid].role) > 0]
        if later:
            self.unborn[gang.key] = later
        self.pods.update({p.uid: p for p in pods if gang.stage_of(members[p.uid].role) == 0})

    def _add_loner(self, gpus: int, share: int) -> None:
        pod = make_pod(f"loner{self.loners}",
                       shape=make_shape(gpus=0 if share else gpus, cpu=1, share=share))
        self.loners += 1
        self.pods[pod.uid] = pod

    # -- the cluster as the core sees it ---------------------------------------------------
    def snapshot(self) -> ClusterSnapshot:
        trees = [tree_of(g) for k, g in self.gangs.items() if k not in self.gone]
        members = {u: m for u, m in self.memberships.items() if u in self.pods}
        return ClusterSnapshot.of(self.nodes.values(), self.pods.values(), trees, members)

    def _on_node(self, node: NodeName, *, assumed: bool) -> list[PodInfo]:
        """Pods bound to ``node`` or held there at the barrier (and, for kube-scheduler's own
        view, the pods it assumed there and has not asked to bind yet)."""
        out = [p for p in self.pods.values() if p.node_name == node]
        out += [self.pods[u] for u, n in sorted(self.held.items()) if n == node]
        if assumed:
            out += [self.pods[u] for u, n in sorted(self.assumed.items()) if n == node]
        return out

    def candidates(self, pod: PodInfo) -> list[NodeName]:
        """kube-scheduler's view: constraints, then pod count and scalar fit of bound plus
        assumed pods (it knows nothing of GPU devices)."""
        out = []
        fenced = self._other_jobs_racks(pod)
        for name, node in sorted(self.nodes.items()):
            if ineligibility(pod.shape, node) is not None or node.label("rack") in fenced:
                continue
            on = self._on_node(name, assumed=True)
            used = pod.shape.requests
            for other in on:
                used = used + other.shape.requests
            if used.fits_in(node.allocatable) and len(on) + 1 <= node.allocatable[PODS] // 1000:
                out.append(name)
        return out

    def _other_jobs_racks(self, pod: PodInfo) -> set[str]:
        """A Job leader's required anti-affinity (JobSet's webhook): no rack where a pod of
        another Job runs or is assumed. An LWS subgroup's pod: the affinities LWS's webhook
        writes (its subgroup's rack once any of it is placed, no rack of another subgroup)."""
        member = self.memberships.get(pod.uid)
        gang = None if member is None or member.gang is None else self.gangs[member.gang]
        if gang is not None and member is not None and gang.subgroups is not None \
                and gang.subgroups.label is not None:
            return self._other_subgroups_racks(member)
        if gang is None or gang.subgroups is None or member is None or member.role != "r0":
            return set()  # followers have their nodeSelector; r2 (in no subgroup) no rule
        racks = set()
        where = {**{u: p.node_name for u, p in self.pods.items() if p.node_name is not None},
                 **self.held, **self.assumed}
        for uid, node in where.items():
            other = self.memberships.get(uid)
            if other is None or other.gang is None or node not in self.nodes:
                continue
            sub = self.gangs[other.gang].subgroups
            # Its anti-affinity selects pods of exclusive Jobs only (JobSet's webhook labels
            # just those with their priority): not LWS pods, not r2 pods in no subgroup.
            if sub is None or sub.label is not None or sub.kind_of(other.role) is None:
                continue
            if (other.gang, other.replica) != (member.gang, member.replica):
                racks.add(self.nodes[node].label("rack") or "")
        return racks

    def _other_subgroups_racks(self, member: Membership) -> set[str]:
        where = {**{u: p.node_name for u, p in self.pods.items() if p.node_name is not None},
                 **self.held, **self.assumed}
        mine, others = set(), set()
        for uid, node in where.items():
            other = self.memberships.get(uid)
            if other is None or other.subgroup is None or node not in self.nodes:
                continue
            rack = self.nodes[node].label("rack") or ""
            same = (other.gang, other.subgroup) == (member.gang, member.subgroup)
            (mine if same else others).add(rack)
        if mine:  # pod affinity: only the rack its subgroup is in
            return {n.label("rack") or "" for n in self.nodes.values()} - mine
        return others

    def pending(self) -> list[str]:
        return sorted(u for u, p in self.pods.items()
                      if p.node_name is None and u not in self.held and u not in self.assumed)

    def _bind(self, uid: str, node: NodeName) -> None:
        assert node in self.nodes, f"{uid} bound to node {node}, which the cluster no longer has"
        pod = self.pods[uid]
        assert node not in self.hogs.values() or not (pod.shape.gpus or pod.shape.gpu_share), (
            f"{uid} bound for GPUs onto {node}, which a billion-GPU pod fills")
        self.held.pop(uid, None)
        self.assumed.pop(uid, None)
        self.pods[uid] = replace(self.pods[uid], node_name=node, phase=PodPhase.RUNNING)
        member = self.memberships.get(uid)
        if member is not None and member.gang is not None:
            self.ever_bound[member.gang].add(uid)

    def _unassume(self, uid: str) -> None:
        self.held.pop(uid, None)
        self.assumed.pop(uid, None)

    # -- rules ------------------------------------------------------------------------------
    @precondition(lambda self: bool(self.pending()))
    @rule(data=st.data(), pods=st.integers(1, 3), bind_now=st.booleans())
    def schedule(self, data: st.DataObject, pods: int, bind_now: bool) -> None:
        """kube-scheduler's scheduling cycles for a few pending pods: filter, then assume the
        pod on a passed node; its bind is asked now or in a later step."""
        for _ in range(pods):
            if not self.pending():
                return
            uid = data.draw(st.sampled_from(self.pending()))
            node = self._filter(uid, data)
            if node is not None and bind_now:
                self._ask_bind(uid)

    def _filter(self, uid: str, data: st.DataObject) -> NodeName | None:
        pod = self.pods[uid]
        candidates = self.candidates(pod)
        if not candidates:
            return None  # kube-scheduler would not call the extender at all
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
            return None
        node: NodeName = data.draw(st.sampled_from(decision.passed))
        self.assumed[uid] = node
        return node

    @precondition(lambda self: bool(self.assumed))
    @rule(data=st.data(), pods=st.integers(1, 3))
    def bind(self, data: st.DataObject, pods: int) -> None:
        """kube-scheduler's binding cycles for a few pods it assumed earlier."""
        for _ in range(pods):
            if not self.assumed:
                return
            self._ask_bind(data.draw(st.sampled_from(sorted(self.assumed))))

    def _ask_bind(self, uid: str) -> None:
        node = self.assumed[uid]
        snap = self.snapshot()
        twin = self.ledger.clone()
        bind = decide_bind(uid, node, snapshot=snap, ledger=self.ledger, now=self.now,
                           settings=SETTINGS)
        again = decide_bind(uid, node, snapshot=snap, ledger=twin, now=self.now,
                            settings=SETTINGS)
        assert _same(bind, again), "identical inputs gave different bind decisions"
        if bind.outcome is BindOutcome.BIND:
            for released, where in bind.release:
                pod = self.pods.get(released)
                if released == uid or released in self.held:
                    self._bind(released, where)
                elif pod is not None and pod.node_name is None:
                    # Counted at the barrier but no request held (parked, or kube-scheduler
                    # gave up on it): Muster binds it itself, where the ledger charged it.
                    self._bind(released, where)
            if not bind.release:
                self._unassume(uid)
        elif bind.outcome is BindOutcome.WAIT:
            del self.assumed[uid]
            self.held[uid] = node
        else:
            self._unassume(uid)
            for rejected, _ in bind.rejected:
                self._unassume(rejected)

    @rule(dt=st.sampled_from([0.5, 3.0, 11.0]))
    def advance_clock(self, dt: float) -> None:
        """Time passes; the server's housekeeping tick: plans expire, barriers past their
        timeout are withdrawn, and deadlocked gangs yield."""
        self.now += dt
        self.ledger.expire(self.now)
        for gang in expired_barriers(ledger=self.ledger, now=self.now, settings=SETTINGS):
            for uid, _ in withdraw(gang, ledger=self.ledger).rejected:
                self._unassume(uid)
        snap = self.snapshot()
        twin = self.ledger.clone()
        yields = decide_yields(snapshot=snap, ledger=self.ledger, now=self.now,
                               settings=SETTINGS)
        assert yields == decide_yields(snapshot=snap, ledger=twin, now=self.now,
                                       settings=SETTINGS)
        for y in yields:
            for uid, _ in withdraw(y.gang, ledger=self.ledger, reason=y.reason).rejected:
                self._unassume(uid)

    @rule()
    def informer_confirms_binds(self) -> None:
        for uid, flight in sorted(self.ledger.in_flight().items()):
            pod = self.pods.get(uid)
            if pod is not None and pod.node_name is not None:
                self.ledger.confirm_bound(uid, flight.node)
        self.ledger.settle(self.snapshot())
        self.look_for_replacements()

    @rule(coin=st.integers(0, 2))
    def extender_restarts(self, coin: int) -> None:
        """Held binds fail with the connection; the new process rebuilds from the cluster."""
        if coin:
            return
        for uid in sorted(self.held):
            self._unassume(uid)
        self.ledger = Ledger()
        self.ledger.rebuild(self.snapshot(), now=self.now, ttl=SETTINGS.plan_ttl)

    @rule(roles=role_specs, topology=topologies, loner=st.none() | loner_spec,
          staged=st.booleans())
    def arrivals(self, roles: list[tuple[int, int, int, bool, int]], topology: str | None,
                 loner: tuple[int, int] | None, staged: bool) -> None:
        """A new gang (up to a few in all; some created in stages) or a new lone pod."""
        if loner is not None and self.loners < 6:
            self._add_loner(*loner)
        elif loner is None and len(self.gangs) < MAX_GANGS:
            self._add_gang(roles, topology, staged=staged)

    @precondition(lambda self: bool(self.unborn))
    @rule()
    def operator_creates_the_next_stage(self) -> None:
        """The operator creates a staged gang's later pods once its first stage is Ready."""
        for key, later in sorted(self.unborn.items()):
            gang = self.gangs[key]
            first = [u for u, m in self.memberships.items()
                     if m.gang == key and gang.stage_of(m.role) == 0]
            if first and all(u in self.pods and self.pods[u].node_name is not None
                             for u in first):
                self.pods.update({p.uid: self._pinned_to_leader(p, m) for p, m in later})
                del self.unborn[key]
                event("a staged gang's later stage was created")

    def _pinned_to_leader(self, pod: PodInfo, member: Membership) -> PodInfo:
        """A Job's follower, with the nodeSelector for its leader's rack (JobSet's webhook)."""
        gang = self.gangs[member.gang] if member.gang is not None else None
        if gang is None or gang.subgroups is None:
            return pod
        leader = next(p for u, p in self.pods.items() if self.memberships.get(u) is not None
                      and self.memberships[u].gang == gang.key
                      and self.memberships[u].role == "r0"
                      and self.memberships[u].replica == member.replica)
        node = self.nodes.get(leader.node_name) if leader.node_name is not None else None
        if node is None:
            return pod
        rack = node.label("rack") or ""
        return replace(pod, shape=replace(pod.shape, node_selector=(("rack", rack),)))

    @precondition(lambda self: bool(self.gangs))
    @rule(data=st.data(), coin=st.integers(0, 5))
    def delete_workload(self, data: st.DataObject, coin: int) -> None:
        """A workload is deleted mid-way (a dependency failed, the user gave up): its pods
        go, its later stage never comes, and its plan is forgotten at the next sweep."""
        if coin:
            return
        key = data.draw(st.sampled_from(sorted(self.gangs)))
        for uid in [u for u, m in self.memberships.items() if m.gang == key]:
            self.pods.pop(uid, None)
            self._unassume(uid)
            self.ledger.forget_pod(uid)
        self.unborn.pop(key, None)
        self.ledger.forget_gang(key)
        self.gone.add(key)

    @precondition(lambda self: bool(self.pods))
    @rule(data=st.data(), coin=st.integers(0, 3))
    def delete_pod(self, data: st.DataObject, coin: int) -> None:
        if coin:
            return  # deletions are rarer than scheduling, as in a real cluster
        uid = data.draw(st.sampled_from(sorted(self.pods)))
        gone = self.pods.pop(uid)
        member = self.memberships.get(uid)
        if gone.node_name is not None and member is not None and member.gang is not None:
            self.departed.append((gone, member))
        self.hogs.pop(uid, None)
        self._unassume(uid)
        self.ledger.forget_pod(uid)

    @precondition(lambda self: bool(self.departed))
    @rule(data=st.data())
    def operator_replaces_a_member(self, data: st.DataObject) -> None:
        """A deleted member's operator makes a pod in its place (new uid, pending)."""
        gone, member = self.departed.pop(data.draw(st.integers(0, len(self.departed) - 1)))
        if member.gang in self.gone:
            return
        pod = replace(gone, uid=f"{gone.uid}r", name=f"{gone.name}r", node_name=None,
                      phase=PodPhase.PENDING)
        self.pods[pod.uid] = pod
        self.memberships[pod.uid] = member

    @rule()
    def look_for_replacements(self) -> None:
        """The server's look at a new snapshot (also after every bind it confirms): an
        admitted gang below its minimum because members went holds what they used for their
        replacements, never more than it lacks and only on nodes the cluster has."""
        snap = self.snapshot()
        for moved in self.ledger.keep_for_replacements(snap, now=self.now,
                                                       ttl=SETTINGS.replacement_ttl):
            plan = self.ledger.plan_for(moved.gang)
            if moved.why != "keep_for_replacements" or plan is None:
                continue
            gang = self.gangs[moved.gang]
            bound = sum(1 for u, p in self.pods.items() if p.node_name is not None
                        and self.memberships.get(u, _NOBODY).gang == moved.gang)
            assert 0 < plan.pods <= gang.min_member - bound, (moved.gang, plan, bound)
            assert all(n in self.nodes for n, _, _ in plan.slots), plan
            event("a bound gang's departed members' room was held for their replacements")

    @precondition(lambda self: len(self.nodes) > 1)
    @rule(data=st.data(), coin=st.integers(0, 5), sweep=st.booleans())
    def lose_node(self, data: st.DataObject, coin: int, sweep: bool) -> None:
        """A node goes. Members held there stay held (their requests do not know) and pods
        assumed there still ask to bind; the server's sweep withdraws gangs held on it at its
        next look at the cluster, or the next member's bind notices first."""
        if coin:
            return
        name = data.draw(st.sampled_from(sorted(self.nodes)))
        del self.nodes[name]
        self.hogs = {u: n for u, n in self.hogs.items() if n != name}
        for uid in [u for u, p in self.pods.items() if p.node_name == name]:
            del self.pods[uid]  # the pod garbage collector removes pods of a lost node
            self.ledger.forget_pod(uid)
        if sweep:
            for gang, reason in barriers_on_lost_nodes(snapshot=self.snapshot(),
                                                       ledger=self.ledger):
                for uid, _ in withdraw(gang, ledger=self.ledger, reason=reason).rejected:
                    self._unassume(uid)

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def retry_held_bind(self, data: st.DataObject) -> None:
        """kube-scheduler gave up on a held bind (its HTTP timeout) and schedules the pod
        again: filter, perhaps another node, and a second bind for the same pod."""
        uid = data.draw(st.sampled_from(sorted(self.held)))
        del self.held[uid]
        if self._filter(uid, data) is not None:
            self._ask_bind(uid)

    @precondition(lambda self: bool(self.nodes))
    @rule(data=st.data(), coin=st.integers(0, 5))
    def hand_placed_hog(self, data: st.DataObject, coin: int) -> None:
        """A pod asking for a billion GPUs is bound by hand (``spec.nodeName``)."""
        if coin or len(self.hogs) >= 2:
            return
        name = data.draw(st.sampled_from(sorted(self.nodes)))
        pod = make_pod(f"hog{len(self.pods)}", shape=make_shape(gpus=10**9, cpu=0), node=name)
        self.pods[pod.uid] = pod
        self.hogs[pod.uid] = name

    # -- invariants ---------------------------------------------------------------------------
    @invariant()
    def no_node_pod_slot_or_device_is_oversubscribed(self) -> None:
        for name, node in self.nodes.items():
            if name in self.hogs.values():
                continue  # oversubscribed by hand; _bind checks nothing more lands there
            on = self._on_node(name, assumed=False)
            assert len(on) <= node.allocatable[PODS] // 1000, f"{name}: too many pods"
            used = sum((p.shape.requests for p in on), start=type(node.allocatable)())
            scalar = {k: v for k, v in used.items() if k != GPU}
            for k, v in scalar.items():
                assert v <= node.allocatable.get(k, 0), f"{name} oversubscribed on {k}"
            whole = [p.shape.gpus for p in on if p.shape.gpu_share == 0 and p.shape.gpus]
            shares = [p.shape.gpu_share for p in on if p.shape.gpu_share]
            assert _devices_fit(node.gpu_devices, whole, shares), f"{name} GPU devices overfull"

    @invariant()
    def gangs_are_bound_all_or_none_below_their_minimum(self) -> None:
        """Stage by stage: a stage is bound whole (its minimum) or not at all, and a later
        stage only after the earlier one (an unstaged gang is one stage: its minimum)."""
        for key, gang in self.gangs.items():
            by_stage: dict[int, int] = {}
            for uid in self.ever_bound[key]:
                stage = gang.stage_of(self.memberships[uid].role)
                by_stage[stage] = by_stage.get(stage, 0) + 1
            for stage, bound in by_stage.items():
                assert bound >= gang.stage_minimum(stage), (
                    f"gang {key}: stage {stage} has {bound} bound, minimum "
                    f"{gang.stage_minimum(stage)}")
                assert stage == 0 or by_stage.get(stage - 1, 0) >= gang.stage_minimum(
                    stage - 1), f"gang {key}: stage {stage} bound before stage {stage - 1}"

    def _racks_of(self, key: str) -> set[str]:
        """Racks the gang's pods are bound or held in."""
        where = [p.node_name for u, p in self.pods.items() if p.node_name is not None
                 and self.memberships.get(u, _NOBODY).gang == key]
        where += [n for u, n in self.held.items() if self.memberships.get(u, _NOBODY).gang == key]
        return {self.nodes[n].label("rack") or "" for n in where if n in self.nodes}

    @invariant()
    def a_required_domain_gang_is_never_bound_across_racks(self) -> None:
        for key, gang in self.gangs.items():
            if gang.topology is not None and gang.topology.required:
                racks = self._racks_of(key)
                assert len(racks) <= 1, f"gang {key} keeps to one rack, runs in {racks}"

    @invariant()
    def no_other_gang_runs_in_the_rack_an_exclusive_gang_holds(self) -> None:
        held = {key: self._racks_of(key) for key in self.gangs}
        for key, gang in self.gangs.items():
            if gang.topology is None or not gang.topology.exclusive:
                continue
            for other, racks in held.items():
                shared = racks & held[key]
                assert other == key or not shared, (
                    f"gang {other} runs in rack {shared}, which exclusive gang {key} holds")

    @invariant()
    def each_job_keeps_to_a_rack_of_its_own_that_no_other_gang_is_in(self) -> None:
        racks: dict[tuple[str, int], set[str]] = {}
        where = {**{u: p.node_name for u, p in self.pods.items() if p.node_name is not None},
                 **self.held}
        for uid, node in where.items():
            member = self.memberships.get(uid, _NOBODY)
            sub = self.gangs[member.gang].subgroups if member.gang is not None else None
            if sub is not None and node in self.nodes and sub.kind_of(member.role) is None:
                event("a pod of a replicatedJob in no subgroup was bound or held")
                continue  # it keeps to no rack
            if member.gang is not None and sub is not None and node in self.nodes:
                # a Job is its replica; an LWS subgroup is the one its pod says
                part = (int(member.subgroup) if member.subgroup is not None
                        else member.replica or 0)
                if member.subgroup is not None:
                    event("an LWS subgroup's pod was bound or held in its subgroup's rack")
                racks.setdefault((member.gang, part), set()).add(
                    self.nodes[node].label("rack") or "")
        seen: dict[str, tuple[str, int]] = {}
        for job, held in sorted(racks.items()):
            assert len(held) == 1, f"Job {job} runs in racks {held}"
            rack = next(iter(held))
            assert rack not in seen, f"Jobs {seen.get(rack)} and {job} share rack {rack}"
            seen[rack] = job
            for other in self.gangs:
                if other != job[0]:
                    assert rack not in self._racks_of(other), (
                        f"gang {other} runs in rack {rack}, which Job {job} holds")
        if racks:
            event("a Job was bound or held in its own rack")

    @invariant()
    def no_plan_outlives_its_deadline(self) -> None:
        for gang, res in self.ledger.reservations():
            assert res.deadline > self.now, f"plan of {gang} is past its deadline"
            # A staged gang's plan is extended when a stage is released: never past then
            # plus --stage-ttl.
            assert res.deadline <= max(res.reserved_at + SETTINGS.plan_ttl,
                                       self.now + SETTINGS.stage_ttl)

    @invariant()
    def no_member_waits_at_the_barrier_past_the_timeout(self) -> None:
        for gang, started in self.ledger.barriers():
            assert self.now < started + SETTINGS.bind_timeout, gang


_NOBODY = Membership(workload=WorkloadRef("v1", "Pod", "", ""), role="")


def _same(a: BindDecision, b: BindDecision) -> bool:
    return (a.outcome, a.reason, a.gang, a.release, a.rejected) == (
        b.outcome, b.reason, b.gang, b.release, b.rejected)


TestGangCore = GangCoreMachine.TestCase
TestGangCore.settings = settings(settings.default, stateful_step_count=STEPS,
                                 max_examples=max(EXAMPLES, settings.default.max_examples))


class TestGangCoreLongHistories(GangCoreMachine.TestCase):  # type: ignore[name-defined]
    """Longer histories: many plans expiring, restarts, gangs arriving (fewer of them)."""

    settings = settings(settings.default, stateful_step_count=4 * STEPS)
