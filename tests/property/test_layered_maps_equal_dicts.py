"""A :class:`Layered` map is, version after version, the dict it stands for, and older versions
never change.

Snapshots share their pods, memberships and nodes through these maps: a wrong fold of a layer
would make a pod vanish or come back in a snapshot a decision is still reading. Long random
histories (enough changes to fold the top layer into the middle and the middle into the base
many times) compare every version with a plain dict, including versions kept from earlier.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.core.model.layered import GONE, Layered

batch = st.dictionaries(st.integers(0, 600), st.one_of(st.none(), st.integers(0, 9)),
                        max_size=12)


def assert_is(version: Layered[int, int], expected: dict[int, int], *, ordered: bool) -> None:
    assert dict(version.items()) == expected
    assert len(version) == len(expected)
    assert sorted(version) == sorted(expected)
    assert sorted(version.values()) == sorted(expected.values())
    assert list(version) == [k for k, _ in version.items()]  # keys and items agree
    if ordered:
        assert list(version) == sorted(expected)  # nodes are read in name order
    for key in range(0, 601, 7):
        assert (key in version) == (key in expected)
        assert version.get(key) == expected.get(key)


@settings(max_examples=40, deadline=None)
@given(st.lists(batch, min_size=50, max_size=400), st.booleans())
def test_every_version_equals_its_dict_and_old_versions_stay_as_they_were(
        batches: list[dict[int, int | None]], ordered: bool) -> None:
    version: Layered[int, int] = Layered({k: k for k in range(0, 600, 3)}, ordered=ordered)
    expected = {k: k for k in range(0, 600, 3)}
    kept: list[tuple[Layered[int, int], dict[int, int]]] = []
    for i, changes in enumerate(batches):
        version = version.evolve({k: GONE if v is None else v for k, v in changes.items()})
        for k, v in changes.items():
            if v is None:
                expected.pop(k, None)
            else:
                expected[k] = v
        assert_is(version, expected, ordered=ordered)
        if i % 25 == 0:
            kept.append((version, dict(expected)))
    for old, was in kept:
        assert_is(old, was, ordered=ordered)
