"""Chaos trials (tests/reliability/chaos.py) on the session sandbox: after each settles, no
gang is partly bound, no node oversubscribed, no pod on a node that is gone, no stale status.

Every trial runs once in every e2e run (a few minutes; nothing is skipped).
``python -m tests.reliability.chaos --repeat N`` runs them again and again on a sandbox of
their own with a shorter bind timeout and prints one line per trial.
"""

from __future__ import annotations

import itertools
import os

import pytest

from extender.core.workloads.catalog import Catalog
from extender.sandbox.sandbox import Sandbox
from tests.reliability.chaos import TRIALS, run_trial

pytestmark = pytest.mark.e2e

_RUNS = itertools.count()


@pytest.mark.parametrize("trial", TRIALS)
def test_after_the_chaos_trial_settles_every_invariant_holds(
        trial: str, sandbox: Sandbox, catalog: Catalog) -> None:
    namespace = f"chaos-{os.getpid()}-{next(_RUNS)}"
    problems, summary, seconds = run_trial(sandbox, catalog, trial, namespace)
    print(f"{trial}: {seconds:.0f} s; {summary}")
    assert problems == [], summary
