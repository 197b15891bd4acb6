"""Whatever arrives, every verb answers HTTP 200 with a well-formed result (Hypothesis)."""

from __future__ import annotations

import threading
import time
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from extender.server.app import create_app
from extender.server.settings import Settings
from tests.unit.server.builders import (
    filter_body,
    gpu_node,
    job_of,
    jobset,
    jobset_pod,
    plain_pod,
    store_of,
)

STORE = store_of([gpu_node(f"n{i}") for i in range(3)]
                 + [jobset("train", workers=2, gpus=8), job_of("train"),
                    jobset_pod("train", 0, gpus=8), jobset_pod("train", 1, gpus=8)])
APP = create_app(Settings(bind_timeout=0.05, max_request_bytes=64 * 1024), STORE, time.time)
CLIENT = APP.test_client()

# What JSON can carry (64-bit integers, no lone surrogates); raw bytes cover the rest.
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)
json_scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
                | st.floats(allow_nan=False, allow_infinity=False) | text)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(text, inner, max_size=4), max_leaves=12)
node_names = st.lists(st.sampled_from(["n0", "n1", "n2", "ghost", ""]) | text,
                      max_size=6)
pods = st.sampled_from([jobset_pod("train", 0, gpus=8), plain_pod("solo", gpus=1)]) | st.builds(
    lambda name, spec: {"metadata": {"name": name, "namespace": "x"}, "spec": spec},
    text.filter(bool), json_values)
KEYS = ["Pod", "Nodes", "NodeNames", "PodName", "PodNamespace", "PodUID", "Node",
        "NodeNameToMetaVictims", "NodeNameToVictims"]

# Bodies: raw bytes, arbitrary JSON, and near-valid requests with fields replaced at random.
structured = st.fixed_dictionaries({}, optional={
    "Pod": pods | json_values, "NodeNames": node_names | json_values,
    "Nodes": json_values, "PodName": json_values | st.just("train-worker-0-0"),
    "PodNamespace": json_values | st.just("ml"), "PodUID": json_values, "Node": node_names,
    "NodeNameToMetaVictims": json_values | st.just({"n0": {"Pods": [{"UID": "u"}]}}),
})
bodies = (st.binary(max_size=64) | json_values.map(orjson.dumps)
          | structured.map(orjson.dumps)
          | st.builds(filter_body, pods, node_names.map(list)))


def well_formed(verb: str, result: Any) -> bool:
    if verb == "filter":
        return (isinstance(result, dict) and set(result) == {
            "Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
            and (result["NodeNames"] is not None or result["Nodes"] is not None
                 or result["Error"] != ""))
    if verb == "prioritize":
        return isinstance(result, list) and all(
            isinstance(h["Score"], int) and 0 <= h["Score"] <= 10 for h in result)
    if verb == "bind":
        return isinstance(result, dict) and isinstance(result.get("Error"), str)
    return isinstance(result, dict) and isinstance(result.get("NodeNameToMetaVictims"), dict)


@given(verb=st.sampled_from(["filter", "prioritize", "bind", "preempt"]), body=bodies)
def test_any_body_gets_http_200_and_a_well_formed_result(verb: str, body: bytes) -> None:
    threads_before = threading.active_count()
    response = CLIENT.post(f"/{verb}", data=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 200
    result = orjson.loads(response.data)
    assert well_formed(verb, result), result
    # Bad input is recognised as bad input, not survived as an internal error.
    assert "internal error" not in orjson.dumps(result).decode(), result
    if verb == "filter" and result["NodeNames"] is not None:
        sent = orjson.loads(body).get("NodeNames") if result["Error"] == "" else None
        assert sent is None or set(result["NodeNames"]) <= set(sent)
    assert threading.active_count() <= threads_before + 1


def test_the_service_still_answers_after_the_fuzzing() -> None:
    assert CLIENT.get("/healthz").status_code == 200
    body = filter_body(plain_pod("after", gpus=1), ["n0", "n1", "n2"])
    result = orjson.loads(CLIENT.post("/filter", data=body).data)
    # The fuzzing may have planned ml/train (two 8-GPU workers); a third node stays free.
    assert result["Error"] == "" and result["NodeNames"], result
