"""An immutable mapping that makes its next version in O(changes), for snapshots kept current.

A live snapshot changes one pod at a time, but copying a 100,000-pod dict per event costs a
pass over every pod. :class:`Layered` keeps a *base* dict that no one mutates, shared by every
version, plus a small dict of the keys changed since (a value, or :data:`GONE`). Each
:meth:`Layered.evolve` copies only that small dict; once it outgrows the square root of the
base, the two are folded into a new base, so lookups stay two dict probes and the fold's cost,
spread over the events since the last one, stays a few entries per event.

Iteration follows the base's order, then keys added since. With ``ordered=True`` it follows
sorted key order instead (a snapshot's nodes: placement reads them in name order); the sorted
keys are kept as a tuple and redone only when a key is added or removed.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping
from math import isqrt
from typing import Any, Generic, TypeVar, cast

K = TypeVar("K")
V = TypeVar("V")


class _Gone:
    __slots__ = ()

    def __repr__(self) -> str:
        return "GONE"


GONE: Any = _Gone()
"""In a change set given to :meth:`Layered.evolve`: the key is removed."""

_MISSING: Any = object()
_MIN_FOLD = 64


class Layered(Mapping[K, V], Generic[K, V]):
    __slots__ = ("_base", "_delta", "_len", "_order")

    def __init__(self, base: Mapping[K, V] | None = None, *, ordered: bool = False) -> None:
        items: Any = base.items() if base else ()
        self._base: dict[K, V] = dict(sorted(items) if ordered else items)
        self._delta: dict[K, V] = {}
        self._len = len(self._base)
        self._order: tuple[K, ...] | None = tuple(self._base) if ordered else None

    def evolve(self, changes: Mapping[K, V]) -> Layered[K, V]:
        """The next version: ``changes`` maps keys to new values, or to :data:`GONE`."""
        if not changes:
            return self
        base, delta = self._base, {**self._delta}
        size, order = self._len, self._order
        added: list[K] = []
        removed: list[K] = []
        for key, value in changes.items():
            was = delta.get(key, _MISSING)
            present = (key in base) if was is _MISSING else was is not GONE
            if value is GONE:
                if not present:
                    continue
                size -= 1
                removed.append(key)
                if key in base:
                    delta[key] = GONE
                else:
                    delta.pop(key, None)
            else:
                if not present:
                    size += 1
                    added.append(key)
                delta[key] = value
        if order is not None and (added or removed):
            order = _reordered(order, added, removed)
        out = Layered.__new__(Layered)
        if len(delta) > max(_MIN_FOLD, isqrt(len(base))):
            folded = base.copy()  # a C copy, then the changes: 10x a comprehension
            for key, value in delta.items():
                if value is GONE:
                    del folded[key]
                else:
                    folded[key] = value
            base, delta = folded, {}
        out._base, out._delta, out._len, out._order = base, delta, size, order
        return cast("Layered[K, V]", out)

    def __getitem__(self, key: K) -> V:
        value = self._delta.get(key, _MISSING)
        if value is _MISSING:
            return self._base[key]
        if value is GONE:
            raise KeyError(key)
        return cast("V", value)

    def get(self, key: K, default: Any = None) -> Any:
        value = self._delta.get(key, _MISSING)
        if value is _MISSING:
            return self._base.get(key, default)
        return default if value is GONE else value

    def __contains__(self, key: object) -> bool:
        value = self._delta.get(cast("K", key), _MISSING)
        return key in self._base if value is _MISSING else value is not GONE

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[K]:
        if self._order is not None:
            return iter(self._order)
        if not self._delta:
            return iter(self._base)
        return self._iter_layers()

    def _iter_layers(self) -> Iterator[K]:
        delta = self._delta
        for key in self._base:
            if delta.get(key, _MISSING) is not GONE:
                yield key
        for key, value in delta.items():
            if value is not GONE and key not in self._base:
                yield key

    def __repr__(self) -> str:
        return f"Layered({dict(self.items())!r})"


def _reordered(order: tuple[K, ...], added: list[K], removed: list[K]) -> tuple[K, ...]:
    keys: list[Any] = list(order)  # ordered keys are comparable (node names)
    for key in removed:
        at = bisect.bisect_left(keys, key)
        if at < len(keys) and keys[at] == key:
            del keys[at]
    for key in added:
        bisect.insort(keys, key)
    return tuple(keys)
