"""The admission webhook gates a new pod only when Muster will ungate it, answers every
request (malformed ones too) with a well-formed AdmissionReview that allows the pod, and the
housekeeping loop removes the gates of a gang together once it is planned."""

from __future__ import annotations

import base64
import contextlib
import copy
import http.client
import socket
import ssl
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest

from extender.core.workloads.catalog import Catalog
from extender.files.catalog import packaged_catalog
from extender.sandbox.operators import make_certs
from extender.server.admission import Admission
from extender.server.app import create_app
from extender.server.service import GangService
from extender.server.settings import Settings
from extender.server.surface import CertFiles, SurfaceError, bind_probe_socket, serve_webhook
from extender.state.memory import MemoryBinder
from extender.state.ports import MemoryEvents, MemoryUngater
from extender.state.store import StateStore
from tests.unit.server.builders import Clock, gpu_node, job_of, jobset, jobset_pod, store_of

GATE = "muster.dev/gang"
SETTINGS = Settings(bind_timeout=2.0, plan_ttl=30.0)


def admission(store: StateStore, catalog: Any = packaged_catalog) -> Admission:
    return Admission(store, catalog=catalog, settings=SETTINGS, gate=GATE)


def new_pod(js: str, index: int, *, gpus: int = 4, scheduler: str = "muster",
            gates: list[str] | None = None) -> dict[str, Any]:
    """A JobSet pod as the Job controller creates it: generateName, no name, no UID."""
    pod = jobset_pod(js, index, gpus=gpus)
    meta = pod["metadata"]
    meta["generateName"] = meta.pop("name") + "-"
    del meta["uid"]
    pod["spec"]["schedulerName"] = scheduler
    if gates is not None:
        pod["spec"]["schedulingGates"] = [{"name": g} for g in gates]
    return pod


