"""Seeded request bodies for the extender fuzz: what kube-scheduler sends, then broken ways.

Body ``i`` of seed ``s`` depends only on ``(s, i)``, so a failure names a body anyone can
regenerate (``python -m tests.reliability.fuzz --seed s --only i``). Each :class:`Body` says
what a correct server must answer: any well-formed result (``answer``), the documented
refusal of a body over ``--max-request-bytes`` (``too_large``), or an ``Error`` naming bad input
(``bad``; prioritize and preempt, which have no error field, answer empty instead).
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from tests.unit.server.builders import gpu_node, job_of, jobset, jobset_pod, plain_pod

VERBS = ("filter", "prioritize", "bind", "preempt")
NODES = [f"n{i}" for i in range(6)]
INT64 = (-(2**63), 2**63 - 1)
LIMIT = 64 * 1024
"""The fuzz server's ``--max-request-bytes``: small, so oversized bodies stay cheap to send."""


def cluster() -> list[dict[str, Any]]:
    """The snapshot the fuzz server serves: 6 GPU nodes, two gangs, one running victim."""
    items: list[dict[str, Any]] = [gpu_node(n) for n in NODES]
    items += [jobset("train", workers=2, gpus=8), job_of("train"),
              jobset("big", workers=3, gpus=4), job_of("big")]
    items += [jobset_pod("train", i, gpus=8) for i in range(2)]
    items += [jobset_pod("big", i, gpus=4) for i in range(3)]
    items.append(plain_pod("victim", gpus=2) | {"spec": {"nodeName": "n5", "containers": [
        {"name": "main", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
        "status": {"phase": "Running"}})
    return items


KNOWN_PODS = [jobset_pod("train", i, gpus=8) for i in range(2)] + [
    jobset_pod("big", i, gpus=4) for i in range(3)]


@dataclass(frozen=True)
class Body:
    index: int
    verb: str
    kind: str
    data: bytes
    expect: str = "answer"
    chunks: tuple[int, ...] = ()
    """Chunk sizes when sent with ``Transfer-Encoding: chunked``; empty: ``Content-Length``."""

    def pieces(self) -> Iterator[bytes]:
        at = 0
        for size in self.chunks:
            yield self.data[at:at + size]
            at += size
        if at < len(self.data):
            yield self.data[at:]


# --- well-formed bodies, as kube-scheduler sends them -------------------------------------------

HUGE_QUANTITIES = ("1000000000", "9223372036854775807", "1e18")
"""Valid Kubernetes quantities that are far beyond any node (see ``wedges`` in :func:`body`)."""


def _quantity(r: random.Random, wedges: bool) -> str:
    small = ["0", "1", "2", "4", "8", "16", "500m", "0.5", "1Ki", "-1"]
    # Drawn the same way either way, so bodies keep their shape when the huge ones are left out.
    pick = r.choice([*small, *HUGE_QUANTITIES])
    return pick if wedges or pick not in HUGE_QUANTITIES else "8"


def _pod(r: random.Random, wedges: bool = True) -> dict[str, Any]:
    if r.random() < 0.6:
        return copy.deepcopy(r.choice(KNOWN_PODS))
    pod = plain_pod(f"p{r.randrange(50)}", gpus=1, ns=r.choice(["default", "ml"]))
    pod["spec"]["containers"][0]["resources"] = {
        "limits": {"nvidia.com/gpu": _quantity(r, wedges)},
        "requests": {"cpu": _quantity(r, wedges)}}
    if r.random() < 0.2:
        pod["spec"]["priority"] = r.randint(*INT64)
    return pod


def _names(r: random.Random) -> list[str]:
    names = r.sample(NODES, r.randint(0, len(NODES)))
    if r.random() < 0.2:
        names.append(r.choice(["ghost", "", "n0"]))  # unknown, empty, duplicated
    return names


def _extender_args(r: random.Random, wedges: bool) -> dict[str, Any]:
    names = _names(r)
    if r.random() < 0.7:  # nodeCacheCapable: true (the sandbox's configuration)
        return {"Pod": _pod(r, wedges), "Nodes": None, "NodeNames": names}
    by_name = {n["metadata"]["name"]: n for n in cluster() if n["kind"] == "Node"}
    items = [by_name.get(n, gpu_node(n or "x")) for n in names]
    return {"Pod": _pod(r, wedges), "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}


def _binding_args(r: random.Random, _wedges: bool) -> dict[str, Any]:
    meta = r.choice(KNOWN_PODS)["metadata"] if r.random() < 0.8 else {
        "name": "nobody", "namespace": "ml", "uid": "u-nobody"}
    uid = meta["uid"] if r.random() < 0.9 else "stale-uid"
    return {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": uid,
            "Node": r.choice([*NODES, "ghost"])}


def _preemption_args(r: random.Random, wedges: bool) -> dict[str, Any]:
    nodes = r.sample(NODES, r.randint(0, 3))
    pdbs = lambda: r.choice([0, 1, r.randint(0, 2**31), INT64[1]])  # noqa: E731
    if r.random() < 0.7:
        return {"Pod": _pod(r, wedges), "NodeNameToVictims": None, "NodeNameToMetaVictims": {
            n: {"Pods": [{"UID": r.choice(["uid-victim", "uid-x"])}], "NumPDBViolations": pdbs()}
            for n in nodes}}
    return {"Pod": _pod(r, wedges), "NodeNameToMetaVictims": None, "NodeNameToVictims": {
        n: {"Pods": [plain_pod("victim", gpus=2)], "NumPDBViolations": pdbs()} for n in nodes}}


WELL_FORMED: dict[str, Callable[[random.Random, bool], dict[str, Any]]] = {
    "filter": _extender_args, "prioritize": _extender_args, "bind": _binding_args,
    "preempt": _preemption_args}


# --- broken bodies ------------------------------------------------------------------------------

def _json_value(r: random.Random, depth: int = 0) -> Any:
    roll = r.random()
    if depth > 2 or roll < 0.5:
        return r.choice([None, True, False, 0, -1, 2**63 - 1, -(2**63), 1.5, 1e308, "", "n0",
                         "\u00e9\u6f22", "x" * 300])
    if roll < 0.75:
        return [_json_value(r, depth + 1) for _ in range(r.randint(0, 4))]
    return {r.choice(["Pod", "metadata", "name", "a", ""]): _json_value(r, depth + 1)
            for _ in range(r.randint(0, 4))}


def _paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*path, i))


def _replace(doc: Any, path: tuple[Any, ...], new: Any, *, delete: bool = False) -> Any:
    if not path:
        return new
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = new
    return doc


def _mutated(r: random.Random, doc: dict[str, Any]) -> bytes:
    """A well-formed body with one to three values deleted or replaced by any JSON value."""
    for _ in range(r.randint(1, 3)):
        path = r.choice(list(_paths(doc))[1:] or [()])
        doc = _replace(doc, path, _json_value(r), delete=bool(path) and r.random() < 0.3)
    return orjson.dumps(doc)


def _wrong_typed(r: random.Random, doc: dict[str, Any]) -> bytes:
    """One top-level field of the wrong JSON type."""
    key = r.choice(sorted(doc))
    wrong = {str: 5, list: "n0", dict: ["x"], type(None): r.choice([[], 7])}
    doc[key] = wrong.get(type(doc[key]), "oops")
    return orjson.dumps(doc)


def _huge_int(r: random.Random, verb: str, doc: dict[str, Any], wedges: bool) -> bytes:
    """Integers beyond int64 (and floats beyond any integer) where the wire has numbers, or
    anywhere (without ``wedges``, not in a pod's resources)."""
    big = r.choice([2**63, 2**64 - 1, 2**64, -(2**63) - 1, 10**30, 1e308])
    if verb == "preempt":
        doc["NodeNameToMetaVictims"] = {"n5": {"Pods": [{"UID": "uid-victim"}],
                                               "NumPDBViolations": big}}
        doc["NodeNameToVictims"] = None
    else:
        path = r.choice([p for p in _paths(doc) if p] or [("extra",)])
        if not wedges and "resources" in path:
            path = ("extra",)
        doc = _replace(doc, path, big)
    return json.dumps(doc).encode()  # orjson cannot write integers beyond 64 bits


def _nested(r: random.Random, doc: dict[str, Any]) -> bytes:
    """Deep nesting: inside the pod (parsed, then walked by the service) or raw brackets."""
    depth = r.choice([64, 500, 1000, 5000, 20000])
    if r.random() < 0.4:
        return b"[" * depth + b"]" * depth
    opener, closer = (b'{"a":', b"}") if r.random() < 0.5 else (b"[", b"]")
    inner = opener * depth + b"1" + closer * depth
    return orjson.dumps(doc).replace(b'"name":', b'"deep":' + inner + b',"name":', 1)


def _oversized(r: random.Random, doc: dict[str, Any]) -> bytes:
    """A well-formed body between one and four times the limit (a long list of node names,
    as a scheduler of a big cluster without nodeCacheCapable might send)."""
    target = int(LIMIT * r.uniform(1.05, 4.0))
    pad = "x" * (target // 8)
    doc["Padding"] = [pad] * 8
    return orjson.dumps(doc)


def _garbage(r: random.Random) -> bytes:
    return r.choice([b"", b"null", b"[]", b'"Pod"', b"{", b"{}", b"\xff\xfe\x00",
                     b'{"Pod": NaN}', b'{"Pod":"\\ud800"}', r.randbytes(r.randint(1, 200))])


KINDS = (("well-formed", 40), ("mutated", 12), ("bytes-mutated", 6), ("truncated", 6),
         ("wrong-typed", 8), ("huge-int", 6), ("nested", 4), ("oversized", 3),
         ("oversized-chunked", 2), ("chunked", 8), ("garbage", 5))


def body(seed: int, index: int, *, wedges: bool = True) -> Body:
    """Body ``index`` of the run with ``seed``. ``wedges=False`` asks pods for 8 instead of
    the :data:`HUGE_QUANTITIES` and puts no huge number into a pod's resources (both wedge the
    service at f07b0e9, see docs/reliability.md), so that the rest can be measured; the
    default keeps them."""
    r = random.Random(f"{seed}:{index}")
    verb = r.choice(VERBS)
    kind = r.choices([k for k, _ in KINDS], weights=[w for _, w in KINDS])[0]
    doc = WELL_FORMED[verb](r, wedges)
    data = orjson.dumps(doc)
    expect, chunks = "answer", ()
    if kind == "mutated":
        data = _mutated(r, doc)
    elif kind == "bytes-mutated":
        raw = bytearray(data)
        for _ in range(r.randint(1, 4)):
            raw[r.randrange(len(raw))] = r.randrange(256)
        data = bytes(raw)
    elif kind == "truncated":
        data, expect = data[:r.randrange(len(data))], "bad"
    elif kind == "wrong-typed":
        data = _wrong_typed(r, doc)
    elif kind == "huge-int":
        data = _huge_int(r, verb, doc, wedges)
    elif kind == "nested":
        data = _nested(r, doc)
        expect = "bad" if data.startswith(b"[[") else "answer"
    elif kind in ("oversized", "oversized-chunked"):
        data, expect = _oversized(r, doc), "too_large"
    elif kind == "garbage":
        data, expect = _garbage(r), "bad"
    if len(data) > LIMIT:
        expect = "too_large"
    if kind in ("chunked", "oversized-chunked"):
        sizes, left = [], len(data)
        while left > 0:
            sizes.append(min(left, r.choice([1, 7, 100, 4096, 60000])))
            left -= sizes[-1]
        chunks = tuple(sizes)
    return Body(index=index, verb=verb, kind=kind, data=data, expect=expect, chunks=chunks)
