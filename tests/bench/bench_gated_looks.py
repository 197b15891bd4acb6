"""Ungating looks on a loaded day: how often a gang waiting at its gates is planned again, with
the fit bound and without it, in the same run.

    .venv/bin/python tests/bench/bench_gated_looks.py [--seed 7] [--nodes 50] [--workloads 300]

A seeded synthetic day (JobSet, PyTorchJob, LeaderWorkerSet, RayCluster gangs of 2, 4 and 8
pods) is replayed in ``muster+gates`` mode: every gang member waits behind Muster's gate, and
after each instant's events the session's ungating look (the server's own,
``GangSession.ungate``) plans what fits. Every pod that ends frees room, and each time every
gang waiting for room is looked at again. The fit bound (``extender.core.gang.bounds``) says,
from free capacity alone, when the room that grew still cannot hold a gang; the gang is
then not planned.

The baseline is the same replay with the bound switched off (the look plans every such gang,
as before the bound). Both must decide the same: the bench fails if their reports differ.
Figures: CPU seconds of this process, gangs planned by looks (``evaluated``), looks the bound
answered (``bounded``), and the ratios, measured in this run.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from unittest import mock

from extender.core.decide import gating
from extender.files.catalog import packaged_catalog
from simulator.scheduler import Mode, SchedulerSettings
from simulator.simulation import Simulation
from simulator.synthetic import SyntheticSpec, generate


def replay(spec: SyntheticSpec, seed: int, *, bound: bool) -> tuple[float, dict[str, object],
                                                                    int, int]:
    scenario = generate(spec, seed=seed, catalog=packaged_catalog())
    sim = Simulation(scenario, SchedulerSettings(mode=Mode.GATED, seed=seed))
    started = time.process_time()
    if bound:
        result = sim.run()
    else:
        with mock.patch.object(gating, "_still_cannot_fit", return_value=None):
            result = sim.run()
    cpu = time.process_time() - started
    book = sim.scheduler.extender.session.gates
    return cpu, dict(result.report), book.evaluated, book.bounded


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--workloads", type=int, default=300)
    args = parser.parse_args(argv)
    spec = SyntheticSpec(nodes=args.nodes, workloads=args.workloads, arrival_rate=0.01,
                         gang_sizes=(2, 4, 8))
    base_cpu, base_report, base_evaluated, _ = replay(spec, args.seed, bound=False)
    cpu, report, evaluated, bounded = replay(spec, args.seed, bound=True)
    print(f"synthetic day: seed {args.seed}, {args.nodes} nodes, {args.workloads} workloads, "
          f"muster+gates")
    print(f"{'':<22}{'CPU s':>8}{'planned by looks':>18}{'answered by bound':>19}")
    print(f"{'without the bound':<22}{base_cpu:>8.2f}{base_evaluated:>18}{0:>19}")
    print(f"{'with the bound':<22}{cpu:>8.2f}{evaluated:>18}{bounded:>19}")
    print(f"ratios: CPU x{cpu / base_cpu:.2f}, gangs planned x{evaluated / base_evaluated:.3f}")
    if report != base_report:
        print("FAIL: the bound changed what the replay decided", file=sys.stderr)
        return 1
    print("same decisions: the two reports are equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
