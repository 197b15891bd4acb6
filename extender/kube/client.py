"""One way to reach an API server: kubeconfig (or in-cluster) -> a small read/write facade.

Every failure becomes a :class:`KubeError` subclass whose message names the server and what
failed, so commands can print it without a traceback.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import orjson
import urllib3
from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException


class KubeError(Exception):
    """An API server problem a person can act on."""


class ClusterUnreachable(KubeError):
    """No answer from the API server (down, wrong address, TLS, timeout)."""


class NotFound(KubeError):
    """The object or resource type does not exist."""


class Forbidden(KubeError):
    """The credentials are not allowed to do this."""


class Conflict(KubeError):
    """The object exists already, or changed since the version a write carried (409)."""


@dataclass(frozen=True)
class ResourceType:
    """A served resource: what discovery says about one kind."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


AUTH_FOR = 1.0
"""Seconds one reading of the credentials serves requests. The client's kubeconfig loader
re-reads its configuration for every request that carries a token (to refresh tokens that
expire), which cost Muster's writers more than building the requests; a 401 reads it again
at once and retries."""


@dataclass
class Connection:
    """An authenticated API client plus the server address, for messages.

    Requests go through the client's connection pool (its TLS, proxy and client certificate
    settings) with JSON built by orjson; the client's own request path walks every body
    through its model serializer, which Muster's plain dictionaries do not need."""

    api: client.ApiClient
    server: str
    timeout: float = 10.0
    _types: dict[tuple[str, str], ResourceType] | None = field(default=None, repr=False)
    _auth: tuple[float, dict[str, str]] = field(default=(float("-inf"), {}), repr=False)

    def request(self, method: str, path: str, *, body: object = None,
                query: dict[str, str] | None = None,
                content_type: str = "application/json") -> Any:
        """One REST call; returns the decoded JSON body. A PATCH names its patch type in
        ``content_type`` (``application/strategic-merge-patch+json``, ...)."""
        url = self.api.configuration.host + path
        if query:
            url += "?" + urlencode(query)
        payload = None if body is None else orjson.dumps(body)
        status, data = self._send(method, url, payload, content_type, fresh=False)
        if status == 401:  # the token may have expired within AUTH_FOR: read it again
            status, data = self._send(method, url, payload, content_type, fresh=True)
        if not 200 <= status < 300:
            raise _api_error(status, data, self.server, method, path)
        return orjson.loads(data) if data else None

    def _send(self, method: str, url: str, payload: bytes | None, content_type: str, *,
              fresh: bool) -> tuple[int, bytes]:
        headers = {**self.api.default_headers, "Accept": "application/json",
                   "Content-Type": content_type, **self._credentials(fresh=fresh)}
        try:
            response = self.api.rest_client.pool_manager.request(
                method, url, body=payload, headers=headers,
                timeout=urllib3.Timeout(total=self.timeout))
        except (urllib3.exceptions.HTTPError, OSError) as err:  # refused, TLS, timeout...
            raise ClusterUnreachable(
                f"cannot reach the API server at {self.server}: {_short(err)}"
            ) from err
        return response.status, response.data

    def _credentials(self, *, fresh: bool) -> dict[str, str]:
        """The auth headers, read from the client's configuration at most every
        :data:`AUTH_FOR` seconds (always when ``fresh``)."""
        read_at, headers = self._auth
        now = time.monotonic()
        if fresh or now - read_at >= AUTH_FOR:
            settings = self.api.configuration.auth_settings()
            headers = {str(s["key"]): str(s["value"]) for s in settings.values()
                       if s.get("in") == "header" and s.get("value")}
            self._auth = (now, headers)
        return headers

    def resource_types(self) -> dict[tuple[str, str], ResourceType]:
        """Every served kind, keyed by ``(group, kind)``, preferred version first (cached)."""
        if self._types is None:
            types: dict[tuple[str, str], ResourceType] = {}
            for rt in self._discover():
                types.setdefault((rt.group, rt.kind), rt)
            self._types = types
        return self._types

    def _discover(self) -> Iterator[ResourceType]:
        core = self.request("GET", "/api/v1")
        yield from _types_in(core, "", "v1")
        groups = self.request("GET", "/apis")
        for group in groups.get("groups", []):
            versions = [group["preferredVersion"]] + [
                v for v in group.get("versions", []) if v != group.get("preferredVersion")
            ]
            for version in versions:
                try:
                    listing = self.request("GET", f"/apis/{version['groupVersion']}")
                except NotFound:
                    continue
                yield from _types_in(listing, group["name"], version["version"])

    def get(self, rtype: ResourceType, name: str, namespace: str | None = None) -> Any:
        return self.request("GET", rtype.path(namespace, name))

    def list(self, rtype: ResourceType, namespace: str | None = None,
             *, label_selector: str | None = None) -> list[dict[str, Any]]:
        query = {"labelSelector": label_selector} if label_selector else None
        result = self.request("GET", rtype.path(namespace), query=query)
        items: list[dict[str, Any]] = result.get("items", []) if result else []
        kind = rtype.kind
        for item in items:  # list items carry no apiVersion/kind
            item.setdefault("apiVersion", rtype.api_version)
            item.setdefault("kind", kind)
        return items


