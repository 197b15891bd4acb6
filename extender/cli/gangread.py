"""The Gang objects (``gangs.muster.dev``) Muster writes, read for ``get`` and ``describe``:
one per gang it serves, in the workload's namespace, with the gang's state, bound count,
reason and holders (:mod:`extender.server.gangobjects` builds them).

A cluster without the Gang CRD, or a user RBAC does not let read them, has none to read:
``get`` then leaves its GANG and STATE columns out and ``describe`` asks Muster and the
events.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.core.gang.lifecycle import GangState
from extender.kube.client import Connection, KubeError, ResourceType
from extender.server.gangobjects import API_VERSION, KIND, OBJECT_STATES

GROUP, _, VERSION = API_VERSION.partition("/")
GANGS = ResourceType(group=GROUP, version=VERSION, kind=KIND, plural="gangs", namespaced=True,
                     short_names=("mg",))
VIEW_STATE: Mapping[str, GangState] = {word: GangState(state)
                                       for state, word in OBJECT_STATES.items()}
"""A Gang object's ``status.state`` as the gang state it spells."""


def read_gang_objects(conn: Connection, namespace: str | None,
                      ) -> tuple[dict[str, dict[str, Any]] | None, str]:
    """Gang key (``namespace/workload[/group]``) -> its Gang object, in ``namespace`` (``None``:
    all); ``None`` and why when there are none to read (``""``: the cluster serves no Gangs)."""
    if (GROUP, KIND) not in conn.resource_types():
        return None, ""
    try:
        items = conn.list(GANGS, namespace)
    except KubeError as err:
        return None, f"cannot list gangs.muster.dev on {conn.server}: {err}"
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        status = item.get("status")
        if isinstance(status, Mapping) and isinstance(status.get("gang"), str):
            out[status["gang"]] = item
    return out, ""


def object_state(obj: Mapping[str, Any]) -> str:
    """The gang state a Gang object says, spelled as every other view (``waiting``)."""
    status = obj.get("status") or {}
    word = str(status.get("state") or "")
    state = VIEW_STATE.get(word)
    return state.value if state is not None else word.lower()


def object_name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("name") or "")
