"""``muster completion bash|zsh`` prints a script, generated from the command's own parser,
that completes every sub-command and their flags."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from extender.cli.main import COMMANDS, build_parser
from tests.unit.cli.helpers import muster

SUBCOMMANDS = ("serve", "sandbox", "simulate", "demo", "describe", "get", "descriptors", "fit",
               "record", "completion")


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


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash here")
def test_bash_completes_subcommands_and_flags_with_the_script(capsys, tmp_path) -> None:
    script = tmp_path / "muster.bash"
    script.write_text(muster(capsys, "completion", "bash").out)
    probe = (f"source {script}\n"
             "complete_for() { COMP_WORDS=(\"$@\"); COMP_CWORD=$(( $# - 1 )); "
             "COMP_LINE=\"$*\"; COMP_POINT=${#COMP_LINE}; COMPREPLY=(); "
             "_shtab_muster; echo \"${COMPREPLY[*]}\"; }\n"
             "complete_for muster de\n"
             "complete_for muster get --all-n\n")
    ran = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30,
                         check=False)
    first, second = ran.stdout.splitlines()[:2]
    assert set(first.split()) == {"demo", "describe", "descriptors"}
    assert second.split() == ["--all-namespaces"]
