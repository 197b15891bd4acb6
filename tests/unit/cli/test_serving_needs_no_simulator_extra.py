"""Every command but the trace replay and the plots runs without the ``sim`` extra (numpy,
matplotlib): a serving install, the image above all, leaves them out."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from extender.cli.main import build_parser
from simulator.policies import PAPER_ORDER

REPO = Path(__file__).resolve().parents[3]
STORY = REPO / "tests" / "unit" / "cli" / "data" / "story-jobset.yaml"

#: Runs ``muster ARGS`` as if numpy and matplotlib were not installed.
WITHOUT_SIM = """
import sys
for name in ("numpy", "matplotlib"):
    sys.modules[name] = None  # an import of it now raises ModuleNotFoundError
from extender.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def _muster_without_sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", WITHOUT_SIM, *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)


def test_help_describe_and_fit_run_without_numpy_or_matplotlib() -> None:
    assert _muster_without_sim("--help").returncode == 0
    described = _muster_without_sim("describe", "-f", str(STORY))
    assert described.returncode == 0, described.stderr
    assert "gang: ml/story" in described.stdout
    fit = _muster_without_sim("fit", "-f", str(STORY), "--snapshot",
                              str(REPO / "docs" / "examples" / "gang-snapshot.yaml"))
    assert fit.returncode == 0, fit.stderr


def test_a_gang_replay_plot_without_matplotlib_names_the_extra_in_one_line(
        tmp_path: Path) -> None:
    done = _muster_without_sim("simulate", "--synthetic", "nodes=2,workloads=2",
                               "--plot", str(tmp_path / "p.png"))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "error: --plot needs matplotlib, which a serving install leaves out; install the "
        "simulator's extra: pip install 'muster[sim]'"]


def test_the_policy_help_names_every_trace_policy() -> None:
    """The help lists the policies by hand (importing them needs numpy): it must not drift."""
    [commands] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    simulate = commands.choices["simulate"]
    [policy] = [a for a in simulate._actions if "--policy" in a.option_strings]
    listed = (policy.help or "").split("paper's: ", 1)[1].rstrip(")").split(", ")
    assert listed == list(PAPER_ORDER)
