"""The ``Gang`` objects (``muster.dev/v1alpha1``) Muster writes, one per gang it serves.

``kubectl get gangs -A`` then lists every gang with its state, bound count and minimum, and
``-o wide`` its reason, the way Kueue's Workload and Volcano's PodGroup show admission on an
object a user can list. Pure: built from what ``/inspect/gangs`` shows
(:func:`extender.server.inspect.describe_gangs`); the adapter writes what changed.

Each object is named ``<kind>-<workload>[-<group>]`` (lower case, a DNS subdomain; a name too
long is cut and given a hash of the whole), lives in the workload's namespace and is owned
by the workload, so the garbage collector deletes it with the workload.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from extender.core.decide.holders import Holder
from extender.core.gang.lifecycle import VIEW_STATES, GangState
from extender.core.model.snapshot import ClusterSnapshot

API_VERSION = "muster.dev/v1alpha1"
KIND = "Gang"
MAX_NAME = 253
_BAD = re.compile(r"[^a-z0-9.-]+")


def state_word(state: str) -> str:
    """A gang state as every view a person reads spells it (the Gang object, ``muster get``
    and ``describe``), CamelCase as Kubernetes spells phases: ``waiting`` -> ``Waiting``,
    ``at_barrier`` -> ``AtBarrier``."""
    return "".join(part.capitalize() for part in state.split("_"))


OBJECT_STATES: Mapping[str, str] = {state: state_word(state) for state in VIEW_STATES}
"""A gang view's state (:data:`~extender.core.gang.lifecycle.VIEW_STATES`) as the Gang
object's ``status.state`` says it (the CRD's enum)."""


def object_name(kind: str, gang_key: str) -> str:
    """``jobset-train`` for gang ``ml/train`` of a JobSet; ``leaderworkerset-vllm-group-0``
    for one of an LWS's groups."""
    _namespace, _, rest = gang_key.partition("/")
    raw = f"{kind}-{rest.replace('/', '-')}".lower()
    name = _BAD.sub("-", raw).strip("-.") or "gang"
    if len(name) > MAX_NAME or name != raw:
        digest = hashlib.sha256(gang_key.encode()).hexdigest()[:10]
        name = f"{name[:MAX_NAME - 11].rstrip('-.')}-{digest}"
    return name


def _holders(view: Mapping[str, Any]) -> str:
    """The holders as the core words them (:attr:`Holder.text`), as in the gang's reason."""
    return "; ".join(Holder.from_dict(h).text for h in view.get("heldBy") or ()
                     if isinstance(h, Mapping))[:1024]


def gang_objects(views: Sequence[Mapping[str, Any]], snapshot: ClusterSnapshot,
                 ) -> dict[tuple[str, str], dict[str, Any]]:
    """``(namespace, name) -> Gang object`` for each gang view; its ``status`` carries no
    time, so two builds of an unchanged gang compare equal (the writer stamps the time)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for view in views:
        gang = snapshot.gangs.get(view["gang"])
        if gang is None:
            continue
        ref = gang.workload
        name = object_name(ref.kind, gang.key)
        meta: dict[str, Any] = {"name": name, "namespace": ref.namespace,
                                "labels": {"muster.dev/workload-kind": ref.kind.lower()[:63]}}
        if ref.uid:
            meta["ownerReferences"] = [{"apiVersion": ref.api_version, "kind": ref.kind,
                                        "name": ref.name, "uid": ref.uid}]
        out[(ref.namespace, name)] = {
            "apiVersion": API_VERSION, "kind": KIND, "metadata": meta,
            "status": {
                "gang": gang.key, "workload": ref.key,
                "state": OBJECT_STATES.get(str(view["state"]), state_word(GangState.WAITING)),
                "minMember": int(view["minMember"]), "pods": int(view["pods"]),
                "bound": int(view["bound"]), "heldAtBind": int(view["heldAtBind"]),
                "reason": str(view.get("lastReason") or "")[:4096],
                "heldBy": _holders(view),
            },
        }
    return out
