"""An immutable mapping that makes its next version in O(changes), for snapshots kept current.

A live snapshot changes one pod at a time, but copying a 100,000-pod dict per event costs a
pass over every pod. :class:`Layered` keeps a *base* dict that no one mutates, shared by every
version, a middle dict of the keys changed since, and a small top dict of the keys changed
since that (a value, or :data:`GONE`). Each :meth:`Layered.evolve` copies only the top dict;
once it outgrows the cube root of the base it is folded into a new middle, and the middle,
once it outgrows the square of that, into a new base. Lookups stay three dict probes, and each
fold's cost, spread over the events since the last one, stays a few dozen entries per event.

Iteration follows the base's order, then keys changed since. With ``ordered=True`` it follows
sorted key order instead (a snapshot's nodes: placement reads them in name order); the sorted
keys are kept as a tuple and redone only when a key is added or removed.
"""

from __future__ import annotations

import bisect
from collections.abc import ItemsView, Iterator, Mapping, ValuesView
from itertools import chain, filterfalse, tee
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
_MIN_FOLD = 16


class Layered(Mapping[K, V], Generic[K, V]):
    __slots__ = ("_base", "_delta", "_len", "_mid", "_order")

    def __init__(self, base: Mapping[K, V] | None = None, *, ordered: bool = False) -> None:
        items: Any = base.items() if base else ()
        self._base: dict[K, V] = dict(sorted(items) if ordered else items)
        self._mid: dict[K, V] = {}
        self._delta: dict[K, V] = {}
        self._len = len(self._base)
        self._order: tuple[K, ...] | None = tuple(self._base) if ordered else None

    def evolve(self, changes: Mapping[K, V]) -> Layered[K, V]:
        """The next version: ``changes`` maps keys to new values, or to :data:`GONE`."""
        if not changes:
            return self
        base, mid, delta = self._base, self._mid, {**self._delta}
        size, order = self._len, self._order
        added: list[K] = []
        removed: list[K] = []
        for key, value in changes.items():
            below = _lookup(mid, base, key)
            was = delta.get(key, below)
            present = was is not _MISSING and was is not GONE
            if value is GONE:
                if not present:
                    continue
                size -= 1
                removed.append(key)
                if below is _MISSING or below is GONE:
                    delta.pop(key, None)  # only ever added above: nothing to hide
                else:
                    delta[key] = GONE
            else:
                if not present:
                    size += 1
                    added.append(key)
                delta[key] = value
        if order is not None and (added or removed):
            order = _reordered(order, added, removed)
        # Three layers: each version copies the top one (about the cube root of the size);
        # folds into the middle (its square) and into the base are rarer by as much, so
        # every event pays a few dozen entries, never the whole map.
        step = max(_MIN_FOLD, round(len(base) ** (1 / 3)))
        if len(delta) > step:
            mid = _folded(mid, delta, keep_gone=base)
            delta = {}
            if len(mid) > step * step:
                base, mid = _folded(base, mid, keep_gone=None), {}
        out = Layered.__new__(Layered)
        out._base, out._mid, out._delta, out._len, out._order = base, mid, delta, size, order
        return cast("Layered[K, V]", out)

    def __getitem__(self, key: K) -> V:
        value = self._delta.get(key, _MISSING)
        if value is _MISSING:
            value = self._mid.get(key, _MISSING)
            if value is _MISSING:
                return self._base[key]
        if value is GONE:
            raise KeyError(key)
        return cast("V", value)

    def get(self, key: K, default: Any = None) -> Any:
        value = self._delta.get(key, _MISSING)
        if value is _MISSING:
            value = self._mid.get(key, _MISSING)
            if value is _MISSING:
                return self._base.get(key, default)
        return default if value is GONE else value

    def __contains__(self, key: object) -> bool:
        value = self._delta.get(cast("K", key), _MISSING)
        if value is _MISSING:
            value = self._mid.get(cast("K", key), _MISSING)
            if value is _MISSING:
                return key in self._base
        return value is not GONE

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[K]:
        if self._order is not None:
            return iter(self._order)
        over = self._over()
        if not over:
            return iter(self._base)
        # The base's keys filtered in C, then the few changed ones: a pass over 100,000 pods
        # (a gang's members, the capacity index) costs a few times what a dict's does.
        return chain(filterfalse(over.__contains__, self._base),
                     [k for k, v in over.items() if v is not GONE])

    def items(self) -> ItemsView[K, V]:
        return _Items(self)

    def values(self) -> ValuesView[V]:
        return _Values(self)

    def _iter_items(self) -> Iterator[tuple[K, V]]:
        if self._order is not None:
            return ((k, self[k]) for k in self._order)
        over, base = self._over(), self._base
        if not over:
            return iter(base.items())
        first, second = tee(filterfalse(over.__contains__, base))
        return chain(zip(first, map(base.__getitem__, second), strict=True),
                     [(k, v) for k, v in over.items() if v is not GONE])

    def _over(self) -> dict[K, V]:
        """Every key the upper layers change, with its newest value (or :data:`GONE`)."""
        if not self._mid:
            return self._delta
        return {**self._mid, **self._delta} if self._delta else self._mid

    def __repr__(self) -> str:
        return f"Layered({dict(self.items())!r})"


class _Items(ItemsView[K, V]):
    _mapping: Layered[K, V]

    def __iter__(self) -> Iterator[tuple[K, V]]:
        return self._mapping._iter_items()


class _Values(ValuesView[V]):
    _mapping: Layered[Any, V]

    def __iter__(self) -> Iterator[V]:
        return (v for _, v in self._mapping._iter_items())


def _lookup(mid: dict[Any, Any], base: dict[Any, Any], key: Any) -> Any:
    value = mid.get(key, _MISSING)
    return base.get(key, _MISSING) if value is _MISSING else value


def _folded(lower: dict[K, V], upper: dict[K, V], *, keep_gone: dict[K, V] | None,
            ) -> dict[K, V]:
    """``upper`` written over a copy of ``lower`` (a C copy, then the changes). A removal is
    kept as :data:`GONE` only where ``keep_gone`` (the layer below both) still has the key."""
    out = lower.copy()
    for key, value in upper.items():
        if value is GONE and (keep_gone is None or key not in keep_gone):
            out.pop(key, None)
        else:
            out[key] = value
    return out


def _reordered(order: tuple[K, ...], added: list[K], removed: list[K]) -> tuple[K, ...]:
    keys: list[Any] = list(order)  # ordered keys are comparable (node names)
    for key in removed:
        at = bisect.bisect_left(keys, key)
        if at < len(keys) and keys[at] == key:
            del keys[at]
    for key in added:
        bisect.insort(keys, key)
    return tuple(keys)
