"""The kube-scheduler extender wire protocol (``k8s.io/kube-scheduler/extender/v1``).

No upstream struct has JSON tags, so every key is the Go field name (``Pod``, ``NodeNames``,
``FailedNodes``...) and absent pointers travel as ``null``. Parsing turns a request body into a
frozen value or raises :class:`WireError` naming what is wrong and where; serialising always
produces the exact upstream shape. Nothing here does I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, TypedDict

import msgspec
import orjson


class WireError(ValueError):
    """A request body that does not match the protocol; the message says where."""


# --- TypedDicts: the JSON exactly as upstream spells it --------------------------------------

class NodeListJSON(TypedDict):
    metadata: dict[str, Any]
    items: list[dict[str, Any]]


class ExtenderArgsJSON(TypedDict):
    Pod: dict[str, Any] | None
    Nodes: NodeListJSON | None
    NodeNames: list[str] | None


class ExtenderFilterResultJSON(TypedDict):
    Nodes: NodeListJSON | None
    NodeNames: list[str] | None
    FailedNodes: dict[str, str]
    FailedAndUnresolvableNodes: dict[str, str]
    Error: str


class HostPriorityJSON(TypedDict):
    Host: str
    Score: int


class ExtenderBindingArgsJSON(TypedDict):
    PodName: str
    PodNamespace: str
    PodUID: str
    Node: str


class ExtenderBindingResultJSON(TypedDict):
    Error: str


class MetaPodJSON(TypedDict):
    UID: str


class MetaVictimsJSON(TypedDict):
    Pods: list[MetaPodJSON]
    NumPDBViolations: int


class ExtenderPreemptionResultJSON(TypedDict):
    NodeNameToMetaVictims: dict[str, MetaVictimsJSON]


# --- Parsed values ------------------------------------------------------------------------------

class NodeMode(StrEnum):
    """Which representation the scheduler sent; the answer must use the same one."""

    NAMES = "NodeNames"  # nodeCacheCapable: true
    OBJECTS = "Nodes"  # nodeCacheCapable: false


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    pod: Mapping[str, Any]
    node_names: tuple[str, ...]
    mode: NodeMode
    nodes: tuple[Mapping[str, Any], ...] = ()
    """Full node objects, in :attr:`NodeMode.OBJECTS` mode only (same order as names)."""


@dataclass(frozen=True, slots=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


@dataclass(frozen=True, slots=True)
class PreemptionArgs:
    pod: Mapping[str, Any]
    victims: Mapping[str, tuple[str, ...]]
    """Node name -> victim pod UIDs (from MetaVictims, or the UIDs of full Victims pods)."""
    pdb_violations: Mapping[str, int]


def decode(body: bytes | memoryview) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as err:
        raise WireError(f"request body is not valid JSON: {err}") from err


def _object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise WireError(f"{where}: expected a JSON object, got {_type(value)}")
    return value


def _string(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise WireError(f"{where}: expected a string, got {_type(value)}")
    return value


def _type(value: object) -> str:
    if value is None:
        return "null"
    return {dict: "object", list: "array", str: "string", bool: "boolean",
            int: "number", float: "number"}.get(type(value), type(value).__name__)


def _pod(body: Mapping[str, Any]) -> dict[str, Any]:
    pod = body.get("Pod")
    if pod is None:
        raise WireError("Pod: missing; the scheduler always sends the pod being scheduled")
    pod = _object(pod, "Pod")
    meta = _object(pod.get("metadata") or {}, "Pod.metadata")
    _string(meta.get("name"), "Pod.metadata.name")
    if meta.get("namespace") is not None:
        _string(meta.get("namespace"), "Pod.metadata.namespace")
    if meta.get("uid") is not None:
        _string(meta.get("uid"), "Pod.metadata.uid")
    if pod.get("spec") is not None:
        _object(pod.get("spec"), "Pod.spec")
    return pod


class _ArgsFrame(msgspec.Struct):
    """The top level of a filter or prioritize body as decoded first: ``NodeNames`` checked as
    strings while it is read, in C; the pod and ``Nodes`` kept as the bytes they were sent
    (read by orjson afterwards, as every other body is); any other key skipped unread."""

    Pod: msgspec.Raw = msgspec.Raw()
    NodeNames: list[str] | None = None
    Nodes: msgspec.Raw = msgspec.Raw()


_ARGS_FRAME = msgspec.json.Decoder(_ArgsFrame)


def parse_extender_args(body: bytes) -> ExtenderArgs:
    """Parse the body of a filter or prioritize call.

    Every filter carries up to one name per node (5,000 at 5,000 nodes): they are decoded and
    type-checked in one C pass. A body that pass refuses is read again the slow way, which
    names what is wrong and where."""
    try:
        frame = _ARGS_FRAME.decode(body)
    except (msgspec.MsgspecError, RecursionError):  # msgspec nests as deep as Python lets it
        return _extender_args(_object(decode(body), "request body"), body)
    raw: dict[str, Any] = {"Pod": decode(memoryview(frame.Pod)) if frame.Pod else None}
    if frame.NodeNames is not None:
        pod = _pod(raw)
        return ExtenderArgs(pod=pod, node_names=tuple(frame.NodeNames), mode=NodeMode.NAMES)
    raw["Nodes"] = decode(memoryview(frame.Nodes)) if frame.Nodes else None
    return _extender_args(raw, body)


def _extender_args(raw: Mapping[str, Any], body: bytes) -> ExtenderArgs:
    pod = _pod(raw)
    names, nodes = raw.get("NodeNames"), raw.get("Nodes")
    if names is not None:
        if not isinstance(names, list):
            raise WireError(f"NodeNames: expected an array of strings, got {_type(names)}")
        for i, n in enumerate(names):
            _string(n, f"NodeNames[{i}]")
        return ExtenderArgs(pod=pod, node_names=tuple(names), mode=NodeMode.NAMES)
    if nodes is not None:
        items = _object(nodes, "Nodes").get("items") or []
        if not isinstance(items, list):
            raise WireError(f"Nodes.items: expected an array, got {_type(items)}")
        objs = tuple(_object(n, f"Nodes.items[{i}]") for i, n in enumerate(items))
        if not _small_integers(objs) or _HUGE_LITERAL.search(body):  # rare: walk only then
            for i, n in enumerate(objs):
                _within_int64(n, f"Nodes.items[{i}]")
        node_names = tuple(
            _string(_object(n.get("metadata"), f"Nodes.items[{i}].metadata").get("name"),
                    f"Nodes.items[{i}].metadata.name")
            for i, n in enumerate(objs)
        )
        return ExtenderArgs(pod=pod, node_names=node_names, mode=NodeMode.OBJECTS, nodes=objs)
    raise WireError("neither NodeNames nor Nodes is set; expected one of them")


def parse_binding_args(body: bytes) -> BindingArgs:
    raw = _object(decode(body), "request body")
    fields = {k: _string(raw.get(k), k) for k in ("PodName", "PodNamespace", "PodUID", "Node")}
    for key, value in fields.items():
        if not value and key != "PodNamespace":
            raise WireError(f"{key}: must not be empty")
    return BindingArgs(pod_name=fields["PodName"], pod_namespace=fields["PodNamespace"],
                       pod_uid=fields["PodUID"], node=fields["Node"])


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


_HUGE_LITERAL = re.compile(rb"[0-9]{20}|[0-9][eE][-+]?[0-9]")
"""A number orjson reads as a float though it may be meant as an integer beyond int64 (20
digits or more, or an exponent): the strict encoder cannot see those. Only in ``Nodes`` mode,
whose objects are echoed (about 10 ms per MB)."""


def _small_integers(value: object) -> bool:
    """Whether every integer in ``value`` is within 53 bits: orjson's strict encoder tells in
    about a millisecond per MB, far faster than walking the objects in Python."""
    try:
        orjson.dumps(value, option=orjson.OPT_STRICT_INTEGER)
    except orjson.JSONEncodeError:
        return False
    return True


def _within_int64(value: object, where: str) -> None:
    """Raise :class:`WireError` naming the first integer outside int64 in ``value``: the
    objects are echoed to kube-scheduler, and Go cannot decode such a number into its types."""
    stack: list[tuple[object, str]] = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            stack.extend((v, f"{path}.{k}") for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(item))
        elif isinstance(item, int | float) and not isinstance(item, bool) and not (
                _INT64_MIN <= item <= _INT64_MAX):
            raise WireError(f"{path}: {item} is outside the int64 range")


def parse_preemption_args(body: bytes) -> PreemptionArgs:
    raw = _object(decode(body), "request body")
    pod = _pod(raw)
    victims: dict[str, tuple[str, ...]] = {}
    violations: dict[str, int] = {}
    meta = raw.get("NodeNameToMetaVictims")
    full = raw.get("NodeNameToVictims")
    key = "NodeNameToMetaVictims" if meta is not None else "NodeNameToVictims"
    source = _object(meta if meta is not None else (full or {}), key)
    for node, entry in sorted(source.items()):
        where = f"{key}[{node}]"
        if entry is None:
            continue
        fields = _object(entry, where)
        pods = fields.get("Pods") or []
        if not isinstance(pods, list):
            raise WireError(f"{where}.Pods: expected an array, got {_type(pods)}")
        uids = []
        for i, item in enumerate(pods):
            p = _object(item, f"{where}.Pods[{i}]")
            if meta is not None:
                uids.append(_string(p.get("UID"), f"{where}.Pods[{i}].UID"))
            else:
                pmeta = _object(p.get("metadata"), f"{where}.Pods[{i}].metadata")
                uids.append(_string(pmeta.get("uid"), f"{where}.Pods[{i}].metadata.uid"))
        count = fields.get("NumPDBViolations") or 0
        if not isinstance(count, int) or isinstance(count, bool):
            raise WireError(f"{where}.NumPDBViolations: expected an integer")
        if not _INT64_MIN <= count <= _INT64_MAX:  # echoed back: Go decodes it into an int64
            raise WireError(f"{where}.NumPDBViolations: {count} is outside the int64 range")
        victims[node] = tuple(uids)
        violations[node] = count
    return PreemptionArgs(pod=pod, victims=victims, pdb_violations=violations)


# --- Results --------------------------------------------------------------------------------

def filter_result(
    args: ExtenderArgs | None,
    passed: Sequence[str] = (),
    *,
    failed: Mapping[str, str] | None = None,
    unresolvable: Mapping[str, str] | None = None,
    error: str = "",
) -> ExtenderFilterResultJSON:
    """A filter answer in the representation the request used (names when unknown).

    ``passed`` is intersected with the request's nodes so the answer is always a subset of
    the input, which kube-scheduler checks and treats as an error otherwise.
    """
    mode = args.mode if args is not None else NodeMode.NAMES
    names = args.node_names if args is not None else ()
    offered = _Offered(names)
    if passed is names:  # every node passed (the pass-through): no set to build
        keep = list(passed)
    elif len(passed) <= _FEW:  # a planned member's node: scanning the names beats a set
        keep = [n for n in passed if n in names]
    else:  # a subset, as the core returns it, is checked in C and copied whole
        keep = (list(passed) if offered.names().issuperset(passed)
                else [n for n in passed if n in offered.names()])
    result: ExtenderFilterResultJSON = {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": _within(failed, offered),
        "FailedAndUnresolvableNodes": _within(unresolvable, offered),
        "Error": error,
    }
    if mode is NodeMode.NAMES:
        result["NodeNames"] = keep
    else:
        assert args is not None
        by_name = dict(zip(args.node_names, args.nodes, strict=True))
        result["Nodes"] = {"metadata": {}, "items": [dict(by_name[n]) for n in keep]}
    return result


_FEW = 4
"""Up to this many passed nodes are each looked for in the request's names by a C-level scan,
which through 5,000 names costs a quarter of building their set, or less."""


class _Offered:
    """The request's node names as a set, built only when an answer needs it (up to 5,000
    names: building it costs about as much as decoding them)."""

    __slots__ = ("_names", "_set")

    def __init__(self, names: tuple[str, ...]) -> None:
        self._names = names
        self._set: frozenset[str] | None = None

    def names(self) -> frozenset[str]:
        if self._set is None:
            self._set = frozenset(self._names)
        return self._set


def _within(reasons: Mapping[str, str] | None, offered: _Offered) -> dict[str, str]:
    if not reasons:
        return {}
    names = offered.names()
    if names.issuperset(reasons):  # the usual case, checked in C
        # The core hands out read-only views; their copy() is the dict's own C-level copy.
        return reasons.copy() if isinstance(reasons, dict | MappingProxyType) else dict(reasons)
    return {k: v for k, v in reasons.items() if k in names}


def priority_list(scores: Sequence[tuple[str, int]]) -> list[HostPriorityJSON]:
    return [{"Host": host, "Score": int(score)} for host, score in scores]


def binding_result(error: str = "") -> ExtenderBindingResultJSON:
    return {"Error": error}


def preemption_result(victims: Mapping[str, Sequence[str]],
                      pdb_violations: Mapping[str, int] | None = None,
                      ) -> ExtenderPreemptionResultJSON:
    """Only nodes with at least one victim: upstream rejects a node with none."""
    return {
        "NodeNameToMetaVictims": {
            node: {"Pods": [{"UID": uid} for uid in uids],
                   "NumPDBViolations": (pdb_violations or {}).get(node, 0)}
            for node, uids in sorted(victims.items()) if uids
        }
    }


def encode(value: object) -> bytes:
    return orjson.dumps(value)
