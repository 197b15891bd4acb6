"""``muster get -w``: after the list, a row each time a listed object changes, as
``kubectl get -w`` prints them, until interrupted.

The API server's watch of each listed type (through the kubernetes client's
:class:`kubernetes.watch.Watch`, one thread per type) says *when* something changed. What the
rows show is then read again as ``get`` read it (a workload's row needs its pods and Gang
objects too), and :class:`Shown` prints a row only when what it shows changed (its AGE
aside), once more when its object is gone.
"""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from kubernetes import watch

from extender.cli.errors import CliError
from extender.cli.render import emit_data
from extender.kube.client import Connection, ResourceType

SETTLE = 0.2
"""Seconds without another change before the rows are read again: a burst is one reading."""
K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
STILL = frozenset({"AGE"})
"""Columns that change while the object does not: a row is not printed again for them."""


class Shown(Generic[K]):
    """What a watch printed last per object (``key``), so that an object is printed again only
    when what it shows changed, and once more when it is gone (as kubectl prints a deletion)."""

    def __init__(self, first: Mapping[K, Any], *, same: Callable[[Any], object] = lambda v: v,
                 ) -> None:
        self._same = same
        """What of a printed value must change for it to be printed again."""
        self._last: dict[K, Any] = dict(first)

    def news(self, now: Mapping[K, Any]) -> list[Any]:
        """The values to print for a new reading of every listed object: each new one and
        each whose value changed, in the reading's order, then each gone one's last value."""
        out = [value for key, value in now.items() if key not in self._last
               or self._same(self._last[key]) != self._same(value)]
        out += [value for key, value in self._last.items() if key not in now]
        self._last = dict(now)
        return out


def table_sameness(columns: Sequence[str]) -> Callable[[Sequence[object]], tuple[object, ...]]:
    """A table row as :class:`Shown` compares it: every cell but the :data:`STILL` columns'."""
    kept = [i for i, name in enumerate(columns) if name not in STILL]
    return lambda line: tuple(line[i] for i in kept)


def aligned(columns: Sequence[str], first: Sequence[Sequence[object]],
            ) -> Callable[[Sequence[object]], str]:
    """Format one row as the table of ``first`` printed under ``columns`` aligned its rows
    (:func:`extender.cli.render.table`: two spaces apart, numbers to the right), so that rows
    printed later line up under that table."""
    widths = [max([len(name), *(len(str(r[i])) for r in first)]) for i, name in
              enumerate(columns)]
    right = [i > 0 and bool(first) and all(isinstance(r[i], int | float) for r in first)
             for i in range(len(columns))]
    return lambda line: "  ".join(
        str(c).rjust(w) if r else str(c).ljust(w) for c, w, r in zip(line, widths, right,
                                                                         strict=True))


class Changes:
    """Watches of ``types`` in ``namespace`` (``None``: all), one daemon thread each, that tell
    :meth:`wait` something changed. A watch the API server ends is started again."""

    def __init__(self, conn: Connection, types: Sequence[ResourceType], namespace: str | None,
                 ) -> None:
        self.conn = conn
        self.types = list(types)
        self.namespace = namespace
        self._told: queue.Queue[str | None] = queue.Queue()
        """``None``: something changed; a text: a watch failed, and why."""

    def start(self) -> Changes:
        for rtype in self.types:
            threading.Thread(target=self._follow, args=(rtype,), daemon=True,
                             name=f"watch-{rtype.plural}").start()
        return self

    def wait(self, settle: float = SETTLE) -> None:
        """Return once something changed and nothing more did for ``settle`` seconds; a watch
        that failed is an error naming the server."""
        told = [self._told.get()]
        while True:
            try:
                told.append(self._told.get(timeout=settle))
            except queue.Empty:
                break
        for problem in told:
            if problem is not None:
                raise CliError(problem, cluster=True)

    def _follow(self, rtype: ResourceType) -> None:
        try:
            while True:  # the API server ends a watch after its request timeout
                for _event in self._events(rtype):
                    self._told.put(None)
        except Exception as err:  # any failure ends the command, named
            self._told.put(f"cannot watch {rtype.plural}.{rtype.group or 'core'} on "
                           f"{self.conn.server}: {err}")

    def _events(self, rtype: ResourceType) -> Iterator[dict[str, Any]]:
        api = self.conn.api

        def call(**kwargs: Any) -> Any:  # Watch passes watch, _preload_content, resource_version
            query = [("watch", "true")]
            if kwargs.get("resource_version"):
                query.append(("resourceVersion", str(kwargs["resource_version"])))
            method, url, headers, body, post = api.param_serialize(
                "GET", rtype.path(self.namespace), query_params=query,
                header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])
            return api.call_api(method, url, header_params=headers, body=body, post_params=post,
                                _request_timeout=(self.conn.timeout, None)).response

        # "object": events' objects kept as dictionaries, their resourceVersion followed.
        watcher = watch.Watch(return_type="object")  # type: ignore[no-untyped-call]
        events: Iterator[dict[str, Any]] = watcher.stream(call)  # type: ignore[no-untyped-call]
        yield from events


def follow(changes: Changes, read: Callable[[], Mapping[K, Any]], shown: Shown[K],
           show: Callable[[Any], None]) -> None:
    """Until interrupted (or a watch fails): after each change, read the rows again and show
    those :class:`Shown` says changed. ``changes`` was started before the rows ``shown`` holds
    were read, so no change between that reading and the watch is missed."""
    while True:
        changes.wait()
        for value in shown.news(read()):
            show(value)


def follow_objects(changes: Changes, read: Callable[[], Sequence[Mapping[str, Any]]],
                   first: Sequence[Mapping[str, Any]], *,
                   key: Callable[[Mapping[str, Any]], Hashable], output: str) -> None:
    """``-w -o json|yaml`` after the list: an object each time it changes (YAML documents
    apart by ``---``)."""

    def show(obj: Mapping[str, Any]) -> None:
        if output == "yaml":
            print("---")
        emit_data(obj, output)
        sys.stdout.flush()

    follow(changes, lambda: {key(o): o for o in read()}, Shown({key(o): o for o in first}),
           show)


@dataclass(frozen=True)
class Rows(Generic[T]):
    """How ``-w`` prints items of type ``T`` as a table does: ``line`` gives an item's row
    under ``columns`` at a time; ``name`` given, its name instead (``-o name``)."""

    key: Callable[[T], Hashable]
    columns: Sequence[str]
    line: Callable[[T, datetime], list[Any]]
    name: Callable[[T], str] | None = None


def follow_table(changes: Changes, read: Callable[[], Sequence[T]], first: Sequence[T],
                 rows: Rows[T]) -> None:
    """``-w`` after the table (or the names) of ``first``: a row, or the name, each time an
    item's row changes."""
    same = table_sameness(rows.columns)
    text = aligned(rows.columns, [rows.line(i, datetime.now(UTC)) for i in first])

    def values(items: Sequence[T]) -> dict[Hashable, tuple[T, Any]]:
        at = datetime.now(UTC)
        return {rows.key(i): (i, same(rows.line(i, at))) for i in items}

    def show(value: tuple[T, Any]) -> None:
        item = value[0]
        print(rows.name(item) if rows.name is not None else
              text(rows.line(item, datetime.now(UTC))), flush=True)

    follow(changes, lambda: values(read()), Shown(values(first), same=lambda v: v[1]), show)
