"""What every extender reply must be, whatever the body: the invariants the fuzz asserts.

Each check returns the problems it found as sentences (empty: the reply is right), so one run
reports every failure instead of stopping at the first.
"""

from __future__ import annotations

from typing import Any

import orjson

from tests.reliability.bodies import INT64, Body

FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
TOO_LARGE = "larger than the"


def offered(data: bytes) -> set[str] | None:
    """The node names a body offered, when it is readable enough to say; else None."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict):
        return None
    names = doc.get("NodeNames")
    if isinstance(names, list) and all(isinstance(n, str) for n in names):
        return set(names)
    items = (doc.get("Nodes") or {}).get("items") if isinstance(doc.get("Nodes"), dict) else None
    if names is None and isinstance(items, list):
        try:
            return {i["metadata"]["name"] for i in items}
        except (KeyError, TypeError):
            return None
    return None


def out_of_int64(value: Any) -> list[int]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [] if INT64[0] <= value <= INT64[1] else [value]
    if isinstance(value, dict):
        return [i for v in value.values() for i in out_of_int64(v)]
    if isinstance(value, list):
        return [i for v in value for i in out_of_int64(v)]
    return []


def _filter(result: Any, sent: set[str] | None) -> list[str]:
    if not isinstance(result, dict) or set(result) != FILTER_KEYS:
        return [f"filter result is not an ExtenderFilterResult: {str(result)[:200]}"]
    problems = []
    names, nodes = result["NodeNames"], result["Nodes"]
    if names is None and nodes is None and not result["Error"]:
        problems.append("filter result has neither NodeNames nor Nodes and no Error "
                        "(kube-scheduler filters out every node)")
    passed = set(names or []) | {i["metadata"]["name"] for i in (nodes or {}).get("items", [])}
    for what, got in (("passed", passed), ("FailedNodes", set(result["FailedNodes"])),
                      ("FailedAndUnresolvableNodes", set(result["FailedAndUnresolvableNodes"]))):
        if sent is not None and not got <= sent:
            problems.append(f"filter {what} names nodes not in the request: {sorted(got - sent)}")
    return problems


def _prioritize(result: Any, sent: set[str] | None) -> list[str]:
    if not isinstance(result, list) or not all(
            isinstance(h, dict) and set(h) == {"Host", "Score"} for h in result):
        return [f"prioritize result is not a HostPriorityList: {str(result)[:200]}"]
    problems = [f"prioritize score out of 0..10: {h}" for h in result
                if not isinstance(h["Score"], int) or not 0 <= h["Score"] <= 10]
    hosts = {h["Host"] for h in result}
    if sent is not None and not hosts <= sent:
        problems.append(f"prioritize scores nodes not in the request: {sorted(hosts - sent)}")
    return problems


def _bind(result: Any, _sent: set[str] | None) -> list[str]:
    if not isinstance(result, dict) or set(result) != {"Error"} or not isinstance(
            result["Error"], str):
        return [f"bind result is not an ExtenderBindingResult: {str(result)[:200]}"]
    return []


def _preempt(result: Any, _sent: set[str] | None) -> list[str]:
    if not isinstance(result, dict) or set(result) != {"NodeNameToMetaVictims"} or not isinstance(
            result["NodeNameToMetaVictims"], dict):
        return [f"preempt result is not an ExtenderPreemptionResult: {str(result)[:200]}"]
    problems = []
    for node, victims in result["NodeNameToMetaVictims"].items():
        if not isinstance(victims, dict) or not victims.get("Pods"):
            problems.append(f"preempt names node {node} with no victim (upstream rejects it)")
        elif not isinstance(victims.get("NumPDBViolations"), int):
            problems.append(f"preempt NumPDBViolations of {node} is not an integer")
    return problems


SHAPES = {"filter": _filter, "prioritize": _prioritize, "bind": _bind, "preempt": _preempt}


def check_reply(body: Body, status: int, data: bytes) -> list[str]:
    """The problems with one reply to ``body`` (HTTP status and payload)."""
    if status != 200:
        return [f"HTTP {status} (kube-scheduler fails the call on anything but 200)"]
    try:
        result = orjson.loads(data)
    except orjson.JSONDecodeError as err:
        return [f"reply is not JSON ({err}): {data[:120]!r}"]
    problems = SHAPES[body.verb](result, offered(body.data))
    text = data.decode(errors="replace")
    if "internal error" in text:
        problems.append(f"bad input survived only as an internal error: {text[:300]}")
    big = out_of_int64(result)
    if big:
        problems.append(f"reply echoes integers beyond int64 (Go cannot decode it): {big[:3]}")
    error = result.get("Error", "") if isinstance(result, dict) else ""
    empty = result in ([], {"NodeNameToMetaVictims": {}})
    if body.expect == "too_large":
        if body.verb in ("filter", "bind") and TOO_LARGE not in error:
            problems.append(f"a body over the limit ({len(body.data)} bytes) is not refused as "
                            f"too large: Error={error[:200]!r}")
        if body.verb in ("prioritize", "preempt") and not empty:
            problems.append("a body over the limit got a non-empty answer")
    if body.expect == "bad" and body.verb in ("filter", "bind") and not error:
        problems.append("a malformed body was answered without an Error")
    return problems
