"""A bounded queue drained by background threads: API writes that must never make a
scheduling decision wait (events, requeues, ungating). When the API server is slow and the
queue is full, the newest item is dropped and counted rather than memory growing.

One thread keeps writes in order (events). Writes that are independent of each other and
wanted together (ungating a gang's members: the gang starts only when the last of them is
in kube-scheduler's queue) take several threads, since each write waits a round trip and the
API server answers many at once."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from extender.kube.client import Connection, KubeError
from extender.state.ports import PodRef

T = TypeVar("T")


class QueueWriter(Generic[T]):
    def __init__(self, write: Callable[[T], None], *, name: str, capacity: int,
                 describe: Callable[[T], str], log: logging.Logger, threads: int = 1) -> None:
        self._write = write
        self._describe = describe
        self._log = log
        self._queue: queue.Queue[T] = queue.Queue(maxsize=capacity)
        self.written = 0
        self.dropped = 0
        self._counted = threading.Lock()
        self._threads = [threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True)
                         for i in range(max(1, threads))]
        for thread in self._threads:
            thread.start()

    def put(self, item: T) -> bool:
        """Queue ``item``; ``False`` when the queue is full and it was dropped (counted)."""
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            with self._counted:
                self.dropped += 1
            return False
        return True

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until every queued item was attempted (for tests and shutdown)."""
        done = threading.Event()

        def wait() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=wait, daemon=True).start()
        done.wait(timeout)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                self._write(item)
                with self._counted:
                    self.written += 1
            except KubeError as err:
                self._log.warning("%s event=not-written problem=%r", self._describe(item),
                                  str(err))
            except Exception:
                self._log.exception("%s event=not-written", self._describe(item))
            finally:
                self._queue.task_done()


class PodWrites:
    """Writes about pods (``(pod, reason)`` pairs) queued on a :class:`QueueWriter`; a
    subclass says what one write is (``_write``)."""

    def __init__(self, conn: Connection, *, name: str, capacity: int,
                 log: logging.Logger, threads: int = 1) -> None:
        self.conn = conn
        self._writer: QueueWriter[tuple[PodRef, str]] = QueueWriter(
            self._write, name=name, capacity=capacity, log=log, threads=threads,
            describe=lambda item: f"pod={item[0].key}")

    @property
    def written(self) -> int:
        return self._writer.written

    def _put(self, pods: Sequence[PodRef], reason: str) -> None:
        for pod in pods:
            self._writer.put((pod, reason))

    def flush(self, timeout: float = 5.0) -> None:
        self._writer.flush(timeout)

    def _write(self, item: tuple[PodRef, str]) -> None:
        raise NotImplementedError
