"""``muster get -w``: after the table, a row only when what an object shows changed (its AGE
aside), a row once more when it is gone, each lined up under the table printed first.
(Against a real API server: tests/e2e/test_cli_live.py.)"""

from __future__ import annotations

from extender.cli.render import console, table
from extender.cli.watching import Shown, aligned, table_sameness

COLUMNS = ["NAME", "WORKLOAD", "STATE", "BOUND/MIN", "AGE"]


def _row(name: str, state: str, bound: int, age: str) -> list[object]:
    return [name, f"JobSet/ml/{name}", state, f"{bound}/3", age]


def _shown(*rows: list[object]) -> Shown[str]:
    return Shown({str(r[0]): r for r in rows}, same=table_sameness(COLUMNS))


def test_a_reading_that_changes_nothing_prints_nothing() -> None:
    shown = _shown(_row("a", "Waiting", 0, "5s"), _row("b", "Bound", 3, "1m"))
    assert shown.news({"a": _row("a", "Waiting", 0, "7s"), "b": _row("b", "Bound", 3, "1m")}) \
        == []


def test_a_changed_state_prints_that_row_once() -> None:
    shown = _shown(_row("a", "Waiting", 0, "5s"), _row("b", "Bound", 3, "1m"))
    planned = _row("a", "Planned", 0, "9s")
    assert shown.news({"a": planned, "b": _row("b", "Bound", 3, "1m")}) == [planned]
    assert shown.news({"a": _row("a", "Planned", 0, "12s"), "b": _row("b", "Bound", 3, "1m")}) \
        == []
    bound = _row("a", "Bound", 3, "20s")
    assert shown.news({"a": bound, "b": _row("b", "Bound", 3, "1m")}) == [bound]


def test_a_new_object_prints_its_row_and_a_gone_one_its_last_row_once() -> None:
    first = _row("a", "Waiting", 0, "5s")
    shown = _shown(first)
    new = _row("c", "Waiting", 0, "0s")
    assert shown.news({"a": first, "c": new}) == [new]
    assert shown.news({"c": new}) == [first]
    assert shown.news({"c": new}) == []


def test_whole_values_are_compared_when_no_column_is_still() -> None:
    shown: Shown[str] = Shown({"a": {"metadata": {"resourceVersion": "1"}}})
    changed = {"metadata": {"resourceVersion": "2"}}
    assert shown.news({"a": changed}) == [changed]


def test_rows_printed_later_line_up_under_the_first_table() -> None:
    rows = [_row("train", "Waiting", 0, "5s"), _row("a-longer-name", "Bound", 3, "3d4h")]
    out = console()
    with out.capture() as captured:
        out.print(table(COLUMNS, rows))
    header, *lines = captured.get().splitlines()
    text = aligned(COLUMNS, rows)
    assert [text(r) for r in rows] == lines
    assert text(_row("train", "Planned", 0, "6s")).index("Planned") == header.index("STATE")


def test_numbers_are_right_aligned_as_the_table_aligns_them() -> None:
    columns = ["NAME", "GPUS", "AGE"]
    rows: list[list[object]] = [["a", 12, "5s"], ["b", 4, "1m"]]
    out = console()
    with out.capture() as captured:
        out.print(table(columns, rows))
    assert [aligned(columns, rows)(r) for r in rows] == captured.get().splitlines()[1:]
