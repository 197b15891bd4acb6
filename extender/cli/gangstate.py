"""What ``describe`` says about a workload's gangs: "why is my job pending?".

Per gang: its state (a :class:`~extender.core.gang.lifecycle.GangState` as every view spells
it, :func:`~extender.server.gangobjects.state_word`: ``Waiting``, ``Planned``, ``Admitted``,
``Bound``, ``Finished``; :data:`PENDING` or :data:`UNKNOWN` when Muster said nothing of it),
the last reason, who holds what it needs, how many members are bound; and the recent events
on the workload and its pods. Four sources, best first:

- the gang's Gang object (``gangs.muster.dev``), which Muster rewrites at each change of the
  gang's state: the state, the reason and the holders as text (structured, from
  ``/inspect/gangs``, when that answers too);
- Muster's ``/inspect/gangs`` (``--muster-url``, ``$MUSTER_URL``, or the running sandbox's
  Muster when the cluster is the sandbox, found by :func:`sandbox_dirs`), when reachable: the
  state and holders as Muster's session has them now;
- the events Muster writes on the workload (``GangWaiting`` with the reason, ``GangPlanned``,
  ``GangAdmitted``, ``GangBindTimeout``...; each message starts ``gang NAMESPACE/NAME``);
- in file mode, only the file's pods: bound or not.

Reading is bounded: events of the workload and of at most :data:`PODS_READ` pods (the
unbound first), and the last :data:`EVENTS_SHOWN` of them shown.
"""

from __future__ import annotations

import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import orjson

from extender.cli.errors import CliError
from extender.cli.gangread import object_state
from extender.cli.listing import human_age
from extender.cli.workloads import Found
from extender.core.decide.holders import Holder
from extender.core.gang.lifecycle import STATE_AFTER_EVENT, GangState
from extender.core.model.objects import timestamp
from extender.core.model.values import Gang
from extender.kube.client import KubeError
from extender.sandbox.sandbox import Sandbox, SandboxSpec, default_dir
from extender.server.gangobjects import state_word

PODS_READ = 8
"""Pods whose events are read (one request each)."""
EVENTS_SHOWN = 12
INSPECT_TIMEOUT = 2.0
INSPECT_LIMIT = 16 * 1024 * 1024
"""Bytes of ``/inspect/gangs`` read at most (a few thousand gangs)."""

PENDING = "Pending"
"""The state shown in file mode for a gang not bound: nothing more is known."""
UNKNOWN = "Unknown"
"""The state shown live for a gang Muster said nothing about (no member seen yet, or
another scheduler name)."""


class Requester(Protocol):
    server: str

    def request(self, method: str, path: str, *, query: dict[str, str] | None = None,
                ) -> Any: ...


def _when(event: Mapping[str, Any]) -> float:
    meta = event.get("metadata")
    created = meta.get("creationTimestamp") if isinstance(meta, Mapping) else None
    for stamp in (event.get("lastTimestamp"), event.get("eventTime"),
                  event.get("firstTimestamp"), created):
        seconds = timestamp(stamp)
        if seconds:
            return seconds
    return 0.0


def read_events(conn: Requester, found: Found) -> tuple[list[dict[str, Any]], list[str]]:
    """The events on the workload and on up to :data:`PODS_READ` of its pods, oldest first,
    and the problems met (events not readable: RBAC, an old server)."""
    meta = found.raw.get("metadata") or {}
    namespace = str(meta.get("namespace") or found.tree.ref.namespace)
    targets = [(found.tree.ref.kind, str(meta.get("name")), str(meta.get("uid") or ""))]
    pods = sorted(found.pods, key=lambda v: (v.info.node_name is not None, v.info.name))
    targets += [("Pod", v.info.name, v.info.uid) for v in pods[:PODS_READ]]
    events: list[dict[str, Any]] = []
    for kind, name, uid in targets:
        selector = (f"involvedObject.uid={uid}" if uid else
                    f"involvedObject.kind={kind},involvedObject.name={name}")
        try:
            listed = conn.request("GET", f"/api/v1/namespaces/{namespace}/events",
                                  query={"fieldSelector": selector})
        except KubeError as err:  # RBAC, an old server: describe without events
            return sorted(events, key=_when), [f"cannot read events on {conn.server}: {err}"]
        items = listed.get("items", []) if isinstance(listed, Mapping) else []
        events += [e for e in items if isinstance(e, dict)]
    return sorted(events, key=_when), []


def sandbox_dirs(kubeconfig: str | None) -> list[Path]:
    """Where a running ``muster sandbox`` may keep its ``sandbox.json``, best first: beside the
    kubeconfig in use (``--kubeconfig``, else the first file of ``$KUBECONFIG``: the sandbox
    writes its kubeconfig into its ``--dir`` and says to export it), then
    ``$MUSTER_SANDBOX_DIR``, else the default directory."""
    path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    beside = [Path(path).expanduser().parent] if path else []
    return list(dict.fromkeys([*beside, default_dir()]))


def sandbox_muster(server: str, kubeconfig: str | None = None) -> str | None:
    """The Muster of the running ``muster sandbox`` whose API server is ``server``, found in
    :func:`sandbox_dirs`, if that is the cluster: there its ``/inspect/gangs`` is on loopback,
    with no certificate to give."""
    for directory in sandbox_dirs(kubeconfig):
        if not (directory / "sandbox.json").is_file():
            continue
        try:
            info = Sandbox(SandboxSpec(directory=directory), say=lambda _m: None).info()
        except (OSError, ValueError, TypeError):  # a damaged sandbox.json: not this cluster's
            continue
        if info is not None and info.server == server.rstrip("/") \
                and "muster" in info.processes:
            return info.muster_url
    return None


