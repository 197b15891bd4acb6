"""A :class:`SortedNames` run is, version after version, the sorted set it stands for, and older
versions never change.

Capacity classes are these runs: a node lost or doubled in a wrong chunk split would make
placement skip a free node or offer one twice, in a snapshot another thread still reads.
Chunks of 3 (a subclass) make random histories split and empty chunks all the time; the
module's own chunk size is exercised by a run of 2,000 names.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.core.model.sortednames import SortedNames


class Small(SortedNames[str]):
    __slots__ = ()
    CHUNK = 3


names = st.sampled_from([f"node-{i:03d}" for i in range(60)])
step = st.tuples(st.booleans(), names)


def assert_is(run: SortedNames[str], expected: set[str]) -> None:
    ordered = sorted(expected)
    assert list(run) == ordered
    assert len(run) == len(ordered) and bool(run) == bool(ordered)
    assert run == tuple(ordered)
    assert [run[i] for i in range(len(run))] == ordered
    assert [run[-i] for i in range(1, len(run) + 1)] == ordered[::-1]
    assert run[1:4] == tuple(ordered[1:4])
    for i in range(60):
        name = f"node-{i:03d}"
        assert (name in run) == (name in expected)


@settings(max_examples=60, deadline=None)
@given(st.lists(names, max_size=20), st.lists(step, min_size=1, max_size=120))
def test_every_version_equals_its_sorted_set_and_old_versions_stay_as_they_were(
        start: list[str], steps: list[tuple[bool, str]]) -> None:
    run: SortedNames[str] = Small(start)
    expected = set(start)
    kept = [(run, set(expected))]
    for add, name in steps:
        run = run.adding(name) if add else run.removing(name)
        expected = expected | {name} if add else expected - {name}
        assert_is(run, expected)
        kept.append((run, set(expected)))
    for version, then in kept:
        assert_is(version, then)


def test_a_run_of_the_default_chunk_size_splits_and_its_first_version_stays_as_it_was() -> None:
    every = [f"n{i:05d}" for i in range(0, 4000, 2)]
    run: SortedNames[str] = SortedNames(every)
    grown = run
    for i in range(1, 1200, 2):  # odd names, in the first chunks: they split
        grown = grown.adding(f"n{i:05d}")
    assert list(grown) == sorted([*every, *(f"n{i:05d}" for i in range(1, 1200, 2))])
    assert list(run) == every  # the first version is as it was
    assert grown.adding("n00001") is grown and run.removing("absent") is run
    shrunk = grown
    for name in every:
        shrunk = shrunk.removing(name)
    assert list(shrunk) == [f"n{i:05d}" for i in range(1, 1200, 2)]
    assert run[0] == "n00000" and run[-1] == "n03998" and len(run) == 2000
