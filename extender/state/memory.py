"""The binder of snapshot-file mode: Bindings are recorded in memory, not sent anywhere."""

from __future__ import annotations

import threading

from extender.state.ports import BindError, PodRef
from extender.state.store import StateStore


class MemoryBinder:
    """Binds by marking the pod bound in the store; refuses what an API server would refuse."""

    def __init__(self, state: StateStore) -> None:
        self._state = state
        self._lock = threading.Lock()
        self.bindings: dict[str, str] = {}
        """Pod ``namespace/name`` -> node, in the order binds happened."""

    def bind(self, pod: PodRef, node: str) -> None:
        with self._lock:
            raw = self._state.pod(pod.namespace, pod.name)
            if raw is None:
                raise BindError(f"pods {pod.name!r} not found in namespace {pod.namespace!r}")
            uid = (raw.get("metadata") or {}).get("uid")
            if pod.uid and uid and uid != pod.uid:
                raise BindError(f"pod {pod.key}: UID precondition failed ({uid} != {pod.uid})")
            bound = (raw.get("spec") or {}).get("nodeName")
            if bound and bound != node:
                raise BindError(f"pod {pod.key} is already assigned to node {bound!r}")
            self._state.assume_bound(pod.namespace, pod.name, node)
            self.bindings[pod.key] = node
