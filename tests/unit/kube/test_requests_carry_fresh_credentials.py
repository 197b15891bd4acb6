"""Muster's requests carry the kubeconfig's credentials without re-reading them per request.

The kubernetes client's kubeconfig loader refreshes a token (exec plugins, expiring tokens)
through a hook it runs whenever the credentials are read. Muster reads them at most once per
:data:`~extender.kube.client.AUTH_FOR` seconds, and again at once when the API server answers
401, so a token that changed is used from the next request on and that request is not lost.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from extender.kube.client import AUTH_FOR, Connection, connect
from tests.unit.kube.fakeapi import FakeApiServer, fake_api


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with fake_api() as server:
        server.cluster.token = "t"
        yield server


def issuing(conn: Connection, tokens: list[str]) -> list[int]:
    """Replace the loader's refresh hook with one that issues ``tokens[-1]``; the list it
    returns counts the reads."""
    reads: list[int] = []

    def hook(configuration: object) -> None:
        reads.append(1)
        conn.api.configuration.api_key["BearerToken"] = f"Bearer {tokens[-1]}"

    conn.api.configuration.refresh_api_key_hook = hook
    return reads


def event(i: int) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"e{i}"},
            "involvedObject": {"kind": "Pod", "namespace": "ml", "name": "p"}}


def test_many_requests_read_the_credentials_once_per_period(api: FakeApiServer,
                                                              tmp_path: Path) -> None:
    conn = connect(str(api.kubeconfig(tmp_path)))
    reads = issuing(conn, ["t"])
    started = time.monotonic()
    for i in range(60):
        conn.request("POST", "/api/v1/namespaces/ml/events", body=event(i))
    periods = (time.monotonic() - started) / AUTH_FOR
    assert len(api.cluster.events) == 60
    assert set(api.cluster.authorizations) == {"Bearer t"}
    assert 1 <= len(reads) <= periods + 1


def test_a_token_that_changed_is_read_again_on_401_and_the_request_is_not_lost(
        api: FakeApiServer, tmp_path: Path) -> None:
    conn = connect(str(api.kubeconfig(tmp_path)))
    tokens = ["t"]
    reads = issuing(conn, tokens)
    conn.request("POST", "/api/v1/namespaces/ml/events", body=event(0))
    tokens.append("t2")
    api.cluster.token = "t2"
    conn.request("POST", "/api/v1/namespaces/ml/events", body=event(1))
    assert [e["metadata"]["name"] for e in api.cluster.events] == ["e0", "e1"]
    assert api.cluster.authorizations == ["Bearer t", "Bearer t", "Bearer t2"]
    assert len(reads) == 2
