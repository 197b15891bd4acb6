"""Gang objects: ``kubectl get gangs`` lists every gang Muster serves with its state.

Housekeeping publishes one object per gang, owned by its workload, and only when what they
show may have changed; a gang gone is no longer published. Names are DNS subdomains.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from extender.core.gang.lifecycle import VIEW_STATES
from extender.server.gangobjects import MAX_NAME, OBJECT_STATES, object_name
from extender.server.service import GangService
from extender.server.settings import Settings
from extender.server.wire import parse_extender_args
from extender.state.memory import MemoryBinder
from extender.state.ports import MemoryEvents, MemoryGangObjects
from extender.state.store import source_of
from tests.unit.server.builders import (
    Clock,
    filter_body,
    gpu_node,
    job_of,
    jobset,
    jobset_pod,
    store_of,
)

ROOT = Path(__file__).resolve().parents[3]


def test_each_gang_gets_an_object_owned_by_its_workload_saying_its_state_and_reason() -> None:
    clock = Clock()
    store = store_of([gpu_node("n0", gpus=8), gpu_node("n1", gpus=8),
                      jobset("fits", workers=2, gpus=4), job_of("fits"),
                      jobset_pod("fits", 0, gpus=4), jobset_pod("fits", 1, gpus=4),
                      jobset("big", workers=2, gpus=8), job_of("big"),
                      jobset_pod("big", 0, gpus=8), jobset_pod("big", 1, gpus=8)])
    sink = MemoryGangObjects()
    svc = GangService(store, settings=Settings(bind_timeout=2.0), clock=clock,
                      binder=MemoryBinder(store), events=MemoryEvents(), gang_objects=sink)
    svc.filter(parse_extender_args(filter_body(jobset_pod("fits", 0, gpus=4), ["n0", "n1"])))
    svc.filter(parse_extender_args(filter_body(jobset_pod("big", 0, gpus=8), ["n0", "n1"])))
    svc.housekeep()
    objects = sink.objects()
    assert sorted(objects) == [("ml", "jobset-big"), ("ml", "jobset-fits")]
    fits, big = objects[("ml", "jobset-fits")], objects[("ml", "jobset-big")]
    assert fits["status"]["state"] == "Planned" and fits["status"]["minMember"] == 2
    assert fits["metadata"]["ownerReferences"] == [{
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "fits",
        "uid": "js-fits"}]
    assert big["status"]["state"] == "Waiting" and big["status"]["bound"] == 0
    assert "ml/big" in big["status"]["reason"] and "largest free" in big["status"]["reason"]
    # Its capacity is held for the other gang's plan, and the object says so.
    assert "ml/fits" in big["status"]["heldBy"], big["status"]
    # ... in the words of the reason itself, which names the same holders.
    assert big["status"]["reason"].endswith(big["status"]["heldBy"]), big["status"]
    # Nothing changed: not published again, even once the interval has passed.
    sink.publish({})
    clock.now += 5
    svc.housekeep()
    assert sink.objects() == {}
    # A gang gone is no longer published.
    big_js = jobset("big", workers=2, gpus=8)
    store.apply(source_of(big_js), "DELETED", big_js)
    clock.now += 5
    svc.housekeep()
    assert sorted(sink.objects()) == [("ml", "jobset-fits")]


def test_object_names_are_dns_subdomains_and_unambiguous() -> None:
    assert object_name("JobSet", "ml/train") == "jobset-train"
    assert object_name("LeaderWorkerSet", "ml/vllm/group-0") == "leaderworkerset-vllm-group-0"
    odd = object_name("RayCluster", "ml/A_b")
    assert odd.startswith("raycluster-a-b-") and odd != object_name("RayCluster", "ml/a-b")
    long = object_name("JobSet", "ml/" + "x" * 400)
    assert len(long) <= MAX_NAME and long != object_name("JobSet", "ml/" + "x" * 401)


def test_every_state_a_gang_view_shows_is_one_the_gang_crd_admits() -> None:
    crd = yaml.safe_load((ROOT / "manifests" / "crd-gang.yaml").read_text())
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    admitted = status["properties"]["state"]["enum"]
    assert sorted(OBJECT_STATES[state] for state in VIEW_STATES) == sorted(admitted)
