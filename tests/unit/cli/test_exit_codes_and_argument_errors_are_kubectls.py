"""Exit codes and argument errors as kubectl's: every error exits 1 in one ``error:`` line,
an argument error adds kubectl's ``See '... --help' for usage.`` hint, and ``fit`` answers
0 yes / 1 no / 2 unknown as ``kubectl diff`` does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from extender.cli import main as cli_main
from tests.unit.cli.helpers import DATA, REPO, dead_kubeconfig, muster

STORY = DATA / "story-jobset.yaml"


@pytest.mark.parametrize("argv", [
    ("get", "jobsets"),
    ("describe", "jobset/story"),
    ("descriptors", "list"),
])
def test_an_unknown_context_exits_1_in_one_line_as_kubectl(capsys, tmp_path: Path, argv):
    ran = muster(capsys, *argv, "--kubeconfig", dead_kubeconfig(tmp_path), "--context", "nope")
    assert ran.code == 1
    assert ran.err == (f'error: context "nope" does not exist in kubeconfig '
                       f'{tmp_path / "dead.kubeconfig"}\n')


@pytest.mark.parametrize(("argv", "hint", "message"), [
    (("get", "--bogus"), "muster get", "error: unknown flag: --bogus"),
    (("descriptors", "list", "--nope"), "muster descriptors list", "error: unknown flag: --nope"),
    (("descriptors", "list", "extra"), "muster descriptors list",
     "error: unknown argument: extra"),
    (("describe", "--request-timeout", "5x"), "muster describe",
     "error: argument --request-timeout: unknown unit 'x' in duration '5x'"),
    (("get", "-o", "xml"), "muster get", "error: argument -o/--output: invalid choice: 'xml'"),
    (("completion", "fish"), "muster completion", "error: argument shell: invalid choice"),
    (("nosuch",), "muster", "error: argument COMMAND: invalid choice: 'nosuch'"),
])
def test_argument_errors_are_one_line_and_the_usage_hint_exit_1(capsys, argv, hint, message):
    ran = muster(capsys, *argv)
    assert ran.code == 1
    first, second = ran.err.splitlines()
    assert first.startswith(message)
    assert second == f"See '{hint} --help' for usage."
    assert "usage:" not in ran.err


def test_fit_argument_errors_exit_2_since_1_means_it_does_not_fit(capsys):
    ran = muster(capsys, "fit", "-f", STORY, "--snapshot", "x", "--request-timeout", "soon")
    assert ran.code == 2
    assert ran.err.splitlines()[-1] == "See 'muster fit --help' for usage."
    assert muster(capsys, "fit", "-f", STORY, "--snapshot", DATA / "missing.yaml").code == 2


def test_help_and_version_exit_0(capsys):
    assert muster(capsys, "--version").code == 0
    assert muster(capsys, "get", "--help").code == 0
    bare = muster(capsys)  # as bare kubectl: the help on stdout, exit 0
    assert bare.code == 0 and "describe" in bare.out and bare.err == ""


def test_kubectl_muster_entry_point_runs_the_command_as_kubectl_names_it(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["kubectl-muster", "describe", "-f", str(STORY), "-o",
                                      "json"])
    with pytest.raises(SystemExit) as done:
        cli_main.kubectl_plugin()
    assert done.value.code == 0
    assert '"name": "story"' in capsys.readouterr().out
    monkeypatch.setattr(sys, "argv", ["kubectl-muster", "get", "--bogus"])
    with pytest.raises(SystemExit) as done:
        cli_main.kubectl_plugin()
    assert done.value.code == 1
    assert capsys.readouterr().err.endswith("See 'kubectl muster get --help' for usage.\n")


def test_kubectl_finds_the_plugin_on_path_by_its_declared_name(tmp_path: Path):
    """kubectl runs ``kubectl-muster`` from PATH for ``kubectl muster``: the console script
    pyproject declares must be that name and point at the plugin entry."""
    import tomllib  # noqa: PLC0415

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-muster"] == "extender.cli.main:kubectl_plugin"
    assert scripts["muster"] == "extender.cli.main:main"
    # What pip writes for that entry, run as kubectl runs a plugin: by name from PATH.
    plugin = tmp_path / "kubectl-muster"
    module, _, func = scripts["kubectl-muster"].partition(":")
    plugin.write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import {func}\n"
                      f"sys.exit({func}())\n")
    plugin.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)}
    ran = subprocess.run(["kubectl-muster", "describe", "-f", str(STORY)], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert ran.returncode == 0, ran.stderr
    assert "JobSet ml/story" in ran.stdout