def review(obj: Any, *, uid: str = "req-1", operation: str = "CREATE",
           version: str = "admission.k8s.io/v1") -> bytes:
    return orjson.dumps({"apiVersion": version, "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "ml", "operation": operation, "object": obj}})


def applied(pod: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    """The pod with the answer's JSON patch applied (the ops the webhook uses: add)."""
    response = answer["response"]
    out = copy.deepcopy(pod)
    if "patch" not in response:
        return out
    assert response["patchType"] == "JSONPatch"
    for op in orjson.loads(base64.b64decode(response["patch"])):
        assert op["op"] == "add"
        parts = op["path"].strip("/").split("/")
        target = out
        for part in parts[:-1]:
            target = target[part]
        if parts[-1] == "-":
            target.append(op["value"])
        else:
            assert parts[-1] not in target
            target[parts[-1]] = op["value"]
    return out


def gates_of(pod: dict[str, Any]) -> list[str]:
    return [g["name"] for g in pod["spec"].get("schedulingGates", [])]


def well_formed(answer: dict[str, Any], uid: str) -> None:
    assert answer["kind"] == "AdmissionReview"
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["response"]["uid"] == uid
    assert answer["response"]["allowed"] is True


def cluster() -> StateStore:
    return store_of([gpu_node("n0"), gpu_node("n1"), jobset("train", workers=3, gpus=4),
                     job_of("train")])


def test_a_new_gang_pod_gets_musters_gate_and_keeps_its_other_gates() -> None:
    hook = admission(cluster())
    pod = new_pod("train", 0)
    answer = hook.review(review(pod))
    well_formed(answer, "req-1")
    assert gates_of(applied(pod, answer)) == [GATE]
    other = new_pod("train", 1, gates=["example.com/quota"])
    assert gates_of(applied(other, hook.review(review(other)))) == ["example.com/quota", GATE]


def test_pods_muster_would_not_ungate_are_never_gated() -> None:
    hook = admission(cluster())
    theirs = new_pod("train", 0, scheduler="default-scheduler")
    lone = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "lone"},
            "spec": {"schedulerName": "muster", "containers": [{"name": "c", "image": "x"}]}}
    bound = new_pod("train", 1)
    bound["spec"]["nodeName"] = "n0"
    already = new_pod("train", 2, gates=[GATE])
    for pod in (theirs, lone, bound, already):
        answer = hook.review(review(pod))
        well_formed(answer, "req-1")
        assert "patch" not in answer["response"], pod["metadata"]


def test_a_pod_whose_owner_muster_has_not_observed_yet_is_gated_as_a_possible_member() -> None:
    store = store_of([gpu_node("n0"), jobset("train", workers=3, gpus=4)])  # no Job yet
    pod = new_pod("train", 0)
    assert gates_of(applied(pod, admission(store).review(review(pod)))) == [GATE]


@pytest.mark.parametrize("body", [
    b"", b"not json", b"[]", b'{"request": 3}', b'{"apiVersion": "admission.k8s.io/v1"}',
    orjson.dumps({"request": {"uid": 7, "object": {}}}),
], ids=["empty", "not-json", "a-list", "request-not-an-object", "no-request", "uid-not-a-string"])
def test_a_malformed_review_is_answered_allowed_without_a_patch(body: bytes) -> None:
    answer = admission(cluster()).review(body)
    well_formed(answer, "")
    assert "patch" not in answer["response"]


@pytest.mark.parametrize("obj", [None, [], {"metadata": {}}, {"spec": "x"},
                                 {"metadata": {"name": 3}, "spec": {"containers": "x"}}],
                         ids=["null", "list", "no-spec", "spec-not-an-object", "bad-fields"])
def test_a_review_of_no_readable_pod_is_allowed_unchanged(obj: Any) -> None:
    answer = admission(cluster()).review(review(obj, uid="u-9"))
    well_formed(answer, "u-9")
    assert "patch" not in answer["response"]


def test_only_creations_are_gated_and_the_review_version_is_echoed() -> None:
    hook = admission(cluster())
    answer = hook.review(review(new_pod("train", 0), operation="UPDATE"))
    assert "patch" not in answer["response"]
    old = hook.review(review(new_pod("train", 0), version="admission.k8s.io/v1beta1"))
    assert old["apiVersion"] == "admission.k8s.io/v1beta1" and "patch" in old["response"]


def test_a_fault_of_musters_own_allows_the_pod_ungated() -> None:
    def broken() -> Catalog:
        raise RuntimeError("boom")

    answer = admission(cluster(), catalog=broken).review(review(new_pod("train", 0)))
    well_formed(answer, "req-1")
    assert "patch" not in answer["response"]


def test_the_route_answers_200_with_a_review_even_without_a_webhook_configured() -> None:
    store = cluster()
    for hook in (None, admission(store)):
        app = create_app(SETTINGS, store, Clock(), admission=hook)
        client = app.test_client()
        reply = client.post("/admission/gate", data=review(new_pod("train", 0)))
        assert reply.status_code == 200
        well_formed(reply.get_json(), "req-1")
        assert ("patch" in reply.get_json()["response"]) is (hook is not None)
        bad = client.post("/admission/gate", data=b"\xff\xfe")
        assert bad.status_code == 200
        well_formed(bad.get_json(), "")
        if hook is not None:
            scraped = client.get("/metrics").get_data(as_text=True)
            assert 'muster_decisions_total{outcome="gated",verb="admission"} 1.0' in scraped
            assert 'muster_decisions_total{outcome="malformed",verb="admission"} 1.0' in scraped
            assert 'muster_request_seconds_count{verb="admission"} 2.0' in scraped


def gated_pod(js: str, index: int, gpus: int) -> dict[str, Any]:
    pod = jobset_pod(js, index, gpus=gpus)
    pod["spec"]["schedulingGates"] = [{"name": "example.com/other"}, {"name": GATE}]
    return pod


def test_housekeeping_ungates_a_gang_whole_once_it_fits() -> None:
    store = store_of([gpu_node("n0"), jobset("train", workers=3, gpus=4), job_of("train"),
                      *(gated_pod("train", i, 4) for i in range(3))])
    ungater = MemoryUngater()
    clock = Clock()
    svc = GangService(store, settings=SETTINGS, clock=clock, binder=MemoryBinder(store),
                      events=MemoryEvents(), ungater=ungater)
    svc.housekeep()
    assert ungater.ungated() == []  # 12 GPUs on one 8-GPU node: it stays gated
    assert "train" in svc.session.last_reason[next(iter(svc.session.last_reason))]
    store.apply("v1/Node", "ADDED", gpu_node("n1"))
    clock.now += 1
    svc.housekeep()
    assert sorted(ref.name for ref, _ in ungater.ungated()) == [
        f"train-worker-0-{i}" for i in range(3)]


def test_looks_the_fit_bound_answers_are_counted_apart_from_planned_ones() -> None:
    store = store_of([gpu_node("n0"), jobset("train", workers=3, gpus=4), job_of("train"),
                      *(gated_pod("train", i, 4) for i in range(3))])
    ungater = MemoryUngater()
    clock = Clock()
    app = create_app(SETTINGS, store, clock, binder=MemoryBinder(store), events=MemoryEvents(),
                     ungater=ungater)
    svc = app.extensions["muster.decider"]
    assert isinstance(svc, GangService)

    def looks() -> dict[str, float]:
        scraped = app.test_client().get("/metrics").data.decode()
        return {how: float(line.rsplit(" ", 1)[1]) for how in ("planner", "bound")
                for line in scraped.splitlines()
                if line.startswith(f'muster_gang_looks_total{{answered_by="{how}"}} ')}

    svc.housekeep()  # 12 GPUs on one 8-GPU node: planned once, stays gated
    assert looks() == {"planner": 1.0, "bound": 0.0}
    store.apply("v1/Node", "ADDED", gpu_node("n1", gpus=2))  # room grew, not to 12
    clock.now += 1
    svc.housekeep()
    assert looks() == {"planner": 1.0, "bound": 1.0} and ungater.ungated() == []
    store.apply("v1/Node", "ADDED", gpu_node("n2"))
    clock.now += 1
    svc.housekeep()
    assert looks() == {"planner": 2.0, "bound": 1.0}
    assert len(ungater.ungated()) == 3
    # A new term (leadership taken over) starts a new session, whose first look plans the
    # gang (still gated here: the memory ungater leaves the store as it is) once more. The
    # counts go on from the old session's: a counter never goes back.
    svc.take_over()
    assert looks() == {"planner": 3.0, "bound": 1.0}


def webhook_port(tmp_path: Path, **serve: Any) -> tuple[int, ssl.SSLContext]:
    """A webhook port serving a fresh cluster's app over TLS; its port and a client context
    trusting it."""
    certs = make_certs(tmp_path)
    store = cluster()
    app = create_app(SETTINGS, store, Clock(), admission=admission(store))
    sock = bind_probe_socket("127.0.0.1", 0, what="the webhook port")
    serve_webhook(app, sock, CertFiles(str(certs / "tls.crt"), str(certs / "tls.key")), **serve)
    return sock.getsockname()[1], ssl.create_default_context(cafile=str(certs / "ca.crt"))


def test_the_webhook_port_speaks_tls_and_answers_only_the_admission_path(
        tmp_path: Path) -> None:
    port, context = webhook_port(tmp_path)
    url = f"https://127.0.0.1:{port}"
    request = urllib.request.Request(f"{url}/admission/gate", data=review(new_pod("train", 0)),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, context=context, timeout=10) as reply:
        answer = orjson.loads(reply.read())
    assert "patch" in answer["response"]
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{url}/filter", context=context, timeout=10)
    assert refused.value.code == 404
    # A client that is no TLS client at all does not stop the next request being answered.
    with socket.create_connection(("127.0.0.1", port), timeout=5) as plain:
        plain.sendall(b"GET / HTTP/1.0\r\n\r\n")
        with contextlib.suppress(OSError):  # refused in the handshake: reset or closed
            assert not plain.recv(100).startswith(b"HTTP")
    with urllib.request.urlopen(request, context=context, timeout=10) as reply:
        assert reply.status == 200


def test_reviews_share_one_kept_alive_connection_and_an_unread_body_is_not_the_next_request(
        tmp_path: Path) -> None:
    """The API server sends each pod's review on a connection it keeps: one TLS handshake,
    not one per pod. A body the app does not read (a refused path) must not be parsed as
    the next request; a chunked body is answered and its connection closed."""
    port, context = webhook_port(tmp_path)
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    conn.connect()
    first = conn.sock
    headers = {"Content-Type": "application/json"}
    for i in range(5):
        conn.request("POST", "/admission/gate", body=review(new_pod("train", i), uid=f"r{i}"),
                     headers=headers)
        reply = conn.getresponse()
        assert reply.status == 200 and reply.version == 11
        well_formed(orjson.loads(reply.read()), f"r{i}")
        conn.request("POST", "/filter", body=b"GET /admission/gate HTTP/1.1\r\n\r\n" * 50,
                     headers=headers)
        refused = conn.getresponse()
        assert refused.status == 404
        refused.read()
    assert conn.sock is first  # every answer came on the first connection
    conn.putrequest("POST", "/admission/gate")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    body = review(new_pod("train", 9), uid="chunked")
    conn.send(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
    reply = conn.getresponse()
    assert reply.status == 200
    reply.read()
    assert reply.getheader("Connection") == "close" or reply.will_close
    conn.close()


def test_a_reviews_answer_goes_out_in_one_tls_write(tmp_path: Path) -> None:
    """Status line, headers and body leave in one TLS record: each write releases the
    interpreter lock and takes it back, which in a burst of pods could cost up to the switch
    interval each (the answer was four writes)."""
    port, context = webhook_port(tmp_path)
    body = review(new_pod("train", 0), uid="one-write")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        for _ in range(3):  # and so for every request on the kept connection
            tls.sendall(b"POST /admission/gate HTTP/1.1\r\nHost: x\r\n"
                        b"Content-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            record = tls.recv(256 * 1024)  # one read returns at most one TLS record
            head, _, rest = record.partition(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:")))
            assert head.startswith(b"HTTP/1.1 200")
            assert len(rest) == length
            well_formed(orjson.loads(rest), "one-write")


def test_the_webhook_port_serves_a_bounded_number_of_connections_at_once(
        tmp_path: Path) -> None:
    """Kept-alive connections each hold a thread: beyond the bound a new one is closed at
    once, and a slot freed by a closed connection serves the next."""
    port, context = webhook_port(tmp_path, connections=2)
    body = review(new_pod("train", 0))

    def ask(conn: http.client.HTTPSConnection) -> int:
        conn.request("POST", "/admission/gate", body=body,
                     headers={"Content-Type": "application/json"})
        reply = conn.getresponse()
        reply.read()
        return reply.status

    kept = [http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
            for _ in range(2)]
    assert [ask(c) for c in kept] == [200, 200]  # both held open, idle between requests
    extra = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    with pytest.raises((OSError, http.client.HTTPException)):
        ask(extra)
    extra.close()
    kept[0].close()
    again = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    for _ in range(50):  # the closed connection's thread gives its slot back
        try:
            assert ask(again) == 200
            break
        except (OSError, http.client.HTTPException):
            again.close()
            again = http.client.HTTPSConnection("127.0.0.1", port, context=context,
                                                timeout=10)
            time.sleep(0.05)
    else:
        raise AssertionError("no slot came back after a connection closed")
    assert ask(kept[1]) == 200
    again.close()
    kept[1].close()


def test_a_rotated_certificate_is_read_again_and_a_broken_one_keeps_the_last_good(
        tmp_path: Path) -> None:
    first, second = make_certs(tmp_path / "a"), make_certs(tmp_path / "b")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes((first / "tls.crt").read_bytes())
    key.write_bytes((first / "tls.key").read_bytes())
    files = CertFiles(str(cert), str(key))
    before = files.context()
    assert files.context() is before  # unchanged files: the same context
    cert.write_bytes((second / "tls.crt").read_bytes() + b"\n")
    key.write_bytes((second / "tls.key").read_bytes() + b"\n")
    rotated = files.context()
    assert rotated is not before
    cert.write_bytes(b"not a certificate, half-written")
    assert files.context() is rotated
    with pytest.raises(SurfaceError):
        CertFiles(str(cert), str(key)).context()


def test_a_replica_that_no_longer_leads_ungates_nothing() -> None:
    store = store_of([gpu_node("n0"), gpu_node("n1"), jobset("train", workers=3, gpus=4),
                      job_of("train"), *(gated_pod("train", i, 4) for i in range(3))])
    leading = [False]
    ungater = MemoryUngater()
    svc = GangService(store, settings=SETTINGS, clock=Clock(), binder=MemoryBinder(store),
                      events=MemoryEvents(), ungater=ungater, may_act=lambda: leading[0])
    svc.housekeep()
    assert ungater.ungated() == []
    leading[0] = True
    svc.session.gates.asked.clear()  # as a new leader, which rebuilds its session
    svc.housekeep()
    assert len(ungater.ungated()) == 3
