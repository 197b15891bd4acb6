"""Snapshots and capacity indexes carried over from build to build equal fresh ones.

The live store rebuilds its snapshot after every event, reusing what did not change (parsed
objects, resolved workloads, memberships, per-node capacity, capacity classes). Any drift from
what a fresh build derives would make the extender decide on a cluster that does not exist, so
random event sequences compare the two after every step.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.core.gang.capacity import _build_index, classes_of
from extender.core.gang.reindex import IndexKeeper
from extender.core.workloads.cluster import BuildMemo, build_snapshot
from extender.files.catalog import packaged_catalog
from tests.unit.server.builders import gpu_node, job_of, jobset, jobset_pod, plain_pod

CATALOG = packaged_catalog()
NODES = [f"n{i}" for i in range(4)]

# One step: (what, which, where)
step = st.tuples(st.sampled_from(["bind", "unbind", "relabel", "resize", "add-gang", "drop-gang",
                                  "add-pod", "drop-pod", "touch-pod"]),
                 st.integers(0, 5), st.sampled_from(NODES))


class World:
    def __init__(self) -> None:
        self.nodes = {n: gpu_node(n, gpus=8) for n in NODES}
        self.objects: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}

    def apply(self, what: str, which: int, node: str) -> None:
        gang = f"g{which % 3}"
        if what == "add-gang" and f"js/{gang}" not in self.objects:
            self.objects[f"js/{gang}"] = jobset(gang, workers=2, gpus=4)
            self.objects[f"job/{gang}"] = job_of(gang)
            for i in range(2):
                pod = jobset_pod(gang, i, gpus=4)
                self.pods[pod["metadata"]["uid"]] = pod
        elif what == "drop-gang":
            self.objects.pop(f"js/{gang}", None)
        elif what == "add-pod":
            pod = plain_pod(f"p{which}", gpus=which % 3)
            if which % 2:
                pod["spec"]["nodeName"] = node
            self.pods[pod["metadata"]["uid"]] = pod
        elif what == "drop-pod" and self.pods:
            del self.pods[sorted(self.pods)[which % len(self.pods)]]
        elif what in ("bind", "unbind", "touch-pod") and self.pods:
            uid = sorted(self.pods)[which % len(self.pods)]
            pod = copy.deepcopy(self.pods[uid])  # the store replaces a changed object
            if what == "bind":
                pod["spec"]["nodeName"] = node
            elif what == "unbind":
                pod["spec"].pop("nodeName", None)
            else:
                pod["metadata"]["resourceVersion"] = str(which)
            self.pods[uid] = pod
        elif what == "relabel":
            changed = copy.deepcopy(self.nodes[node])
            changed["metadata"]["labels"]["rack"] = f"r{which}"
            self.nodes[node] = changed
        elif what == "resize":  # a GPU fell off the bus, or came back
            self.nodes[node] = gpu_node(node, gpus=8 - which % 2)

    def build(self, memo: BuildMemo | None) -> Any:
        return build_snapshot(nodes=[self.nodes[n] for n in NODES],
                              pods=[self.pods[u] for u in sorted(self.pods)],
                              objects=[self.objects[k] for k in sorted(self.objects)],
                              catalog=CATALOG, memo=memo)


@settings(max_examples=60, deadline=None)
@given(st.lists(step, min_size=1, max_size=25))
def test_carried_over_snapshots_and_indexes_equal_fresh_ones(steps: list[tuple[str, int, str]],
                                                             ) -> None:
    world, memo, keeper = World(), BuildMemo(), IndexKeeper()
    for what, which, node in steps:
        world.apply(what, which, node)
        kept = world.build(memo)
        fresh = world.build(None)
        assert kept == fresh
        index = keeper.keep(kept)
        derived = _build_index(fresh, keeper.gpu)
        assert (index.base, index.pods_on, index.gang_pods) == (
            derived.base, derived.pods_on, derived.gang_pods)
        assert classes_of(index.base) == classes_of(dict(derived.base))


def test_one_pod_event_recomputes_one_node() -> None:
    world, memo, keeper = World(), BuildMemo(), IndexKeeper()
    for i in range(8):
        world.apply("add-pod", 2 * i + 1, NODES[i % 4])
    keeper.keep(world.build(memo))
    assert keeper.recomputed == 4
    world.apply("add-pod", 21, "n2")
    keeper.keep(world.build(memo))
    assert keeper.recomputed == 1
