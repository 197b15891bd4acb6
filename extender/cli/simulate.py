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
import sys
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from extender.cli.errors import EXIT_OK, CliError
from extender.cli.options import duration
from extender.cli.render import console, emit_data, table
from extender.cli.simulate_gangs import SYNTHETIC_KEYS, run_gangs
from simulator.policies import PAPER_ORDER
from simulator.trace.openb import TraceError, load_nodes, load_pods
from simulator.trace.published import PUBLISHED_MEANS
from simulator.trace.replay import TraceResult, run_experiment
from simulator.trace.sweep import jobs_for, mean_curves, run_sweep

SHOWN_POINTS = (50, 70, 80, 90, 100, 110, 120, 130)


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
        help=f"policy or comma list, or 'all': {', '.join(PAPER_ORDER)} (default fgd)",
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


def _policies(raw: str) -> list[str]:
    names = list(PAPER_ORDER) if raw == "all" else [n.strip() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in PAPER_ORDER]
    if unknown or not names:
        named = ", ".join(unknown) or repr(raw)
        raise CliError(f"unknown policy {named}; choose from {', '.join(PAPER_ORDER)} or 'all'")
    return names


def _seeds(args: argparse.Namespace) -> list[int]:
    if not args.seeds:
        return [args.seed]
    first, sep, last = args.seeds.partition("..")
    try:
        low = int(first)
        high = int(last) if sep else low
    except ValueError:
        raise CliError(f"--seeds {args.seeds!r}: expected N or N..M") from None
    if high < low:
        raise CliError(f"--seeds {args.seeds!r}: the range is empty")
    return list(range(low, high + 1))


def _curve_json(curve: dict[int, float]) -> dict[str, float]:
    return {str(k): v for k, v in sorted(curve.items())}


def result_json(r: TraceResult) -> dict[str, Any]:
    return {
        "policy": r.policy,
        "seed": r.seed,
        "tune": r.tune,
        "pods": r.pods,
        "failed_pods": r.failed,
        "total_gpus": r.total_gpus,
        "gpu_allocation_ratio_at": _curve_json(r.allocation_at),
    }


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
    if args.compare is not None and args.policy is not None:
        raise CliError("--compare A,B names the policies to compare; drop --policy")
    policies = _policies(args.compare or args.policy or "fgd")
    if args.compare is not None and len(policies) != 2:
        raise CliError(f"--compare {args.compare!r}: name two policies, e.g. bestfit,fgd")
    if args.tune is None:
        args.tune = 1.3
    seeds = _seeds(args)
    try:
        nodes, pods = load_nodes(args.nodes), load_pods(args.pods)
    except TraceError as err:
        raise CliError(str(err)) from None
    if args.tune < 0:
        raise CliError(f"--tune {args.tune}: must be 0 (no tuning) or positive")

    show_progress = args.output == "table" and sys.stderr.isatty()
    results: list[TraceResult]
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), disable=not show_progress, transient=True)
    with progress:
        if args.sweep or len(policies) * len(seeds) > 1:
            task = progress.add_task("experiments", total=len(policies) * len(seeds))
            try:
                results = run_sweep(
                    jobs_for(args.nodes, args.pods, policies=policies, seeds=seeds, tune=args.tune),
                    workers=args.workers, executor=args.executor or "process",
                    on_done=lambda _r: progress.advance(task),
                )
            except ValueError as err:
                raise CliError(str(err)) from None
        else:
            task = progress.add_task(f"{policies[0]} seed {seeds[0]}", total=None)

            def step(done: int, total: int) -> None:
                progress.update(task, completed=done, total=total)

            results = [run_experiment(nodes, pods, policy=policies[0], seed=seeds[0],
                                      tune=args.tune, progress=step)]

    means = mean_curves(results)
    if args.plot:
        reference = {p: PUBLISHED_MEANS[p] for p in means} if args.pods.name == (
            "openb_pod_list_default.csv") else None
        # matplotlib only here: every other command (serve above all) starts without it,
        # and it writes a font cache under $HOME, which a read-only root refuses.
        from simulator.plots import plot_allocation  # noqa: PLC0415
        plot_allocation(means, args.plot, reference=reference,
                        title=f"{args.pods.stem}, seeds {seeds[0]}..{seeds[-1]}")

    if args.compare is not None:
        return _print_comparison(args, results, means, total_gpus=nodes.total_gpus, seeds=seeds)
    if args.output == "json":
        emit_data(
            {
                "experiments": [result_json(r) for r in results],
                "mean": {p: {"gpu_allocation_ratio_at": _curve_json(c)} for p, c in means.items()},
                **(result_json(results[0]) if len(results) == 1 else {}),
            },
            "json",
        )
        return EXIT_OK
    out = console()
    rows = []
    for policy, curve in means.items():
        failed = [r.failed for r in results if r.policy == policy]
        rows.append([policy, *(f"{curve.get(p, float('nan')):.2f}" for p in SHOWN_POINTS),
                     round(sum(failed) / len(failed))])
    out.print(table(["policy", *(f"{p}%" for p in SHOWN_POINTS), "failed pods"], rows,
                    title=f"GPU allocation (%) at arrived demand, {nodes.total_gpus} GPUs, "
                          f"seeds {seeds[0]}..{seeds[-1]}, tune {args.tune}"))
    if args.plot:
        out.print(f"plot written to {args.plot}")
    return EXIT_OK


def _mean_failed(results: list[TraceResult], policy: str) -> int:
    failed = [r.failed for r in results if r.policy == policy]
    return round(sum(failed) / len(failed))


def _print_comparison(args: argparse.Namespace, results: list[TraceResult],
                      means: dict[str, dict[int, float]], *, total_gpus: int,
                      seeds: list[int]) -> int:
    """Two policies side by side: allocation at each shown point, and B minus A."""
    first, second = means
    a, b = means[first], means[second]
    points = sorted(set(a) & set(b))
    if args.output == "json":
        emit_data({
            "policies": {p: {"gpu_allocation_ratio_at": _curve_json(c),
                             "failed_pods": _mean_failed(results, p)} for p, c in means.items()},
            "difference": {"gpu_allocation_ratio_at": {
                str(p): round(b[p] - a[p], 2) for p in points}},
            "experiments": [result_json(r) for r in results],
        }, "json")
        return EXIT_OK
    rows: list[list[object]] = [
        [f"{p}%", f"{a[p]:.2f}", f"{b[p]:.2f}", f"{b[p] - a[p]:+.2f}"]
        for p in SHOWN_POINTS if p in a and p in b]
    rows.append(["failed pods", _mean_failed(results, first), _mean_failed(results, second),
                 f"{_mean_failed(results, second) - _mean_failed(results, first):+d}"])
    out = console()
    out.print(table(["arrived demand", first, second, f"{second} - {first}"], rows,
                    title=f"GPU allocation (%), {total_gpus} GPUs, seeds {seeds[0]}..{seeds[-1]}, "
                          f"tune {args.tune}"))
    if args.plot:
        out.print(f"plot written to {args.plot}")
    return EXIT_OK
