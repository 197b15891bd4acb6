"""An immutable sorted run of distinct names whose next version costs O(chunk), not O(n).

A snapshot's capacity classes group nodes by identical free capacity: on a cluster of
identical nodes one class holds nearly every node. A pod event moves a node or two from one
class to another, and with classes as plain tuples each move copied a 10,000-name tuple twice.
:class:`SortedNames` keeps its names in chunks of at most twice ``CHUNK``. :meth:`adding` and
:meth:`removing` copy one chunk and the short tuples that index the chunks, and share the
rest with the version they came from, which stays as it was (a snapshot another thread reads).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate, chain
from typing import Generic, TypeVar, overload

N = TypeVar("N", bound=str)


class SortedNames(Sequence[N], Generic[N]):
    """Distinct names in sorted order, read as a sequence, versioned by value."""

    __slots__ = ("_chunks", "_lasts", "_len")

    CHUNK = 256
    """Names per chunk when built; a chunk splits in two when it grows past twice this."""

    def __init__(self, names: Iterable[N] = ()) -> None:
        ordered = sorted(set(names))
        self._set(tuple(tuple(ordered[i:i + self.CHUNK])
                        for i in range(0, len(ordered), self.CHUNK)))

    def _set(self, chunks: tuple[tuple[N, ...], ...]) -> None:
        self._chunks = chunks
        self._lasts = tuple(c[-1] for c in chunks)
        self._len = sum(len(c) for c in chunks)

    @classmethod
    def _of(cls, chunks: tuple[tuple[N, ...], ...]) -> SortedNames[N]:
        out = cls.__new__(cls)
        out._set(chunks)
        return out

    def adding(self, name: N) -> SortedNames[N]:
        """This run with ``name`` in it (``self`` when it already is)."""
        chunks = self._chunks
        if not chunks:
            return type(self)._of(((name,),))
        at = min(bisect.bisect_left(self._lasts, name), len(chunks) - 1)
        chunk = chunks[at]
        i = bisect.bisect_left(chunk, name)
        if i < len(chunk) and chunk[i] == name:
            return self
        grown = (*chunk[:i], name, *chunk[i:])
        half = self.CHUNK
        parts = (grown,) if len(grown) <= 2 * half else (grown[:half], grown[half:])
        return type(self)._of((*chunks[:at], *parts, *chunks[at + 1:]))

    def removing(self, name: N) -> SortedNames[N]:
        """This run without ``name`` (``self`` when it is not in it)."""
        chunks = self._chunks
        at = bisect.bisect_left(self._lasts, name)
        if at == len(chunks):
            return self
        chunk = chunks[at]
        i = bisect.bisect_left(chunk, name)
        if chunk[i] != name:
            return self
        shrunk = chunk[:i] + chunk[i + 1:]
        parts = (shrunk,) if shrunk else ()
        return type(self)._of((*chunks[:at], *parts, *chunks[at + 1:]))

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[N]:
        return chain.from_iterable(self._chunks)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        at = bisect.bisect_left(self._lasts, name)
        return at < len(self._chunks) and name in self._chunks[at]

    @overload
    def __getitem__(self, index: int) -> N: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[N, ...]: ...

    def __getitem__(self, index: int | slice) -> N | tuple[N, ...]:
        if isinstance(index, slice):
            return tuple(self)[index]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("SortedNames index out of range")
        starts = tuple(accumulate((len(c) for c in self._chunks), initial=0))
        at = bisect.bisect_right(starts, index) - 1
        return self._chunks[at][index - starts[at]]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SortedNames):
            return self._len == other._len and all(
                a == b for a, b in zip(self, other, strict=True))
        if isinstance(other, tuple):
            return tuple(self) == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to a tuple, so not hashable as one

    def __repr__(self) -> str:
        return f"SortedNames({list(self)!r})"