def muster_tls(*, ca: str | None, cert: str | None, key: str | None) -> ssl.SSLContext | None:
    """The TLS to reach Muster's ``/inspect/gangs`` on its mutual-TLS port with: ``ca`` the CA
    that signed Muster's serving certificate (else the system's), ``cert`` and ``key`` the
    client certificate it asks for (both or neither). ``None``: nothing given."""
    if (cert is None) != (key is None):
        raise CliError("give --client-certificate and --client-key together")
    if ca is None and cert is None:
        return None
    try:
        context = ssl.create_default_context(cafile=ca)
        if cert is not None and key is not None:
            context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as err:  # a missing or unreadable file, a bad PEM
        raise CliError(f"cannot load the TLS files for --muster-url: {err}") from None
    return context


def read_inspect(url: str, *, tls: ssl.SSLContext | None = None,
                 ) -> tuple[list[dict[str, Any]] | None, str]:
    """Muster's ``/inspect/gangs`` (over ``tls`` for an ``https`` URL), or ``None`` and why
    not."""
    target = url.rstrip("/") + "/inspect/gangs"
    try:
        with urllib.request.urlopen(target, timeout=INSPECT_TIMEOUT, context=tls) as answer:
            body = answer.read(INSPECT_LIMIT + 1)
    except (urllib.error.URLError, OSError, ValueError) as err:
        return None, f"Muster at {url} did not answer /inspect/gangs: {err}"
    if len(body) > INSPECT_LIMIT:
        return None, f"Muster at {url}: /inspect/gangs is larger than {INSPECT_LIMIT} bytes"
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as err:
        return None, f"Muster at {url}: /inspect/gangs is not JSON: {err}"
    gangs = data.get("gangs") if isinstance(data, Mapping) else None
    if not isinstance(gangs, list):
        return None, f"Muster at {url}: /inspect/gangs has no gangs list"
    return [g for g in gangs if isinstance(g, dict)], ""


def _bound(found: Found, gang: Gang) -> int:
    return sum(1 for v in found.pods if v.membership.gang == gang.key
               and v.info.holds_resources)


def _told(gang: Gang, events: Sequence[Mapping[str, Any]], *, alone: bool,
          ) -> Mapping[str, Any] | None:
    """The last event Muster wrote on the workload about ``gang``."""
    last = None
    for e in events:
        involved = e.get("involvedObject") or {}
        if involved.get("kind") == "Pod" or e.get("reason") not in STATE_AFTER_EVENT:
            continue
        message = str(e.get("message") or "")
        if alone or message.startswith((f"gang {gang.key}:", f"gang {gang.key} ")):
            last = e
    return last


def gang_answers(found: Found, *, events: Sequence[Mapping[str, Any]] | None,
                 inspected: Sequence[Mapping[str, Any]] | None,
                 objects: Mapping[str, Mapping[str, Any]] | None = None,
                 ) -> list[dict[str, Any]]:
    """Per gang of ``found``: ``state``, ``reason``, ``heldBy``, ``bound``, ``source``
    (``object``: its Gang object, ``muster``, ``events``, ``pods``). ``events`` ``None``: file
    mode, no cluster; ``objects``: the Gang objects by gang key."""
    by_key = {str(g.get("gang")): g for g in inspected or ()}
    gangs = found.tree.gangs
    out = []
    for gang in gangs:
        bound = _bound(found, gang)
        answer: dict[str, Any] = {"gang": gang.key, "bound": bound, "minMember": gang.min_member,
                                  "state": "", "reason": "", "heldBy": [], "source": "pods"}
        live = by_key.get(gang.key)
        told = None if events is None else _told(gang, events, alone=len(gangs) == 1)
        obj = (objects or {}).get(gang.key)
        if obj is not None:
            status = obj.get("status") or {}
            held = str(status.get("heldBy") or "")
            answer.update(state=object_state(obj), reason=str(status.get("reason") or ""),
                          heldBy=(list(live.get("heldBy") or []) if live is not None else
                                  [h for h in held.split("; ") if h]),
                          source="object")
        elif live is not None:
            answer.update(state=state_word(str(live.get("state") or "")),
                          reason=str(live.get("lastReason") or ""),
                          heldBy=list(live.get("heldBy") or []), source="muster")
        elif told is not None:
            answer.update(state=state_word(STATE_AFTER_EVENT[str(told["reason"])]),
                          reason=str(told.get("message") or ""), source="events")
        if bound >= gang.min_member:
            answer["state"] = state_word(GangState.BOUND)
        elif not answer["state"]:
            # No word from Muster: from a file nothing more is known; live, Muster has not
            # seen a member of this gang yet (or serves another scheduler name).
            answer["state"] = PENDING if events is None else UNKNOWN
        out.append(answer)
    return out


def event_rows(events: Sequence[Mapping[str, Any]], now: datetime) -> list[dict[str, Any]]:
    """The last :data:`EVENTS_SHOWN` events as ``describe -o json`` shows them."""
    rows = []
    for e in list(events)[-EVENTS_SHOWN:]:
        involved = e.get("involvedObject") or {}
        when = _when(e)
        rows.append({
            "age": human_age(now.timestamp() - when) if when else "<unknown>",
            "type": str(e.get("type") or ""), "reason": str(e.get("reason") or ""),
            "object": f"{str(involved.get('kind') or '').lower()}/{involved.get('name')}",
            "count": int(e.get("count") or 1), "message": str(e.get("message") or ""),
        })
    return rows


def holder_text(holder: Mapping[str, Any] | str) -> str:
    """One ``heldBy`` entry of ``/inspect/gangs`` (or of a Gang object: text) for a person, in
    the core's words (:attr:`~extender.core.decide.holders.Holder.text`), as Muster's reasons
    word it."""
    if isinstance(holder, str):
        return holder
    return Holder.from_dict(holder).text
