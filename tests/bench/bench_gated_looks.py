"""Ungating looks on a loaded day: how often a gang waiting at its gates is planned again, with
the fit bound and without it, in the same run.

    .venv/bin/python tests/bench/bench_gated_looks.py [--seed 7] [--nodes 50] [--workloads 300]
        [--gpu-types 0]

A seeded synthetic day (JobSet, PyTorchJob, LeaderWorkerSet, RayCluster gangs of 2, 4 and 8
pods) is replayed in ``muster+gates`` mode: every gang member waits behind Muster's gate, and
after each instant's events the session's ungating look (the server's own,
``GangSession.ungate``) plans what fits. Every pod that ends frees room, and each time every
gang waiting for room is looked at again. The fit bound (``extender.core.gang.bounds``) says,
from free capacity alone, when the room that grew still cannot hold a gang; the gang is
then not planned.

The baseline is the same replay with the bound switched off (the look plans every such gang,
as before the bound). With ``--gpu-types N`` the nodes are split into N GPU models and each
workload selects one; the replay then also runs with the bound over every node only (its
tests over the nodes each role may use switched off), to show what those add. All must decide
the same: the bench fails if their reports differ. Figures: CPU seconds of this process, gangs
planned by looks (``evaluated``), looks the bound answered (``bounded``), and the ratios,
measured in this run.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Sequence
from unittest import mock

from extender.core.decide import gating
from extender.core.gang import bounds
from extender.files.catalog import packaged_catalog
from simulator.scheduler_values import Mode, SchedulerSettings
from simulator.simulation import Simulation
from simulator.synthetic import SyntheticSpec, generate


def replay(spec: SyntheticSpec, seed: int, *, bound: bool, eligible: bool = True,
           ) -> tuple[float, dict[str, object], int, int]:
    scenario = generate(spec, seed=seed, catalog=packaged_catalog())
    sim = Simulation(scenario, SchedulerSettings(mode=Mode.GATED, seed=seed))
    with contextlib.ExitStack() as switched:
        if not bound:
            switched.enter_context(mock.patch.object(gating, "_still_cannot_fit",
                                                     return_value=None))
        if not eligible:
            switched.enter_context(mock.patch.object(bounds, "_within_eligible",
                                                     return_value=None))
        started = time.process_time()
        result = sim.run()
        cpu = time.process_time() - started
    book = sim.scheduler.extender.session.gates
    return cpu, dict(result.report), book.evaluated, book.bounded


def admitted(report: dict[str, object]) -> object:
    gangs = report["gangs"]
    return gangs["admitted"] if isinstance(gangs, dict) else gangs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--workloads", type=int, default=300)
    parser.add_argument("--gpu-types", type=int, default=0)
    args = parser.parse_args(argv)
    spec = SyntheticSpec(nodes=args.nodes, workloads=args.workloads, arrival_rate=0.01,
                         gang_sizes=(2, 4, 8), gpu_types=args.gpu_types)
    base_cpu, base_report, base_evaluated, _ = replay(spec, args.seed, bound=False)
    rows = [("without the bound", base_cpu, base_evaluated, 0)]
    reports = [base_report]
    if args.gpu_types:
        cpu, report, evaluated, bounded = replay(spec, args.seed, bound=True, eligible=False)
        rows.append(("bound, every node", cpu, evaluated, bounded))
        reports.append(report)
    cpu, report, evaluated, bounded = replay(spec, args.seed, bound=True)
    rows.append(("with the bound", cpu, evaluated, bounded))
    reports.append(report)
    models = f", {args.gpu_types} GPU models" if args.gpu_types else ""
    print(f"synthetic day: seed {args.seed}, {args.nodes} nodes{models}, {args.workloads} "
          f"workloads, muster+gates; {admitted(report)} gangs admitted")
    print(f"{'':<22}{'CPU s':>8}{'planned by looks':>18}{'answered by bound':>19}")
    for name, row_cpu, row_evaluated, row_bounded in rows:
        print(f"{name:<22}{row_cpu:>8.2f}{row_evaluated:>18}{row_bounded:>19}")
    for name, row_cpu, row_evaluated, _ in rows[1:]:
        print(f"{name}: CPU x{row_cpu / base_cpu:.2f}, gangs planned "
              f"x{row_evaluated / base_evaluated:.3f} of without the bound")
    if any(r != base_report for r in reports):
        print("FAIL: the bound changed what the replay decided", file=sys.stderr)
        return 1
    print("same decisions: the reports are equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
