"""A TAB on a ``muster`` or ``kubectl muster`` line offers what kubectl's would: sub-commands
and flags from the parser, kinds and short names from the catalog, and namespaces, contexts
and names from the cluster of the line's context and namespace. Here the cluster is a given
list (:class:`Given`); against a real API server: tests/e2e/test_cli_live.py."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from extender.cli.candidates import FILES, NO_FILES, Answer, complete
from extender.cli.completion import Cluster
from extender.cli.main import build_parser, main
from tests.unit.cli.helpers import muster


class Given:
    """A cluster of given lists; it records how it was asked."""

    def __init__(self, *, offline: bool = False) -> None:
        self.offline = offline
        self.asked: list[tuple[str, str | None, bool]] = []

    def kinds(self) -> list[str]:
        return ["gangs", "jobs", "jobsets", "js", "lws", "mg"]

    def namespaces(self, options: argparse.Namespace) -> list[str]:
        if self.offline:
            raise OSError("connection refused")
        return ["default", "ml", "ml-dev"]

    def contexts(self, options: argparse.Namespace) -> list[str]:
        return ["prod", "sandbox"]

    def names(self, options: argparse.Namespace, type_name: str) -> list[str]:
        self.asked.append((type_name, options.namespace or options.context,
                           options.all_namespaces))
        return {"js": ["story", "train"], "gangs": ["jobset-train"]}.get(type_name, [])


def _offered(*words: str, lookup: Given | None = None) -> Answer:
    return complete(build_parser(), words, lookup or Given())


def test_the_first_word_is_a_sub_command() -> None:
    assert _offered("de").words == ["demo", "describe", "descriptors"]
    assert _offered("").words[:3] == ["completion", "demo", "describe"]
    assert _offered("descriptors", "v").words == ["validate"]


def test_a_type_after_get_or_describe_is_a_kind_or_short_name_of_the_catalog() -> None:
    assert _offered("get", "j") == Answer(["jobs", "jobsets", "js"], NO_FILES)
    assert _offered("describe", "-n", "ml", "l").words == ["lws"]


def test_names_come_from_the_lines_namespace_as_type_slash_name_or_after_the_type() -> None:
    given = Given()
    assert _offered("get", "-n", "ml", "js/t", lookup=given).words == ["js/train"]
    assert _offered("describe", "js", "story", "", lookup=given).words == []  # one NAME
    assert _offered("get", "--context", "prod", "js", "", lookup=given).words == [
        "story", "train"]
    assert _offered("get", "gangs", "-A", "", lookup=given).words == ["jobset-train"]
    assert given.asked == [("js", "ml", False), ("js", "prod", False), ("gangs", None, True)]


def test_namespaces_contexts_and_choices_complete_a_flags_value() -> None:
    assert _offered("get", "js", "-n", "ml").words == ["ml", "ml-dev"]
    assert _offered("get", "--namespace", "").words == ["default", "ml", "ml-dev"]
    assert _offered("fit", "--context", "s").words == ["sandbox"]
    assert _offered("get", "-o", "").words == ["table", "json", "yaml", "wide", "name"]


def test_flags_complete_from_the_sub_commands_parser() -> None:
    assert _offered("get", "--all-n").words == ["--all-namespaces"]
    assert "--watch" in _offered("get", "-").words and "--watch" not in _offered(
        "describe", "-").words


def test_a_path_is_left_to_the_shell_and_a_cluster_that_cannot_answer_offers_nothing() -> None:
    assert _offered("get", "-f", "") == Answer([], FILES)
    assert _offered("describe", "--kubeconfig", "") == Answer([], FILES)
    assert _offered("get", "-n", "", lookup=Given(offline=True)) == Answer([], NO_FILES)


def test_the_answer_is_printed_as_cobras_complete_prints_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert Answer(["js/story", "js/train"]).text() == "js/story\njs/train\n:4\n"
    ran = muster(capsys, "__complete", "get", "jobs")
    assert (ran.code, ran.out, ran.err) == (0, "jobs\njobsets\n:4\n", "")


def test_the_catalogs_kinds_plurals_and_short_names_are_offered_with_gangs() -> None:
    kinds = Cluster().kinds()
    assert {"jobsets", "js", "leaderworkersets", "lws", "gangs", "mg"} <= set(kinds)
    assert kinds == sorted(kinds)


def test_the_kubectl_plugins_completer_is_declared_as_kubectl_looks_for_it() -> None:
    text = (Path(__file__).resolve().parents[3] / "pyproject.toml").read_text()
    assert 'kubectl_complete-muster = "extender.cli.completion:kubectl_complete"' in text
    assert main(["__complete", "completion", "b"], prog="kubectl muster") == 0
