"""``muster simulate SNAPSHOT`` and ``--synthetic``: replay gang workloads, compare schedulers.

Parse, call :mod:`simulator`, render: a side-by-side table for people, or JSON for scripts
(one report per scheduler: ``gangs {total, admitted, partial}``, ``oversubscribed_nodes``,
``gpu_utilization``, ``gang_wait_seconds {p50, p95}``). ``--seed`` seeds the synthetic day
and the scheduler's draw among equally scored nodes.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from extender.cli.errors import EXIT_OK, CliError, sim_extra
from extender.cli.render import console, emit_data, table
from extender.files.catalog import packaged_catalog
from extender.files.snapshot import SnapshotFileError, load_snapshot
from simulator.scheduler import Mode, SchedulerSettings
from simulator.simulation import Result, Scenario, simulate
from simulator.snapshot_replay import ReplayInputError, scenario_from_objects
from simulator.synthetic import SyntheticSpec, generate

#: ``--synthetic`` keys -> SyntheticSpec fields (tuples are written with ``/``: sizes=1/2/4).
_KEYS = {
    "nodes": "nodes", "gpus": "gpus_per_node", "workloads": "workloads", "kinds": "kinds",
    "sizes": "gang_sizes", "gpus-per-pod": "gpus_per_pod", "rate": "arrival_rate",
    "runtime": "runtime", "elastic": "elastic", "racks": "racks", "topology": "topology",
    "gpu-types": "gpu_types",
}
SYNTHETIC_KEYS = tuple(_KEYS)


def synthetic_spec(text: str) -> SyntheticSpec:
    """``nodes=100,workloads=300,sizes=1/2/4/8,runtime=600/7200`` -> a :class:`SyntheticSpec`."""
    types = {f.name: f.type for f in fields(SyntheticSpec)}
    values: dict[str, Any] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, raw = part.partition("=")
        if not sep or key not in _KEYS:
            raise CliError(f"--synthetic {part!r}: expected KEY=VALUE with KEY one of "
                           f"{', '.join(SYNTHETIC_KEYS)}")
        name = _KEYS[key]
        kind = str(types[name])
        try:
            if name == "kinds":
                values[name] = tuple(raw.split("/"))
            elif kind.startswith("tuple[float"):
                low, high = raw.split("/")
                values[name] = (float(low), float(high))
            elif kind.startswith("tuple"):
                values[name] = tuple(int(v) for v in raw.split("/"))
            elif kind == "float":
                values[name] = float(raw)
            elif kind == "str":
                values[name] = raw
            else:
                values[name] = int(raw)
        except ValueError:
            raise CliError(f"--synthetic {key}={raw!r}: not a valid value") from None
    try:
        return SyntheticSpec(**values)
    except ValueError as err:
        raise CliError(f"--synthetic: {err}") from None


def _modes(raw: str | None) -> list[Mode]:
    names = [n.strip() for n in (raw or "muster").split(",") if n.strip()]
    try:
        modes = [Mode(n) for n in names]
    except ValueError:
        raise CliError(f"--compare {raw!r}: schedulers are "
                       + ", ".join(m.value for m in Mode)) from None
    if not modes or len(set(modes)) != len(modes):
        raise CliError(f"--compare {raw!r}: name each scheduler once")
    return modes


def _scenario(args: argparse.Namespace) -> Scenario:
    if args.synthetic is not None:
        if args.snapshot is not None:
            raise CliError("give a SNAPSHOT or --synthetic, not both")
        try:
            return generate(synthetic_spec(args.synthetic), seed=args.seed,
                            catalog=packaged_catalog())
        except ValueError as err:
            raise CliError(f"--synthetic: {err}") from None
    try:
        objects = load_snapshot(args.snapshot)
        return scenario_from_objects(objects, catalog=packaged_catalog(),
                                     name=str(args.snapshot))
    except (SnapshotFileError, ReplayInputError) as err:
        raise CliError(f"{args.snapshot}: {err}" if str(args.snapshot) not in str(err)
                       else str(err)) from None


def _fmt(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:,.1f}{unit}"


def run_gangs(args: argparse.Namespace) -> int:
    modes = _modes(args.compare)
    scenario = _scenario(args)
    show = args.output == "table" and sys.stderr.isatty()
    results: dict[str, Result] = {}
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), disable=not show, transient=True)
    with progress:
        for mode in modes:
            task = progress.add_task(f"{mode.value}: workloads arrived",
                                     total=len(scenario.workloads))

            def step(done: int, total: int, task: Any = task) -> None:
                progress.update(task, completed=done, total=total)

            results[mode.value] = simulate(scenario, mode, horizon=args.horizon, progress=step,
                                           settings=SchedulerSettings(seed=args.seed))
    if args.plot:
        # matplotlib only here: every other command (serve above all) starts without it,
        # and it writes a font cache under $HOME, which a read-only root refuses.
        with sim_extra("--plot"):
            from simulator.plots import plot_replay  # noqa: PLC0415
        plot_replay({n: (r.utilization, r.waits) for n, r in results.items()}, args.plot,
                    title=f"{scenario.name}: {len(scenario.nodes)} nodes, "
                          f"{len(scenario.workloads)} workloads")
    if args.output == "json":
        if len(results) == 1:
            emit_data(dict(next(iter(results.values())).report), "json")
        else:
            emit_data({"schedulers": {n: dict(r.report) for n, r in results.items()}}, "json")
        return EXIT_OK
    out = console()
    names = list(results)
    reports = [results[n].report for n in names]
    rows: list[list[object]] = [
        ["gangs", *(r["gangs"]["total"] for r in reports)],
        ["gangs admitted", *(r["gangs"]["admitted"] for r in reports)],
        ["partial gangs", *(r["gangs"]["partial"] for r in reports)],
        ["GPU-hours held by partial gangs", *(r["gpu_hours_partial"] for r in reports)],
        ["oversubscribed nodes", *(r["oversubscribed_nodes"] for r in reports)],
        ["GPU utilisation (%)", *(r["gpu_utilization"] for r in reports)],
        ["  of which working (%)", *(r["gpu_utilization_working"] for r in reports)],
        ["gang wait p50", *(_fmt(r["gang_wait_seconds"]["p50"], " s") for r in reports)],
        ["gang wait p95", *(_fmt(r["gang_wait_seconds"]["p95"], " s") for r in reports)],
        ["pods bound", *(r["pods"]["bound"] for r in reports)],
        # What gates save kube-scheduler: cycles for pods of gangs that cannot start yet.
        ["scheduling cycles", *(results[n].stats.get("attempts", 0) for n in names)],
        ["  of which failed", *(results[n].stats.get("failed", 0) for n in names)],
    ]
    if reports[0]["gangs_in_one_domain"] is not None:
        rows.insert(3, ["gangs admitted within one rack",
                        *(r["gangs_in_one_domain"] for r in reports)])
    out.print(table(["", *names], rows,
                    title=f"{scenario.name}: {len(scenario.nodes)} nodes, "
                          f"{len(scenario.workloads)} workloads, "
                          f"{reports[0]['end_seconds'] / 3600:.2f} h replayed"))
    if args.plot:
        out.print(f"plot written to {args.plot}")
    return EXIT_OK
