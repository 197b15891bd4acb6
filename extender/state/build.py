"""Turn the store's raw objects into a ``ClusterSnapshot`` through the descriptor catalog.

The catalog is the packaged one plus ``--descriptors`` files (fixed at start) merged with the
cluster's ``WorkloadDescriptor`` and Workload Map ``Karta`` objects (which change at run time);
it is recompiled only when a descriptor changes. For the same kind a native descriptor wins
over a Karta, wherever each comes from (:meth:`Catalog.of`). A cluster descriptor that does not
compile is left out and reported in :attr:`CatalogSnapshots.problems` rather than breaking
every other workload.
"""

from __future__ import annotations

import logging
import threading

from extender.core.karta.compile import compile_any
from extender.core.karta.model import is_karta_document
from extender.core.model.snapshot import ClusterSnapshot
from extender.core.workloads.catalog import Catalog
from extender.core.workloads.descriptor import Descriptor, DescriptorError
from extender.core.workloads.workload import DEFAULT_LIMITS, WorkloadLimits
from extender.state.delta import DeltaSnapshots
from extender.state.store import Changes, RawState, object_key

log = logging.getLogger("muster.state")


class CatalogSnapshots:
    """A :data:`~extender.state.store.SnapshotBuilder` over a base catalog."""

    def __init__(self, base: Catalog, limits: WorkloadLimits = DEFAULT_LIMITS) -> None:
        self._base = base
        self._limits = limits
        self._lock = threading.Lock()
        self._catalog = base
        self._compiled_revision = -1
        self.problems: dict[str, str] = {}
        """Cluster descriptor -> why it was left out; keyed by name for a WorkloadDescriptor,
        ``Karta/<name>`` for a Karta (the two kinds may share names)."""
        # Carried forward by the store's change log (an event costs what it changed); a
        # full list or a new catalog starts it again from every object.
        self._delta: DeltaSnapshots | None = None
        self._told: set[str] = set()

    def catalog(self, raw: RawState) -> Catalog:
        with self._lock:
            if raw.descriptors_revision != self._compiled_revision:
                found: list[Descriptor] = []
                problems: dict[str, str] = {}
                for obj in raw.descriptors:
                    karta = is_karta_document(obj)
                    try:
                        found.append(compile_any(dict(obj), source="cluster"))
                    except DescriptorError as err:
                        key = f"Karta/{object_key(obj)}" if karta else object_key(obj)
                        problems[key] = str(err)
                self._catalog = self._base.merged(found)
                self.problems = problems
                self._compiled_revision = raw.descriptors_revision
            return self._catalog

    def current(self) -> Catalog:
        """The catalog of the last build (descriptors compiled when they last changed)."""
        with self._lock:
            return self._catalog

    def __call__(self, raw: RawState) -> ClusterSnapshot:
        """From scratch: every object of ``raw`` is a change to an empty cluster."""
        catalog = self.catalog(raw)
        with self._lock:
            self._delta = DeltaSnapshots(catalog, self._limits)
            told, self._told = self._told, set()
            snapshot = self._delta.advance(Changes(
                nodes={object_key(n): n for n in raw.nodes},
                pods={object_key(p): p for p in raw.pods},
                objects=dict(zip(_object_keys(raw), raw.objects, strict=True)),
                revision=raw.revision))
            self._report(told)
            return snapshot

    def update(self, changes: Changes) -> ClusterSnapshot:
        """The last snapshot carried forward by ``changes`` (the store's change log)."""
        with self._lock:
            if self._delta is None:
                raise RuntimeError("update before the first full build")
            snapshot = self._delta.advance(changes)
            self._report(self._told)
            return snapshot

    def _report(self, told: set[str]) -> None:
        # Objects left out (unreadable, beyond the limits): once each, so that a hostile
        # object is visible in the log, not only absent from decisions.
        assert self._delta is not None
        for problem in self._delta.problems:
            if problem not in told:
                log.warning("event=object-skipped problem=%r", problem[:500])
            self._told.add(problem)
        if len(self._told) > _TOLD:
            self._told = set(self._delta.problems)


_TOLD = 10_000
"""Problems remembered as logged at most; beyond, some may be logged again (bounded memory)."""


def _object_keys(raw: RawState) -> tuple[str, ...]:
    if len(raw.object_keys) == len(raw.objects):
        return raw.object_keys
    # Built by hand, not by the store: any distinct keys in the same order will do.
    return tuple(f"{i:09d}" for i in range(len(raw.objects)))
