"""The worker moves what start-up made out of the garbage collector's reach and collects less
often (runner.tune_gc): a full collection walks every object the worker keeps."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from extender.server.runner import GC_THRESHOLDS


def test_start_up_objects_are_frozen_and_young_collections_are_rarer() -> None:
    script = textwrap.dedent("""
        import gc
        from extender.server.runner import tune_gc
        kept = [[i] for i in range(50_000)]   # what start-up built (lists: always tracked)
        before = gc.get_freeze_count()
        tune_gc()
        print(before, gc.get_freeze_count(), *gc.get_threshold())
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).parents[3], timeout=60).stdout.split()
    before, frozen, *threshold = map(int, out)
    assert before == 0
    assert frozen >= 50_000  # start-up's objects are no longer walked by each collection
    assert tuple(threshold) == GC_THRESHOLDS
    assert GC_THRESHOLDS[0] > gc_default_young()


def gc_default_young() -> int:
    out = subprocess.run([sys.executable, "-c", "import gc; print(gc.get_threshold()[0])"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return int(out)
