"""A connection that records every request and answers with its body, and a clock a test
moves by hand: for the background writers, which run on their own threads."""

from __future__ import annotations

import copy
import threading
from typing import Any


class RecordingConnection:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, Any]] = []
        self._lock = threading.Lock()

    def request(self, method: str, path: str, *, body: Any = None,
                query: dict[str, str] | None = None,
                content_type: str = "application/json") -> Any:
        with self._lock:
            self.requests.append((method, path, copy.deepcopy(body)))
        return body

    def bodies(self, method: str | None = None) -> list[dict[str, Any]]:
        """The bodies sent, of ``method`` only when given."""
        with self._lock:
            return [body for m, _, body in self.requests if method in (None, m)]


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