def _types_in(listing: Any, group: str, version: str) -> Iterator[ResourceType]:
    for r in (listing or {}).get("resources", []):
        if "/" in r.get("name", ""):  # subresources such as pods/binding
            continue
        yield ResourceType(
            group=group, version=version, kind=r["kind"], plural=r["name"],
            namespaced=bool(r.get("namespaced")), short_names=tuple(r.get("shortNames") or ()),
        )


def _short(err: BaseException) -> str:
    text = str(err)
    return text if len(text) < 200 else text[:200] + "..."


def _api_error(status: int, body: bytes | None, server: str, method: str,
               path: str) -> KubeError:
    try:
        message = str(orjson.loads(body or b"{}").get("message", ""))
    except (orjson.JSONDecodeError, AttributeError):
        message = ""
    if status == 404:
        return NotFound(message or f"{path} not found on {server}")
    if status in (401, 403):
        return Forbidden(f"{server} refused {method} {path}: {message}")
    if status == 409:
        return Conflict(f"{server} answered {status} to {method} {path}: {message}")
    return KubeError(f"{server} answered {status} to {method} {path}: {message}")


def _missing_context(path: str, context: str) -> bool:
    """The kubeconfig loads but has no context of that name (the client's own message for it
    is a paragraph about a "contexts list")."""
    try:
        contexts, _ = config.list_kube_config_contexts(config_file=path)  # type: ignore[no-untyped-call]
    except (ConfigException, OSError, TypeError, ValueError):
        return False
    return context not in {c.get("name") for c in contexts or () if isinstance(c, dict)}


POOL = 128
"""Connections kept open to the API server. The client's default is five per core (ten on
two), fewer than Muster uses at once: a watch per served kind holds one for good, each of
the server's threads (32 by default) may post a Binding, and the writers take more (events,
requeues, evictions, Gang objects, eight ungating threads, four parked binds). Past the
pool, each request opens a connection (a TLS handshake on both sides) and throws it away:
with 32, a burst of 838 pods saw "Connection pool is full, discarding connection" 9 times."""


def connect(kubeconfig: str | None = None, context: str | None = None,
            *, timeout: float = 10.0) -> Connection:
    """Connect through a kubeconfig (``--kubeconfig``, ``$KUBECONFIG``, ``~/.kube/config``),
    or the in-cluster service account when none exists and we run in a pod."""
    path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    settings = client.Configuration()
    settings.connection_pool_maxsize = POOL
    try:
        if kubeconfig or os.path.exists(path.split(os.pathsep)[0]):
            api = config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=path, context=context, client_configuration=settings)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=settings)
            api = client.ApiClient(settings)
        else:
            raise ClusterUnreachable(
                f"no kubeconfig at {path} and not running in a cluster; "
                "pass --kubeconfig or set KUBECONFIG"
            )
    except (ConfigException, OSError, TypeError, ValueError) as err:
        if context and _missing_context(path, context):
            raise ClusterUnreachable(  # kubectl's words for it
                f'context "{context}" does not exist in kubeconfig {path}') from err
        raise ClusterUnreachable(f"cannot load kubeconfig {path}: {_short(err)}") from err
    api.configuration.retries = 1
    return Connection(api=api, server=str(api.configuration.host), timeout=timeout)
