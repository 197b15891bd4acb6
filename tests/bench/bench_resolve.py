"""Median time to resolve each catalog example once its descriptor is compiled.

Target: under 1 ms per example. Each figure is also given as a ratio against
``copy.deepcopy`` of the same object, measured in the same run, so the numbers mean something
on any machine. Run: ``.venv/bin/python tests/bench/bench_resolve.py``.
"""

from __future__ import annotations

import copy
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from extender.core.workloads.catalog import UnknownKind  # noqa: E402
from extender.core.workloads.workload import resolve_workload  # noqa: E402
from extender.files.catalog import packaged_catalog, yaml_documents  # noqa: E402

EXAMPLES = ROOT.parent / "shared" / "examples"
TARGET_MS = 1.0


def median_seconds(fn: Callable[[], object], *, rounds: int = 7, number: int = 50) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples)


def main() -> int:
    catalog = packaged_catalog()
    rows = []
    for file in sorted(EXAMPLES.glob("*/*.yaml")):
        for doc, obj in yaml_documents(file.read_text(encoding="utf-8"), str(file)):
            try:
                descriptor = catalog.require(obj)
            except UnknownKind:
                continue
            resolve_workload(obj, descriptor)  # warm the path cache, as a running server is
            t_resolve = median_seconds(lambda o=obj, d=descriptor: resolve_workload(o, d))
            t_copy = median_seconds(lambda o=obj: copy.deepcopy(o))
            rows.append((f"{file.stem[:60]}:{doc}", obj["kind"], t_resolve, t_copy))
    width = max(len(r[0]) for r in rows)
    print(f"{'example':<{width}}  {'kind':<22} {'resolve ms':>10} {'deepcopy ms':>11} {'ratio':>6}")
    for name, kind, t_resolve, t_copy in rows:
        print(f"{name:<{width}}  {kind:<22} {t_resolve * 1e3:>10.3f} {t_copy * 1e3:>11.3f} "
              f"{t_resolve / t_copy:>6.2f}")
    worst = max(r[2] for r in rows)
    ratios = [r[2] / r[3] for r in rows]
    print(f"\n{len(rows)} workloads; median resolve "
          f"{statistics.median(r[2] for r in rows) * 1e3:.3f} ms, worst {worst * 1e3:.3f} ms "
          f"(target < {TARGET_MS} ms); median ratio to deepcopy {statistics.median(ratios):.2f}")
    over = [r[0] for r in rows if r[2] * 1e3 >= TARGET_MS]
    if over:
        print("over target: " + ", ".join(over))
    return 1 if over else 0


if __name__ == "__main__":
    raise SystemExit(main())
