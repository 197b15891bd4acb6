"""``muster simulate --trace openb``: the GPU-trace policies of the FGD paper, side by side.

Split from :mod:`extender.cli.simulate` because the policies score nodes with numpy, which only
the ``sim`` extra installs: ``muster`` (and ``muster serve`` above all) starts without it, and
this module is imported only when a trace is replayed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from extender.cli.errors import EXIT_OK, CliError, sim_extra
from extender.cli.render import console, emit_data, table
from simulator.policies import PAPER_ORDER
from simulator.trace.openb import TraceError, load_nodes, load_pods
from simulator.trace.published import PUBLISHED_MEANS
from simulator.trace.replay import TraceResult, run_experiment
from simulator.trace.sweep import jobs_for, mean_curves, run_sweep

SHOWN_POINTS = (50, 70, 80, 90, 100, 110, 120, 130)


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


def run_trace(args: argparse.Namespace) -> int:
    """Trace mode, its flags checked by :func:`extender.cli.simulate.run`."""
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
        with sim_extra("--plot"):
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
