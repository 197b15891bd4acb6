"""One forecast recompute as ``muster serve`` runs it: 1,000 nodes of 8 GPUs filled by running
JobSets with expected runtimes, and 200 waiting gangs (JobSets of 1 to 4 pods of 8 GPUs).

    .venv/bin/python tests/bench/bench_forecast.py [--nodes 1000] [--waiting 200] [--runs 3]

A recompute is :meth:`extender.server.forecaster.Forecaster.recompute`: the store's raw
objects replayed forward through the simulator's gang replay (:mod:`simulator.forecast`),
then the Gang objects' forecasts, Events and gauges worked out. The baseline, measured in the
same run on the same objects, is one snapshot built from scratch (``CatalogSnapshots`` on the
store's raw state, what the extender does after a full list). Figures are wall and CPU seconds
of this process, the best and the median of ``--runs``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from extender.files.catalog import packaged_catalog
from extender.server.forecaster import Forecaster, Shown
from extender.state.build import CatalogSnapshots
from extender.state.ports import MemoryEvents
from extender.state.store import StateStore
from tests.unit.simulator.forecast_snapshots import NOW, jobset, node, running_pods


def cluster(nodes: int, waiting: int) -> StateStore:
    """``nodes`` nodes, two per running JobSet (runtimes from 10m to 3h), and ``waiting``
    JobSets of 1 to 4 pods with no pod bound."""
    names = [f"n{i:05d}" for i in range(nodes)]
    objects = [node(n) for n in names]
    for i in range(0, nodes - 1, 2):
        name = f"run-{i // 2:04d}"
        objects.append(jobset(name, runtime=f"{10 + (i * 7) % 170}m"))
        objects.extend(running_pods(name, names[i], names[i + 1]))
    for i in range(waiting):
        objects.append(jobset(f"wait-{i:04d}", pods=1 + i % 4, runtime="30m",
                              created=NOW - 3600 + i))
    store = StateStore(CatalogSnapshots(packaged_catalog()))
    store.load(objects)
    return store


def timed(step: Callable[[], object], runs: int) -> tuple[list[float], list[float]]:
    walls, cpus = [], []
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        step()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return walls, cpus


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--waiting", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    store = cluster(args.nodes, args.waiting)
    builder = CatalogSnapshots(packaged_catalog())
    forecaster = Forecaster(store, catalog=builder.current, clock=lambda: NOW,
                            shown=Shown(events=MemoryEvents()))
    base_wall, base_cpu = timed(lambda: builder(store.raw()), args.runs)
    wall, cpu = timed(forecaster.recompute, args.runs)
    gangs = forecaster.last.gangs if forecaster.last is not None else ()
    starting = sum(1 for g in gangs if g.start is not None)
    print(f"{args.nodes} nodes, {len(gangs)} waiting gangs ({starting} with a start), "
          f"{args.runs} runs")
    print(f"{'':24}{'wall best':>10}{'wall p50':>10}{'cpu best':>10}{'cpu p50':>10}")
    for label, w, c in (("snapshot build", base_wall, base_cpu),
                        ("forecast recompute", wall, cpu)):
        print(f"{label:24}{min(w):10.2f}{statistics.median(w):10.2f}"
              f"{min(c):10.2f}{statistics.median(c):10.2f}")
    print(f"recompute / snapshot build (cpu p50): "
          f"{statistics.median(cpu) / max(statistics.median(base_cpu), 1e-9):.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
