"""A small fake API server on loopback speaking the list/watch JSON protocol.

Real HTTP, real sockets, the real kubernetes client on the other side: only the server is
ours. It keeps objects per collection path with a global resourceVersion, serves paged lists,
streams watch events (newline-delimited JSON), and can be told to answer ``410 Gone`` (as an
HTTP status or as an ERROR event), to drop watch connections, or to go away and come back.
"""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

CORE = {"nodes": ("Node", False), "pods": ("Pod", True), "events": ("Event", True)}


class FakeCluster:
    """The objects, shared by successive server instances (the API server restarts, etcd
    keeps its data)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.rv = 100
        self.objects: dict[str, dict[str, dict[str, Any]]] = {}
        """Collection path (``/api/v1/pods``) -> key -> object."""
        self.log: list[tuple[int, str, str, dict[str, Any]]] = []
        """(resourceVersion, collection, type, object) of every change."""
        self.compacted = 0
        """Watches from a resourceVersion below this get 410 Gone."""
        self.gone_as_event = False
        self.drop_watches = 0
        """Number of watch connections to cut (mid-stream) before behaving again."""
        self.bindings: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.extra_groups: dict[str, list[dict[str, Any]]] = {}
        """groupVersion -> discovery resources, for CRD kinds."""
        self.forbidden: set[str] = set()
        """Collection paths RBAC does not grant: list and watch answer 403 Forbidden."""
        self.watch_forbidden: set[str] = set()
        """Collection paths whose list is granted but whose watch answers 403."""
        self.queries: list[tuple[str, dict[str, str]]] = []
        """(path, query) of every GET, for tests of what a client asked."""
        self.token: str | None = None
        """The one bearer token accepted (``None``: any); others are answered 401."""
        self.authorizations: list[str] = []
        """The ``Authorization`` header of every GET and POST, in order."""

    def put(self, collection: str, obj: dict[str, Any], kind: str = "MODIFIED") -> None:
        with self.cond:
            self.rv += 1
            obj = json.loads(json.dumps(obj))
            obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
            key = _key(obj)
            typ = kind if key in self.objects.get(collection, {}) else "ADDED"
            self.objects.setdefault(collection, {})[key] = obj
            self.log.append((self.rv, collection, typ, obj))
            self.cond.notify_all()

    def delete(self, collection: str, key: str) -> None:
        with self.cond:
            obj = self.objects.get(collection, {}).pop(key)
            self.rv += 1
            self.log.append((self.rv, collection, "DELETED", obj))
            self.cond.notify_all()

    def compact(self) -> None:
        with self.cond:
            self.compacted = self.rv + 1

    def wake(self) -> None:
        with self.cond:
            self.cond.notify_all()


def _key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code: int, reason: str, message: str) -> None:
        self._send(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                          "reason": reason, "message": message, "code": code})

    def _refused(self) -> bool:
        """Record the request's credentials; answer 401 when they are not the token."""
        cluster = self.server.cluster
        said = self.headers.get("Authorization") or ""
        cluster.authorizations.append(said)
        if cluster.token is not None and said != f"Bearer {cluster.token}":
            self._status(401, "Unauthorized", "Unauthorized")
            return True
        return False

    def do_GET(self) -> None:
        if self._refused():
            return
        url = urlparse(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        cluster = self.server.cluster
        cluster.queries.append((url.path, query))
        if url.path == "/api/v1":
            self._send(200, {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                {"name": p, "kind": k, "namespaced": ns} for p, (k, ns) in CORE.items()]})
            return
        if url.path == "/apis":
            groups = [{"name": gv.split("/")[0],
                       "versions": [{"groupVersion": gv, "version": gv.split("/")[1]}],
                       "preferredVersion": {"groupVersion": gv, "version": gv.split("/")[1]}}
                      for gv in sorted(cluster.extra_groups)]
            self._send(200, {"kind": "APIGroupList", "groups": groups})
            return
        gv = url.path.removeprefix("/apis/")
        if gv in cluster.extra_groups:
            self._send(200, {"kind": "APIResourceList", "groupVersion": gv,
                             "resources": cluster.extra_groups[gv]})
            return
        match = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)", url.path)
        if match:
            obj = cluster.objects.get("/api/v1/pods", {}).get(f"{match[1]}/{match[2]}")
            if obj is None:
                self._status(404, "NotFound", f'pods "{match[2]}" not found')
            else:
                self._send(200, obj)
            return
        if url.path not in cluster.objects and not url.path.startswith("/api"):
            self._status(404, "NotFound", "the server could not find the requested resource")
            return
        if url.path.startswith("/apis/") and url.path not in cluster.objects:
            self._status(404, "NotFound", "the server could not find the requested resource")
            return
        watching = query.get("watch") in ("true", "1")
        if url.path in cluster.forbidden or (watching and url.path in cluster.watch_forbidden):
            verb = "watch" if watching else "list"
            self._status(403, "Forbidden", f'{url.path.rsplit("/", 1)[-1]} is forbidden: User '
                         f'"system:serviceaccount:muster:muster" cannot {verb} resource')
            return
        if watching:
            self._watch(url.path, int(query.get("resourceVersion") or 0),
                        float(query.get("timeoutSeconds") or 5))
        else:
            self._list(url.path, int(query.get("limit") or 0), query.get("continue") or "")

    def _list(self, collection: str, limit: int, token: str) -> None:
        cluster = self.server.cluster
        with cluster.cond:
            items = sorted(cluster.objects.get(collection, {}).items())
            rv = cluster.rv
        start = int(token or 0)
        page = items[start: start + limit] if limit else items[start:]
        more = limit and start + limit < len(items)
        meta = {"resourceVersion": str(rv)}
        if more:
            meta["continue"] = str(start + limit)
        self._send(200, {"kind": "List", "apiVersion": "v1", "metadata": meta,
                         "items": [o for _, o in page]})

    def _watch(self, collection: str, since: int, timeout: float) -> None:
        cluster = self.server.cluster
        if since < cluster.compacted and not cluster.gone_as_event:
            self._status(410, "Expired", "too old resource version")
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        if since < cluster.compacted:
            self._line({"type": "ERROR", "object": {"kind": "Status", "code": 410,
                                                    "message": "too old resource version"}})
            return
        deadline = threading.Event()
        timer = threading.Timer(timeout, lambda: (deadline.set(), cluster.wake()))
        timer.start()
        try:
            while not deadline.is_set() and not self.server.stopping:
                with cluster.cond:
                    pending = [(rv, t, o) for rv, c, t, o in cluster.log
                               if c == collection and rv > since]
                    if not pending and not cluster.drop_watches:
                        cluster.cond.wait(0.5)
                        continue
                    dropping = cluster.drop_watches > 0
                    if dropping:
                        cluster.drop_watches -= 1
                if dropping:
                    self.wfile.write(b'{"type":"ADDED","object":{"metad')  # cut mid-event
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                for rv, typ, obj in pending:
                    self._line({"type": typ, "object": obj})
                    since = rv
        except (BrokenPipeError, ConnectionResetError, OSError):
            return
        finally:
            timer.cancel()

    def _line(self, event: object) -> None:
        self.wfile.write(json.dumps(event).encode() + b"\n")
        self.wfile.flush()

    def do_POST(self) -> None:
        url = urlparse(self.path)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self._refused():
            return
        cluster = self.server.cluster
        match = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/binding", url.path)
        if match:
            with cluster.cond:
                pod = cluster.objects.get("/api/v1/pods", {}).get(f"{match[1]}/{match[2]}")
                if pod is None:
                    self._status(404, "NotFound", f'pods "{match[2]}" not found')
                    return
                uid = body.get("metadata", {}).get("uid")
                if uid and uid != pod["metadata"].get("uid"):
                    self._status(409, "Conflict", "Precondition failed: UID in precondition: "
                                 f"{uid}, UID in object meta: {pod['metadata'].get('uid')}")
                    return
                if pod.get("spec", {}).get("nodeName"):
                    self._status(409, "Conflict", f"pod {match[2]} is already assigned to node "
                                 f"\"{pod['spec']['nodeName']}\"")
                    return
                cluster.bindings.append(body)
                bound = json.loads(json.dumps(pod))
                bound.setdefault("spec", {})["nodeName"] = body["target"]["name"]
            cluster.put("/api/v1/pods", bound)
            self._send(201, {"kind": "Status", "status": "Success", "code": 201})
            return
        if re.fullmatch(r"/api/v1/namespaces/([^/]+)/events", url.path):
            cluster.events.append(body)
            self._send(201, body)
            return
        self._status(404, "NotFound", url.path)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, cluster: FakeCluster) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.cluster = cluster
        self.stopping = False


class FakeApiServer:
    def __init__(self, cluster: FakeCluster | None = None) -> None:
        self.cluster = cluster or FakeCluster()
        self.port = 0
        self._server: _Server | None = None

    def start(self) -> FakeApiServer:
        self._server = _Server(self.port, self.cluster)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()
        return self

    def stop(self) -> None:
        """Go away: stop accepting and end every open watch."""
        if self._server is not None:
            self._server.stopping = True
            self.cluster.wake()
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def kubeconfig(self, directory: Path) -> Path:
        path = directory / "kubeconfig"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}],
        }))
        return path


@contextmanager
def fake_api() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    try:
        yield server
    finally:
        server.stop()
