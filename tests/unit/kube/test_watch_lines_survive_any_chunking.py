"""A watch stream is newline-delimited JSON cut into chunks wherever the network cuts it: the
informer reads back exactly the events sent, however the bytes were split."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.kube.informer import _lines


class Chunked:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def stream(self, amt: int, decode_content: bool) -> Iterator[bytes]:
        yield from self.chunks


lines = st.lists(st.binary(min_size=0, max_size=40).map(lambda b: b.replace(b"\n", b"")),
                 max_size=20)


@settings(max_examples=300, deadline=None)
@given(lines, st.lists(st.integers(0, 400), max_size=10), st.booleans())
def test_lines_are_the_non_blank_lines_sent_whatever_the_chunks(
        sent: list[bytes], cuts: list[int], last_newline: bool) -> None:
    data = b"\n".join(sent) + (b"\n" if last_newline else b"")
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    chunks = [data[a:b] for a, b in pairwise(bounds)]
    assert list(_lines(Chunked(chunks))) == [line for line in sent if line.strip()]
