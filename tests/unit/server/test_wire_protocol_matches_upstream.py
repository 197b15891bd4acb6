"""The wire types parse and serialise exactly the upstream JSON (extender/v1/types_test.go)."""

from __future__ import annotations

import orjson
import pytest

from extender.server.wire import (
    NodeMode,
    WireError,
    binding_result,
    encode,
    filter_result,
    parse_binding_args,
    parse_extender_args,
    parse_preemption_args,
    preemption_result,
    priority_list,
)

# Upstream golden request (1.37 types_test.go), with the node status trimmed.
GOLDEN_ARGS = (b'{"Pod":{"metadata":{"name":"podname"},"spec":{"containers":null},"status":{}},'
               b'"Nodes":{"metadata":{},"items":[{"metadata":{"name":"nodename"},"spec":{},'
               b'"status":{}}]},"NodeNames":["node1"]}')


def test_golden_extender_args_prefer_node_names_when_both_are_sent() -> None:
    args = parse_extender_args(GOLDEN_ARGS)
    assert args.mode is NodeMode.NAMES
    assert args.node_names == ("node1",)
    assert args.pod["metadata"]["name"] == "podname"


def test_golden_filter_result_has_upstream_keys_and_order() -> None:
    args = parse_extender_args(b'{"Pod":{"metadata":{"name":"p"}},"Nodes":null,'
                               b'"NodeNames":["node1","foo","baz"]}')
    result = filter_result(args, ["node1"], failed={"foo": "bar"}, unresolvable={"baz": "qux"},
                           error="myerror")
    assert encode(result) == (b'{"Nodes":null,"NodeNames":["node1"],"FailedNodes":{"foo":"bar"},'
                              b'"FailedAndUnresolvableNodes":{"baz":"qux"},"Error":"myerror"}')


def test_golden_binding_args_and_result() -> None:
    args = parse_binding_args(b'{"PodName":"mypodname","PodNamespace":"mypodnamespace",'
                              b'"PodUID":"mypoduid","Node":"mynode"}')
    assert (args.pod_name, args.pod_namespace, args.pod_uid, args.node) == (
        "mypodname", "mypodnamespace", "mypoduid", "mynode")
    assert encode(binding_result("myerror")) == b'{"Error":"myerror"}'


def test_golden_host_priority_list_is_a_bare_array_of_integer_scores() -> None:
    assert encode(priority_list([("myhost", 1)])) == b'[{"Host":"myhost","Score":1}]'


def test_golden_preemption_result_keeps_only_nodes_with_victims() -> None:
    result = preemption_result({"foo": ["myuid"], "empty": []}, {"foo": 1})
    assert encode(result) == (b'{"NodeNameToMetaVictims":{"foo":{"Pods":[{"UID":"myuid"}],'
                              b'"NumPDBViolations":1}}}')


def test_full_nodes_mode_answers_with_the_node_objects_it_received() -> None:
    body = orjson.dumps({"Pod": {"metadata": {"name": "p"}}, "NodeNames": None, "Nodes": {
        "metadata": {}, "items": [{"metadata": {"name": n}, "status": {"capacity": {}}}
                                  for n in ("a", "b", "c")]}})
    args = parse_extender_args(body)
    assert args.mode is NodeMode.OBJECTS
    result = filter_result(args, ["c", "a"])
    assert result["NodeNames"] is None
    assert result["Nodes"] is not None
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == ["c", "a"]
    assert result["Nodes"]["items"][0]["status"] == {"capacity": {}}


def test_filter_result_is_always_a_subset_of_the_input() -> None:
    args = parse_extender_args(b'{"Pod":{"metadata":{"name":"p"}},"NodeNames":["a","b"]}')
    result = filter_result(args, ["a", "invented"], failed={"b": "full", "ghost": "x"})
    assert result["NodeNames"] == ["a"]
    assert result["FailedNodes"] == {"b": "full"}


def test_preemption_args_read_uids_from_meta_or_full_victims() -> None:
    meta = parse_preemption_args(b'{"Pod":{"metadata":{"name":"p"}},"NodeNameToMetaVictims":'
                                 b'{"n1":{"Pods":[{"UID":"u1"}],"NumPDBViolations":2}}}')
    assert meta.victims == {"n1": ("u1",)} and meta.pdb_violations == {"n1": 2}
    full = parse_preemption_args(b'{"Pod":{"metadata":{"name":"p"}},"NodeNameToVictims":'
                                 b'{"n1":{"Pods":[{"metadata":{"uid":"u2"}}]}}}')
    assert full.victims == {"n1": ("u2",)}


@pytest.mark.parametrize(("body", "where"), [
    (b"{not json", "not valid JSON"),
    (b"[]", "request body: expected a JSON object, got array"),
    (b'{"NodeNames":["a"]}', "Pod: missing"),
    (b'{"Pod":{"metadata":{"name":7}},"NodeNames":["a"]}', "Pod.metadata.name"),
    (b'{"Pod":{"metadata":{"name":"p"}},"NodeNames":"a"}', "NodeNames: expected an array"),
    (b'{"Pod":{"metadata":{"name":"p"}},"NodeNames":[1]}', "NodeNames[0]"),
    (b'{"Pod":{"metadata":{"name":"p"}}}', "neither NodeNames nor Nodes"),
    (b'{"Pod":{"metadata":{"name":"p"}},"Nodes":{"items":[{"metadata":{}}]}}',
     "Nodes.items[0].metadata.name"),
])
def test_malformed_filter_bodies_name_what_is_wrong(body: bytes, where: str) -> None:
    with pytest.raises(WireError, match=None) as err:
        parse_extender_args(body)
    assert where in str(err.value)


def test_binding_args_require_every_field() -> None:
    with pytest.raises(WireError, match="PodUID"):
        parse_binding_args(b'{"PodName":"p","PodNamespace":"ns","Node":"n"}')
    with pytest.raises(WireError, match="Node: must not be empty"):
        parse_binding_args(b'{"PodName":"p","PodNamespace":"ns","PodUID":"u","Node":""}')
