"""``muster completion bash|zsh`` prints a script, generated from the command's own parser,
that completes every sub-command and their flags."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from extender.cli.main import COMMANDS, build_parser
from extender.cli.options import DYNAMIC_FUNCTION
from tests.unit.cli.helpers import muster

SUBCOMMANDS = ("serve", "sandbox", "simulate", "demo", "describe", "get", "descriptors", "fit",
               "record", "forecast", "completion")


def test_every_registered_command_is_in_the_list_the_scripts_are_checked_against() -> None:
    [sub] = [a for a in build_parser()._actions if a.dest == "command"]
    assert set(sub.choices) == set(SUBCOMMANDS)  # type: ignore[attr-defined]
    assert len(COMMANDS) == len(SUBCOMMANDS)


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_the_script_names_every_subcommand_and_their_flags(capsys, shell: str) -> None:
    ran = muster(capsys, "completion", shell)
    assert ran.code == 0 and ran.err == ""
    for name in SUBCOMMANDS:
        assert name in ran.out
    for flag in ("--all-namespaces", "--request-timeout", "--bind-timeout", "--snapshot",
                 "--kubeconfig", "import-karta", "validate"):
        assert flag in ran.out
    if shell == "bash":
        assert ran.out.rstrip().endswith("-F _shtab_muster muster")
    else:
        assert ran.out.startswith("#compdef muster")


def _in_bash(capsys, tmp_path: Path, *lines: str) -> list[str]:
    """What bash offers for each line (``muster get j``) with the script sourced; ``muster``
    on PATH and a kubeconfig naming no cluster."""
    script = tmp_path / "muster.bash"
    script.write_text(muster(capsys, "completion", "bash").out)
    probe = (f"source {script}\n"
             "complete_for() { COMP_WORDS=(\"$@\"); COMP_CWORD=$(( $# - 1 )); "
             "COMP_LINE=\"$*\"; COMP_POINT=${#COMP_LINE}; COMPREPLY=(); "
             "_shtab_muster; echo \"${COMPREPLY[*]}\"; }\n"
             + "".join(f"complete_for {line}\n" for line in lines))
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "none"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    ran = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=60,
                         check=False, env=env)
    return [*ran.stdout.splitlines(), *[""] * len(lines)][:len(lines)]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash here")
def test_bash_completes_subcommands_and_flags_with_the_script(capsys, tmp_path) -> None:
    first, second = _in_bash(capsys, tmp_path, "muster de", "muster get --all-n")
    assert set(first.split()) == {"demo", "describe", "descriptors"}
    assert second.split() == ["--all-namespaces"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash here")
def test_bashs_script_asks_muster_for_kinds_and_names(capsys, tmp_path) -> None:
    kinds, names = _in_bash(capsys, tmp_path, "muster get jobs", "muster describe -n ml js/")
    assert set(kinds.split()) == {"jobs", "jobsets"}  # from the catalog, through __complete
    assert names == ""  # no cluster to ask: nothing, and no error on the terminal


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_the_script_asks_muster_for_types_names_namespaces_and_contexts(capsys, shell) -> None:
    out = muster(capsys, "completion", shell).out
    assert f"{DYNAMIC_FUNCTION}() {{" in out and "__complete" in out
    assert out.count(DYNAMIC_FUNCTION) >= 5  # get's and describe's TYPE, -n, --context
