"""The Gang objects' writer against a real kube-apiserver (the session sandbox): a new gang
costs one request (its creation, not a failed patch first), a change one merge patch, a gang
gone one deletion; after a restart the object that exists is patched; and while a write is
slow, the publications of one gang in the meantime are written once, as the latest."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from extender.kube.client import Connection, NotFound
from extender.kube.gangobjects import PATH, KubeGangObjects
from extender.sandbox.sandbox import Sandbox

pytestmark = pytest.mark.e2e


def _gang(namespace: str, state: str, bound: int, name: str = "jobset-train",
          ) -> dict[str, Any]:
    return {"apiVersion": "muster.dev/v1alpha1", "kind": "Gang",
            "metadata": {"name": name, "namespace": namespace},
            "status": {"gang": f"{namespace}/train", "workload": f"JobSet/{namespace}/train",
                       "state": state, "minMember": 4, "pods": 4, "bound": bound,
                       "heldAtBind": 0, "reason": f"{state} for the test", "heldBy": ""}}


class _Observed:
    """The real connection, with every request it makes recorded and, while ``slow`` is
    clear, held before it is sent."""

    def __init__(self, conn: Connection, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, str]] = []
        self.slow = threading.Event()
        self.slow.set()
        self.entered = threading.Event()
        real: Callable[..., Any] = conn.request

        def request(method: str, path: str, **kwargs: Any) -> Any:
            self.entered.set()
            self.slow.wait(30)
            self.calls.append((method, path.rsplit("/", 1)[-1]))
            return real(method, path, **kwargs)

        monkeypatch.setattr(conn, "request", request)

    def take(self) -> list[tuple[str, str]]:
        calls, self.calls = self.calls, []
        return calls


def _status(conn: Connection, namespace: str, name: str = "jobset-train",
            ) -> dict[str, Any] | None:
    try:
        obj = conn.request("GET", f"{PATH.format(namespace=namespace)}/{name}")
    except NotFound:
        return None
    status: dict[str, Any] = obj["status"]
    return status


def test_gang_objects_are_written_once_per_change(
        sandbox: Sandbox, namespace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    conn = sandbox.connection()
    seen = _Observed(conn, monkeypatch)
    key = (namespace, "jobset-train")
    gangs = KubeGangObjects(conn)

    gangs.publish({key: _gang(namespace, "Waiting", 0)})
    gangs.flush()
    assert seen.take() == [("POST", "gangs")]
    assert (_status(conn, namespace) or {}).get("state") == "Waiting"
    seen.take()

    gangs.publish({key: _gang(namespace, "Waiting", 0)})  # unchanged: nothing written
    gangs.publish({key: _gang(namespace, "Planned", 0)})
    gangs.flush()
    assert seen.take() == [("PATCH", "jobset-train")]

    # A restart: the new writer does not know the object exists; the creation is refused
    # (409) and the object patched.
    restarted = KubeGangObjects(conn)
    restarted.publish({key: _gang(namespace, "Bound", 4)})
    restarted.flush()
    assert seen.take() == [("POST", "gangs"), ("PATCH", "jobset-train")]
    assert (_status(conn, namespace) or {}).get("state") == "Bound"
    seen.take()

    # A slow API server: while the first write waits, the gang changes twice more; one
    # write follows, with the latest.
    seen.slow.clear()
    seen.entered.clear()
    restarted.publish({key: _gang(namespace, "Bound", 3)})
    assert seen.entered.wait(10)
    restarted.publish({key: _gang(namespace, "Bound", 2)})
    restarted.publish({key: _gang(namespace, "Bound", 1)})
    seen.slow.set()
    restarted.flush()
    assert seen.take() == [("PATCH", "jobset-train"), ("PATCH", "jobset-train")]
    assert (_status(conn, namespace) or {}).get("bound") == 1
    seen.take()

    restarted.publish({})
    restarted.flush()
    assert seen.take() == [("DELETE", "jobset-train")]
    assert _status(conn, namespace) is None


def test_a_gang_whose_write_the_full_queue_dropped_is_written_at_the_next_publication(
        sandbox: Sandbox, namespace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    conn = sandbox.connection()
    seen = _Observed(conn, monkeypatch)
    gangs = KubeGangObjects(conn, capacity=1)
    a, b, c = ((namespace, n) for n in ("jobset-a", "jobset-b", "jobset-c"))
    objects = {k: _gang(namespace, "Waiting", 0, name=k[1]) for k in (a, b, c)}
    seen.slow.clear()
    seen.entered.clear()
    gangs.publish({a: objects[a]})
    assert seen.entered.wait(10)  # a's write is under way; the queue holds one more
    gangs.publish(objects)  # b is queued, c is dropped
    assert gangs.dropped == 1
    seen.slow.set()
    gangs.flush()
    assert _status(conn, namespace, "jobset-c") is None
    gangs.publish(objects)  # unchanged, but c was never written: written now
    gangs.flush()
    assert all((_status(conn, namespace, k[1]) or {}).get("state") == "Waiting"
               for k in (a, b, c))
