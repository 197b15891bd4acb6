"""``muster describe`` answers "why is my job pending?": each gang's state, the last reason,
who holds what it needs, and the recent events on the workload and its pods; from Muster's
``/inspect/gangs`` when reachable, else from the events Muster wrote, else (a file) its pods."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest

from extender.cli.describe import render_workload, show
from extender.cli.gangstate import (
    PODS_READ,
    event_rows,
    gang_answers,
    read_events,
    read_inspect,
    sandbox_muster,
)
from extender.cli.workloads import Found, base_descriptors, workloads_in_file
from extender.kube.client import Forbidden
from tests.unit.cli.helpers import DATA, muster

WAITING = ("gang ml/story: 0 of 3 pods fit; a workers needs 4 nvidia.com/gpu on one node, the "
           "largest free is 0; 8 GPUs on node-2 are held for gang ml/other's plan")


def _stamp(ago: float) -> str:
    return (datetime.now(UTC) - timedelta(seconds=ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _event(kind: str, name: str, reason: str, message: str, ago: float, *,
           type_: str = "Normal") -> dict[str, Any]:
    return {"involvedObject": {"kind": kind, "name": name, "namespace": "ml"},
            "reason": reason, "message": message, "type": type_, "count": 1,
            "lastTimestamp": _stamp(ago)}


def _story(tmp_path: Path, *, pods: bool) -> Found:
    path = tmp_path / "story.yaml"
    text = (DATA / "story-jobset.yaml").read_text()
    if pods:
        text += "\n---\n" + (DATA / "story-with-pods.yaml").read_text()
    path.write_text(text)
    args = type("Args", (), {"descriptors": None, "no_builtin": False})()
    _, found = workloads_in_file(str(path), base_descriptors(args))
    return next(f for f in found if f.tree.ref.kind == "JobSet")


def test_the_last_gang_event_on_the_workload_gives_state_and_reason(tmp_path: Path) -> None:
    found = _story(tmp_path, pods=False)
    events = [_event("JobSet", "story", "GangPlanned", "gang ml/story: planned on node-1", 90),
              _event("JobSet", "story", "GangBindTimeout", "gang ml/story: the minimum did "
                     "not reach bind in time", 60, type_="Warning"),
              _event("JobSet", "story", "GangWaiting", WAITING, 30, type_="Warning"),
              _event("Pod", "story-workers-0-1", "GangAdmitted", "not about the workload", 10)]
    [answer] = gang_answers(found, events=events, inspected=None)
    assert answer == {"gang": "ml/story", "bound": 0, "minMember": 3, "state": "Waiting",
                      "reason": WAITING, "heldBy": [], "source": "events"}


def test_events_about_another_gang_of_the_workload_are_not_its_own(tmp_path: Path) -> None:
    found = _story(tmp_path, pods=False)
    gang = found.tree.gangs[0]
    two = replace(found, tree=replace(found.tree, gangs=(gang, replace(gang, key="ml/story-1"))))
    events = [_event("JobSet", "story", "GangAdmitted", "gang ml/story-1: minimum reached; "
                     "binding all members", 5),
              _event("JobSet", "story", "GangWaiting", WAITING, 20, type_="Warning")]
    answers = {a["gang"]: a["state"] for a in gang_answers(two, events=events, inspected=None)}
    assert answers == {"ml/story": "Waiting", "ml/story-1": "Admitted"}


def test_musters_own_view_wins_and_names_the_holder(tmp_path: Path, capsys) -> None:
    found = _story(tmp_path, pods=False)
    holder = {"kind": "plan", "gang": "ml/other", "nodes": ["node-2"], "gpus": 8.0, "pods": 2}
    inspected = [{"gang": "ml/story", "state": "waiting", "lastReason": WAITING,
                  "heldBy": [holder]}]
    [answer] = gang_answers(found, events=[], inspected=inspected)
    assert (answer["source"], answer["heldBy"]) == ("muster", [holder])
    show([found], "table", [{"age": "5m", "gangStates": [answer], "events": []}])
    out = capsys.readouterr().out
    assert "age: 5m" in out
    assert "  state: Waiting (0 of minimum 3 bound; from Muster)" in out
    assert f"  reason: {WAITING}" in out
    assert "  held by: 8 GPUs on node-2 are held for gang ml/other's plan" in out
    assert "Events: <none>" in out


def test_a_gang_with_its_minimum_bound_is_bound_whatever_the_last_event(tmp_path) -> None:
    found = _story(tmp_path, pods=True)  # two of its three pods are bound
    [answer] = gang_answers(found, events=None, inspected=None)
    assert (answer["state"], answer["source"], answer["bound"]) == ("Pending", "pods", 2)
    gang = found.tree.gangs[0]
    elastic = replace(gang, members=tuple(replace(m, min_count=1) for m in gang.members))
    two = replace(found, tree=replace(found.tree, gangs=(elastic,)))
    waiting = [_event("JobSet", "story", "GangWaiting", WAITING, 20, type_="Warning")]
    [answer] = gang_answers(two, events=waiting, inspected=None)
    assert (answer["state"], answer["bound"], answer["minMember"]) == ("Bound", 2, 2)


def test_file_mode_says_what_a_file_can_tell_and_prints_no_events(capsys, tmp_path) -> None:
    path = tmp_path / "story.yaml"
    path.write_text((DATA / "story-jobset.yaml").read_text())
    ran = muster(capsys, "describe", "-f", path)
    assert "  state: Pending (0 of minimum 3 bound; from its pods)" in ran.out
    assert "Events" not in ran.out  # a file holds no events; "<none>" would be a claim


def test_recent_events_are_the_last_few_with_their_age_and_object() -> None:
    now = datetime.now(UTC)
    events = [_event("Pod", f"p{i}", "GangWaiting", f"m{i}", 100 - i) for i in range(20)]
    rows = event_rows(events, now)
    assert len(rows) == 12 and rows[-1]["message"] == "m19"
    assert rows[-1]["object"] == "pod/p19" and rows[-1]["age"] in ("81s", "82s")
    render_workload({"kind": "JobSet", "namespace": "ml", "name": "x", "descriptor": "jobset",
                     "descriptorFormat": "muster", "descriptorSource": "catalog",
                     "phase": "Pending", "totals": {"readyPods": 0, "pods": 0,
                                                    "observedPods": 0, "gpus": 0, "cpu": "0",
                                                    "memory": "0"},
                     "gangs": [], "order": [], "roles": [], "unassigned": [], "events": rows})


class _Conn:
    server = "https://fake:6443"

    def __init__(self, fail_after: int | None = None) -> None:
        self.asked: list[str] = []
        self.fail_after = fail_after

    def request(self, method: str, path: str, *, query: dict[str, str] | None = None) -> Any:
        assert method == "GET" and path == "/api/v1/namespaces/ml/events"
        selector = (query or {})["fieldSelector"]
        if self.fail_after is not None and len(self.asked) >= self.fail_after:
            raise Forbidden('events is forbidden: User "bob" cannot list resource "events"')
        self.asked.append(selector)
        return {"items": [_event("JobSet", "story", "GangWaiting", selector,
                                 100 - len(self.asked))]}


def test_events_are_read_for_the_workload_and_a_bounded_number_of_pods(tmp_path) -> None:
    found = _story(tmp_path, pods=True)
    many = Found(tree=found.tree, raw={**found.raw, "metadata": {
        **found.raw["metadata"], "uid": "js-uid"}}, origin=found.origin,
        pods=found.pods * 5)
    conn = _Conn()
    events, problems = read_events(conn, many)
    assert problems == []
    assert conn.asked[0] == "involvedObject.uid=js-uid"
    assert len(conn.asked) == 1 + PODS_READ
    # Unbound pods first: they are the ones waiting.
    pending = next(v for v in found.pods if v.info.node_name is None)
    assert conn.asked[1] in (f"involvedObject.uid={pending.info.uid}",
                             f"involvedObject.kind=Pod,involvedObject.name={pending.info.name}")
    assert [e["message"] for e in events] == conn.asked  # oldest first


def test_events_forbidden_leave_describe_working_and_say_so(tmp_path) -> None:
    conn = _Conn(fail_after=1)
    events, [problem] = read_events(conn, _story(tmp_path, pods=True))
    assert len(events) == 1
    assert problem.startswith("cannot read events on https://fake:6443: events is forbidden")


@pytest.fixture
def muster_inspect() -> Iterator[tuple[str, list[bytes]]]:
    answers: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

        def do_GET(self) -> None:
            body = answers[0] if self.path == "/inspect/gangs" else b"{}"
            self.send_response(200 if self.path == "/inspect/gangs" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", answers
    finally:
        server.shutdown()


def test_inspect_is_read_from_musters_url_and_bad_answers_are_named(muster_inspect) -> None:
    url, answers = muster_inspect
    answers.append(orjson.dumps({"gangs": [{"gang": "ml/story", "state": "planned"}]}))
    assert read_inspect(url + "/") == ([{"gang": "ml/story", "state": "planned"}], "")
    answers[0] = b"<html>"
    gangs, why = read_inspect(url)
    assert gangs is None and why.startswith(f"Muster at {url}: /inspect/gangs is not JSON")
    answers[0] = b'{"gangs": 3}'
    assert read_inspect(url)[1] == f"Muster at {url}: /inspect/gangs has no gangs list"
    gangs, why = read_inspect("http://127.0.0.1:9")
    assert gangs is None and why.startswith("Muster at http://127.0.0.1:9 did not answer")


def test_the_sandboxs_muster_is_asked_when_the_cluster_is_the_sandbox(tmp_path, monkeypatch):
    monkeypatch.setenv("MUSTER_SANDBOX_DIR", str(tmp_path))
    server = "https://127.0.0.1:16443"
    assert sandbox_muster(server) is None  # no sandbox
    (tmp_path / "sandbox.json").write_text(orjson.dumps({
        "directory": str(tmp_path), "kubeconfig": str(tmp_path / "kubeconfig"),
        "kubectl": "kubectl", "server": server, "mode": "muster",
        "muster_url": "http://127.0.0.1:18888", "ports": {}}).decode())
    assert sandbox_muster(server) is None  # its Muster is not running
    (tmp_path / "processes.json").write_text(orjson.dumps([
        {"name": "muster", "pid": os.getpid(), "log": "muster.log", "argv": []}]).decode())
    assert sandbox_muster(server) == "http://127.0.0.1:18888"
    assert sandbox_muster("https://10.0.0.1:6443") is None  # another cluster
    (tmp_path / "sandbox.json").write_text("{not json")
    assert sandbox_muster(server) is None


def test_a_sandbox_started_with_its_own_dir_is_found_beside_its_kubeconfig(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MUSTER_SANDBOX_DIR", str(tmp_path / "default"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    server = "https://127.0.0.1:16444"
    (elsewhere / "sandbox.json").write_text(orjson.dumps({
        "directory": str(elsewhere), "kubeconfig": str(elsewhere / "kubeconfig"),
        "kubectl": "kubectl", "server": server, "mode": "muster",
        "muster_url": "http://127.0.0.1:18889", "ports": {}}).decode())
    (elsewhere / "processes.json").write_text(orjson.dumps([
        {"name": "muster", "pid": os.getpid(), "log": "muster.log", "argv": []}]).decode())
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert sandbox_muster(server) is None  # neither the default directory nor a kubeconfig
    kubeconfig = str(elsewhere / "kubeconfig")
    assert sandbox_muster(server, kubeconfig) == "http://127.0.0.1:18889"  # --kubeconfig
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([kubeconfig, "/nowhere/config"]))
    assert sandbox_muster(server) == "http://127.0.0.1:18889"  # as `sandbox up` says to export
    assert sandbox_muster("https://10.0.0.1:6443") is None  # another cluster's kubeconfig
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("MUSTER_SANDBOX_DIR", str(elsewhere))
    assert sandbox_muster(server) == "http://127.0.0.1:18889"
