"""Chaos trials (tests/reliability/chaos.py) on the session sandbox: after each settles, no
gang is partly bound, no node oversubscribed, no pod on a node that is gone, no stale status.

The fast trials run in every e2e run; the rest are opt-in (``MUSTER_CHAOS=1``), as the long
Hypothesis profile is. ``python -m tests.reliability.chaos --repeat N`` runs them on a sandbox
of their own with a shorter bind timeout and prints one line per trial.
"""

from __future__ import annotations

import itertools
import os

import pytest

from extender.core.catalog import Catalog
from extender.sandbox.sandbox import Sandbox
from tests.reliability.chaos import TRIALS, run_trial

pytestmark = pytest.mark.e2e

FAST = ("muster_killed_at_barrier", "oversubscribed_3x")
LONG = os.environ.get("MUSTER_CHAOS", "") not in ("", "0")
_RUNS = itertools.count()


@pytest.mark.parametrize("trial", [
    t if t in FAST or LONG else pytest.param(t, marks=pytest.mark.skip(
        reason="long chaos trial: set MUSTER_CHAOS=1")) for t in TRIALS])
def test_after_the_chaos_trial_settles_every_invariant_holds(
        trial: str, sandbox: Sandbox, catalog: Catalog) -> None:
    namespace = f"chaos-{os.getpid()}-{next(_RUNS)}"
    problems, summary, seconds = run_trial(sandbox, catalog, trial, namespace)
    print(f"{trial}: {seconds:.0f} s; {summary}")
    assert problems == [], summary
