"""One spelling of every gang state: the Gang CRD admits, Muster writes on Gang objects,
``muster get`` and ``describe`` print, and ``docs/cli.md`` lists the same CamelCase words,
whichever source (a Gang object, Muster's ``/inspect/gangs``, an event) the state came from."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.cli.gangstate import PENDING, UNKNOWN, gang_answers
from extender.cli.workloads import Found, base_descriptors, workloads_in_file
from extender.core.gang.lifecycle import STATE_AFTER_EVENT, VIEW_STATES, GangState
from extender.server.gangobjects import OBJECT_STATES, state_word
from tests.unit.cli.helpers import DATA, REPO


def _crd_states() -> list[str]:
    crd = yaml.safe_load((REPO / "manifests" / "crd-gang.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return list(schema["properties"]["status"]["properties"]["state"]["enum"])


def _documented_states() -> set[str]:
    text = (REPO / "docs" / "cli.md").read_text()
    paragraph = text[text.index("States, spelled"):]
    return set(re.findall(r"`([A-Za-z]+)` \(", paragraph[:paragraph.index("\n\n")]))


def _story(tmp_path: Path) -> Found:
    path = tmp_path / "story.yaml"
    path.write_text((DATA / "story-jobset.yaml").read_text())
    args = type("Args", (), {"descriptors": None, "no_builtin": False})()
    _, found = workloads_in_file(str(path), base_descriptors(args))
    return found[0]


def _shown(found: Found, **source: Any) -> str:
    [answer] = gang_answers(found, events=source.pop("events", []), inspected=None, **source)
    return str(answer["state"])


def test_the_gang_crd_admits_exactly_what_muster_writes() -> None:
    assert sorted(_crd_states()) == sorted(OBJECT_STATES[s] for s in VIEW_STATES)


@pytest.mark.parametrize("state", VIEW_STATES, ids=str)
def test_describe_spells_a_state_the_same_from_the_gang_object_and_from_muster(
        tmp_path: Path, state: GangState) -> None:
    found = _story(tmp_path)
    written = {"status": {"gang": "ml/story", "state": OBJECT_STATES[state]}}
    from_object = _shown(found, objects={"ml/story": written})
    [answer] = gang_answers(found, events=[], inspected=[{"gang": "ml/story", "state": state}])
    assert from_object == answer["state"] == state_word(state)
    assert from_object in _crd_states()


@pytest.mark.parametrize("reason", sorted(STATE_AFTER_EVENT))
def test_describe_spells_a_state_told_by_an_event_as_documented(
        tmp_path: Path, reason: str) -> None:
    event = {"involvedObject": {"kind": "JobSet", "name": "story"}, "reason": reason,
             "message": "gang ml/story: something happened"}
    shown = _shown(_story(tmp_path), events=[event])
    assert shown == state_word(STATE_AFTER_EVENT[reason]) and shown in _documented_states()


def test_docs_list_exactly_the_states_get_and_describe_print() -> None:
    shown = {state_word(s) for s in (*VIEW_STATES, *STATE_AFTER_EVENT.values())}
    assert _documented_states() == shown | {PENDING, UNKNOWN}
    assert set(_crd_states()) <= _documented_states()
    assert state_word(GangState.AT_BARRIER) == "AtBarrier"
