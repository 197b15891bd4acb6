"""Filter and prioritize bodies are decoded in one C pass over the node names, with the same
result and the same refusals as reading the whole body as JSON."""

from __future__ import annotations

import orjson
import pytest

from extender.server.wire import (
    NodeMode,
    WireError,
    _extender_args,
    filter_result,
    parse_extender_args,
)

POD = {"metadata": {"name": "p", "namespace": "ml", "uid": "u1",
                    "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]},
       "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}


def test_a_names_body_reads_as_the_whole_json_reads_it() -> None:
    body = orjson.dumps({"Pod": POD, "Nodes": None, "NodeNames": ["n1", "n2", "n3"],
                         "Extra": {"ignored": [1, 2]}})
    args = parse_extender_args(body)
    assert args == _extender_args(orjson.loads(body), body)
    assert args.mode is NodeMode.NAMES and args.node_names == ("n1", "n2", "n3")
    assert args.pod == POD


def test_a_nodes_body_still_carries_its_node_objects() -> None:
    node = {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "4"}}}
    body = orjson.dumps({"Pod": POD, "Nodes": {"metadata": {}, "items": [node]},
                         "NodeNames": None})
    args = parse_extender_args(body)
    assert args.mode is NodeMode.OBJECTS and args.nodes == (node,)


@pytest.mark.parametrize("body, says", [
    (b'{"Pod":' + b"[" * 5000 + b"]" * 5000 + b',"NodeNames":["a"]}', "depth limit"),
    (b'{"Pod":{"metadata":{"name":"p"}},"NodeNames":["a",2]}', "NodeNames[1]"),
    (b'{"Pod":null,"NodeNames":["a"]}', "Pod: missing"),
    (b'{"Pod":{"metadata":{"name":"p"}},"NodeNames":["a"]} trailing', "not valid JSON"),
], ids=["nested-past-the-depth-limit", "a-name-not-a-string", "null-pod", "trailing-bytes"])
def test_a_body_the_fast_pass_refuses_is_refused_with_the_reason(body: bytes, says: str) -> None:
    with pytest.raises(WireError, match=None) as err:
        parse_extender_args(body)
    assert says in str(err.value)


def test_a_subset_answer_keeps_the_order_and_drops_names_not_offered() -> None:
    args = parse_extender_args(b'{"Pod":{"metadata":{"name":"p"}},"NodeNames":["a","b","c"]}')
    assert filter_result(args, ["c", "a"])["NodeNames"] == ["c", "a"]
    assert filter_result(args, ["c", "x", "a"], failed={"b": "full", "x": "gone"}) == {
        "Nodes": None, "NodeNames": ["c", "a"], "FailedNodes": {"b": "full"},
        "FailedAndUnresolvableNodes": {}, "Error": ""}
    assert filter_result(args, args.node_names)["NodeNames"] == ["a", "b", "c"]
    many = parse_extender_args(orjson.dumps({"Pod": POD, "NodeNames": list("abcdefgh")}))
    assert filter_result(many, list("hgfedc"))["NodeNames"] == list("hgfedc")
    assert filter_result(many, list("hgxfedc"))["NodeNames"] == list("hgfedc")
