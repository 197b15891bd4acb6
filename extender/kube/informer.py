"""List+watch of one resource type into the state store, on its own thread.

The loop: list (paged) -> the store holds exactly that; then watch from the list's
resourceVersion, applying each event, following bookmarks, and re-watching when the server
ends a watch normally. ``410 Gone`` (as HTTP status or as an ERROR event) means our version is
too old: relist at once. Any other failure (connection refused or dropped, 5xx, timeouts)
marks the source unhealthy, so the store reports not-ready and filters fail closed, then
retries after an exponential backoff with jitter seeded from the source name.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import urllib3
from kubernetes.client.exceptions import ApiException

from extender.kube.client import Connection, Forbidden, KubeError, NotFound, ResourceType
from extender.state.store import StateStore

log = logging.getLogger("muster.informer")


class Gone(KubeError):
    """The resourceVersion we watch from has been compacted away: relist."""


@dataclass(frozen=True, slots=True)
class Backoff:
    initial: float = 0.2
    maximum: float = 10.0
    factor: float = 2.0

    def delays(self, seed: str) -> Iterator[float]:
        # Jitter spreads reconnects of many informers after an API server restart;
        # seeded so that a test run is reproducible.
        rng = random.Random(seed)
        delay = self.initial
        while True:
            yield delay * (0.8 + 0.4 * rng.random())
            delay = min(self.maximum, delay * self.factor)


def source_name(rtype: ResourceType) -> str:
    return f"{rtype.api_version}/{rtype.kind}"


class Informer:
    def __init__(self, conn: Connection, rtype: ResourceType, store: StateStore, *,
                 backoff: Backoff | None = None, watch_seconds: int = 60,
                 page_size: int = 500, absent_ok: bool = False) -> None:
        self.conn = conn
        self.rtype = rtype
        self.store = store
        self.source = source_name(rtype)
        self.backoff = backoff or Backoff()
        self.watch_seconds = watch_seconds
        """Each watch asks the server to end after this long, and the read times out 30 s
        later: a connection that died silently (no FIN, no RST) is found within that."""
        self.page_size = page_size
        self.absent_ok = absent_ok
        """A type not served (CRD not installed) or not granted counts as an empty list."""
        self._logged_state = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"informer {self.source}",
                                        daemon=True)
        self.relists = 0

    def start(self) -> Informer:
        self._thread.start()
        return self

    def stop(self, *, wait: float = 0.0) -> None:
        self._stop.set()
        if wait:
            self._thread.join(wait)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # --- the loop ------------------------------------------------------------------------------

    def _run(self) -> None:
        delays = self.backoff.delays(self.source)
        version: str | None = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._list()
                    delays = self.backoff.delays(self.source)
                version = self._watch(version)
            except Gone:
                log.info("source=%s event=relist reason=gone", self.source)
                version = None
            except (NotFound, Forbidden) as err:
                # An optional kind that is not served, or that RBAC does not grant: its
                # workloads cannot be gangs, but it must not hold every other pod hostage.
                if self.absent_ok:
                    self._absent(err)
                else:
                    self._unhealthy(str(err))
                version = None
                self._stop.wait(self.backoff.maximum)
            except Exception as err:  # any fault: the thread must survive and retry
                self._unhealthy(f"{type(err).__name__}: {err}")
                version = None
                self._stop.wait(next(delays))

    def _state_changed(self, state: str) -> bool:
        """Whether ``state`` differs from the last one logged: a condition that lasts (a
        missing CRD, a forbidden kind, an API server that is down) is logged when it begins
        and when it ends, not at every retry (debug has those)."""
        changed = state != self._logged_state
        self._logged_state = state
        return changed

    def _unhealthy(self, problem: str) -> None:
        short = problem if len(problem) < 300 else problem[:300] + "..."
        level = logging.WARNING if self._state_changed(f"broken {short}") else logging.DEBUG
        log.log(level, "source=%s event=watch-broken problem=%r", self.source, short)
        self.store.set_health(self.source, healthy=False, problem=f"watch broken: {short}")

    def _absent(self, err: KubeError) -> None:
        if isinstance(err, Forbidden):
            level = logging.WARNING if self._state_changed("forbidden") else logging.DEBUG
            log.log(level, "source=%s event=forbidden problem=%r action=%r", self.source,
                    str(err), "grant list and watch on it, or its workloads are not gangs")
            self.store.set_unwatchable(self.source, "forbidden: RBAC does not grant list/watch")
            return
        if self._state_changed("not-served"):
            log.info("source=%s event=not-served problem=%r", self.source,
                     "its CRD is not installed; counted as empty until it is")
            self.store.replace(self.source, [])
        else:  # still empty: nothing to rebuild
            log.debug("source=%s event=not-served", self.source)

    def _list(self) -> str:
        items: list[dict[str, Any]] = []
        token = ""
        while True:
            query = {"limit": str(self.page_size)}
            if token:
                query["continue"] = token
            page = self.conn.request("GET", self.rtype.path(), query=query) or {}
            for item in page.get("items") or []:
                item.setdefault("apiVersion", self.rtype.api_version)
                item.setdefault("kind", self.rtype.kind)
                items.append(item)
            meta = page.get("metadata") or {}
            token = meta.get("continue") or ""
            if not token:
                break
        self.store.replace(self.source, items)
        self.relists += 1
        # A kind whose list is granted and watch is not lists at every retry: said once.
        level = logging.DEBUG if self._logged_state == "forbidden" else logging.INFO
        log.log(level, "source=%s event=listed objects=%d", self.source, len(items))
        return str(meta.get("resourceVersion") or "")

    def _watch(self, version: str) -> str:
        query = [("watch", "true"), ("allowWatchBookmarks", "true"),
                 ("timeoutSeconds", str(self.watch_seconds))]
        if version:
            query.append(("resourceVersion", version))
        api = self.conn.api
        method, url, headers, body, post = api.param_serialize(
            "GET", self.rtype.path(), query_params=query,
            header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])
        try:
            response = api.call_api(method, url, header_params=headers, body=body,
                                    post_params=post,
                                    _request_timeout=(10, self.watch_seconds + 30))
        except ApiException as err:
            raise KubeError(f"cannot watch {self.source}: {err.reason}") from err
        raw = response.response
        try:
            if raw.status == 410:
                raise Gone(f"{self.source}: resourceVersion {version} is gone")
            if raw.status in (401, 403):  # list granted, watch not: as unwatchable as both
                raise Forbidden(f"{self.conn.server} refused watch {self.source}: "
                                f"HTTP {raw.status}")
            if raw.status != 200:
                raise KubeError(f"watch {self.source}: HTTP {raw.status}")
            if self._state_changed("watching") and self.relists > 1:
                log.info("source=%s event=watching", self.source)  # after a problem
            for line in _lines(raw):
                version = self._event(line, version)
                if self._stop.is_set():
                    break
        finally:
            raw.release_conn()
        return version

    def _event(self, line: bytes, version: str) -> str:
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError as err:
            # One event Muster cannot read (nested beyond orjson's 1,024 levels, say) is
            # skipped with a line in the log; breaking the watch would only read it again.
            log.warning("source=%s event=skipped problem=%r bytes=%d", self.source,
                        f"unreadable watch event: {err}", len(line))
            return version
        obj = (event.get("object") or {}) if isinstance(event, dict) else None
        meta = (obj.get("metadata") or {}) if isinstance(obj, dict) else None
        if not isinstance(event, dict) or not isinstance(obj, dict) or not isinstance(meta, dict):
            log.warning("source=%s event=skipped problem=%r", self.source,
                        "a watch event whose object or metadata is not an object")
            return version
        kind = event.get("type")
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone(f"{self.source}: {obj.get('message', 'resourceVersion gone')}")
            raise KubeError(f"watch {self.source}: {obj.get('message', obj)}")
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            obj.setdefault("apiVersion", self.rtype.api_version)
            obj.setdefault("kind", self.rtype.kind)
            self.store.apply(self.source, kind, obj)
        return str(meta.get("resourceVersion") or version)


def _lines(response: Any) -> Iterator[bytes]:
    """Newline-delimited JSON from a streaming urllib3 response. A chunk is split once: the
    lines it ends are yielded, and what follows its last newline waits for the next chunk (a
    64 KiB chunk of pod events split one line at a time copied what remained at each)."""
    pending = b""
    try:
        for chunk in response.stream(amt=65536, decode_content=True):
            if b"\n" not in chunk:
                pending += chunk
                continue
            *lines, rest = (pending + chunk).split(b"\n")
            pending = rest
            for line in lines:
                if line.strip():
                    yield line
    except (urllib3.exceptions.ProtocolError, urllib3.exceptions.ReadTimeoutError) as err:
        raise KubeError(f"watch connection dropped: {err}") from err
    if pending.strip():
        yield pending
