"""``muster simulate``: replay a GPU trace (the FGD paper's method) under scheduling policies.

    muster simulate --trace openb --pods PODS.csv --nodes NODES.csv --policy fgd --seed 42
    muster simulate --trace openb --pods ... --nodes ... --compare bestfit,fgd --seeds 42..45
    muster simulate --trace openb --pods ... --nodes ... --sweep --policy all --seeds 42..51
    muster simulate SNAPSHOT.yaml --compare default,muster --plot replay.png
    muster simulate --synthetic nodes=100,workloads=300 --seed 7 --compare default,muster

Output is a table for people or JSON for scripts (``gpu_allocation_ratio_at``: arrived-demand
percent "0".."130" -> allocation percent); ``--plot FILE.png`` draws allocation against
arrived demand. In trace mode ``--compare A,B`` sets two policies side by side, point by point,
with their difference. Snapshot and synthetic modes replay gang workloads under kube-scheduler
alone (``default``) or with Muster (``muster``); ``--compare`` names those schedulers there.
Flags of one mode given to the other are an error. See docs/simulator.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from extender.cli.errors import CliError, sim_extra
from extender.cli.options import duration
from extender.cli.simulate_gangs import SYNTHETIC_KEYS, run_gangs


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="replay a GPU trace under scheduling policies (offline, deterministic)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("snapshot", nargs="?", type=Path, metavar="SNAPSHOT",
                   help="snapshot file to replay (nodes, pods, workloads, optional Timeline)")
    p.add_argument("--compare", metavar="A,B",
                   help="snapshot/synthetic: schedulers side by side (default, muster); "
                        "trace: two policies side by side")
    p.add_argument("--synthetic", metavar="K=V,...",
                   help="replay a seeded synthetic day instead of a file; keys: "
                        + ", ".join(SYNTHETIC_KEYS))
    p.add_argument("--horizon", type=duration, metavar="DURATION",
                   help="stop the replay at this virtual time: 6h, 90m, or seconds")
    p.add_argument("--trace", choices=("openb",), help="trace format (the Alibaba openb CSVs)")
    p.add_argument("--pods", type=Path, help="pod list CSV of the trace")
    p.add_argument("--nodes", type=Path, help="node list CSV of the trace")
    p.add_argument(
        "--policy",
        # Not listed from simulator.policies: importing it needs numpy (the sim extra), and
        # `muster --help` must work without it; a wrong name gets the list.
        help="policy or comma list, or 'all' (default fgd; the FGD paper's: random, dotprod, "
             "gpuclustering, gpupacking, bestfit, fgd)",
    )
    p.add_argument("--seed", type=int, default=42,
                   help="random seed: the trace's order, the synthetic day, and the draw "
                        "among equally scored nodes (default 42)")
    p.add_argument("--seeds", help="seed range for --sweep, e.g. 42..51 (default: --seed)")
    p.add_argument("--tune", type=float,
                   help="top the trace up (or down) to this multiple of cluster GPUs (default 1.3)")
    p.add_argument("--sweep", action="store_true",
                   help="run every policy x seed in parallel processes and report means")
    p.add_argument("--executor", choices=("process", "ray"),
                   help="where a sweep runs: local processes (default) or a Ray cluster")
    p.add_argument("--workers", type=int, default=None, help="parallel processes (default: CPUs)")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")
    p.add_argument("--plot", type=Path, help="write a PNG of allocation vs arrived demand")
    p.set_defaults(handler=run)


#: Flags only trace mode reads, and only snapshot/synthetic mode reads (``dest`` -> flag).
TRACE_ONLY = {"trace": "--trace", "pods": "--pods", "nodes": "--nodes", "policy": "--policy",
              "seeds": "--seeds", "tune": "--tune", "sweep": "--sweep",
              "executor": "--executor", "workers": "--workers"}
GANG_ONLY = {"horizon": "--horizon"}


def _given(args: argparse.Namespace, flags: dict[str, str]) -> list[str]:
    return [flag for dest, flag in flags.items() if getattr(args, dest) not in (None, False)]


def _check_mode(args: argparse.Namespace, *, trace: bool) -> None:
    """A flag of the other mode would be silently ignored: say so instead."""
    if trace:
        wrong = _given(args, GANG_ONLY)
        if wrong:
            raise CliError(f"{', '.join(wrong)}: only for a SNAPSHOT or --synthetic replay, "
                           "not --trace")
        return
    wrong = _given(args, TRACE_ONLY)
    if wrong:
        raise CliError(f"{', '.join(wrong)}: only for --trace openb; a SNAPSHOT or --synthetic "
                       "replay compares schedulers (--compare default,muster)")


def run(args: argparse.Namespace) -> int:
    if args.snapshot is not None or args.synthetic is not None:
        _check_mode(args, trace=False)
        return run_gangs(args)
    if args.trace is None:
        raise CliError("give a SNAPSHOT file, --synthetic K=V,..., or --trace openb with "
                       "--pods and --nodes")
    _check_mode(args, trace=True)
    if args.pods is None or args.nodes is None:
        raise CliError("--trace openb needs --pods FILE and --nodes FILE")
    with sim_extra("--trace"):
        from extender.cli.simulate_trace import run_trace  # noqa: PLC0415 - needs numpy
    return run_trace(args)
