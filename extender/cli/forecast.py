"""``muster forecast``: when each waiting gang is expected to start, and what it waits for.

The cluster is read as ``muster record`` reads it (or ``-f`` a recorded snapshot) and replayed
forward from now through the same gang session that schedules it, each running workload ending
at its expected end: its ``muster.dev/expected-runtime`` annotation, bounded by its
``activeDeadlineSeconds`` (docs/forecast.md). A gang whose start rests on a workload with no
written runtime is ``unknown``, naming it, never given a guessed time.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from extender.cli.errors import EXIT_OK, CliError
from extender.cli.listing import human_age
from extender.cli.options import add_cluster_flags, add_descriptor_flags, add_output_flag
from extender.cli.record import RECORDED_AT, record
from extender.cli.render import console, emit_data, table
from extender.cli.workloads import base_descriptors, cluster_error, connect_with_descriptors
from extender.core.model.durations import parse_seconds
from extender.core.model.objects import timestamp
from extender.core.workloads.catalog import Catalog
from extender.files.snapshot import SnapshotFileError, parse_snapshot
from extender.files.yamlsafe import load_all
from extender.kube.client import KubeError
from extender.server.forecaster import waits_clause
from simulator.forecast import Forecast, GangForecast, Outlook, forecast
from simulator.snapshot_replay import ReplayInputError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "forecast", help="when each waiting gang is expected to start, and what it waits for",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_cluster_flags(p)
    add_descriptor_flags(p)
    p.add_argument("-f", "--filename", metavar="SNAPSHOT",
                   help="forecast a snapshot `muster record` wrote, from the time it was "
                        "recorded, instead of the live cluster")
    add_output_flag(p)
    p.set_defaults(handler=run)


def _recorded_at(text: str) -> float | None:
    """The ``muster.dev/recorded-at`` time of a recording (epoch seconds)."""
    try:
        docs = list(load_all(text))
    except yaml.YAMLError:
        return None
    for doc in docs:
        meta = doc.get("metadata") if isinstance(doc, Mapping) else None
        notes = meta.get("annotations") if isinstance(meta, Mapping) else None
        found = timestamp(notes.get(RECORDED_AT)) if isinstance(notes, Mapping) else 0.0
        if found:
            return found
    return None


def _snapshot(args: argparse.Namespace) -> tuple[list[dict[str, Any]], float, Catalog]:
    """The objects to forecast, the time they stand for, and the descriptors to read them."""
    if args.filename is not None:
        catalog = base_descriptors(args).catalog
        try:
            text = Path(args.filename).read_text(encoding="utf-8")
        except OSError as err:
            raise CliError(f"{args.filename}: cannot read: {err.strerror or err}") from None
        try:
            objects = parse_snapshot(text, source=args.filename)
        except SnapshotFileError as err:
            raise CliError(str(err)) from None
        at = _recorded_at(text)
        return objects, datetime.now(UTC).timestamp() if at is None else at, catalog
    conn, descriptors = connect_with_descriptors(args, base_descriptors(args))
    now = datetime.now(UTC)
    try:
        data = record(conn, descriptors.catalog.descriptors, now=now)
    except KubeError as err:
        raise cluster_error(err) from None
    return data["items"], now.timestamp(), descriptors.catalog


def start_text(gang: GangForecast) -> str:
    """``in about 6m``, ``within 6m`` (an upper bound), ``now``, ``unknown``, ``never``."""
    if gang.outlook is Outlook.STARTS and gang.start is not None:
        if gang.start <= 0:
            return "now"
        word = "within" if gang.upper_bound else "in about"
        return f"{word} {human_age(gang.start)}"
    return gang.outlook.value


def waits_text(gang: GangForecast) -> str:
    if gang.outlook is Outlook.UNKNOWN:
        return f"{', '.join(gang.unknown) or 'workloads'} (runtime unknown)"
    if gang.outlook is Outlook.NEVER:
        return "no workload's end makes room"
    return ", ".join(gang.waits_for) or "-"


def gang_data(g: GangForecast) -> dict[str, Any]:
    """One gang as scripts read it: its outlook, start (seconds from now, or null), whether
    that start is an upper bound, what it waits for, and the unknown runtimes it rests on."""
    return {"gang": g.gang, "workload": g.workload, "outlook": g.outlook.value,
            "startSeconds": g.start, "upperBound": g.upper_bound,
            "waitsFor": list(g.waits_for), "unknownRuntimes": list(g.unknown)}


def forecast_data(found: Forecast) -> dict[str, Any]:
    """The JSON scripts read: :func:`gang_data` per waiting gang."""
    return {"gangs": [gang_data(g) for g in found.gangs]}


def sentence(outlook: Outlook, start: float | None, *, upper_bound: bool = False,
             waits_for: Sequence[str] = (), unknown: Sequence[str] = ()) -> str:
    """What ``describe`` and ``fit`` say of a waiting gang: ``expected to start in about 12m,
    when ml/train-3 finishes``; ``start`` is seconds from now."""
    clause = waits_clause(outlook, waits_for, unknown)
    if outlook is Outlook.NEVER:
        return f"not expected to start: {clause}"
    if outlook is Outlook.UNKNOWN or start is None:
        return f"start unknown: {clause}"
    when = ("now" if start <= 0 else
            f"{'within' if upper_bound else 'in about'} {human_age(start)}")
    return f"expected to start {when}" + (f", {clause}" if clause else "")


_OUTLOOKS = {"Unknown": Outlook.UNKNOWN, "Never": Outlook.NEVER}


def status_sentence(status: Mapping[str, Any], now: float) -> str:
    """:func:`sentence` of a Gang object's ``status.forecast`` at ``now`` (epoch seconds);
    empty when it holds none (the gang is not waiting, or no forecast was made yet)."""
    start = str(status.get("start") or "")
    if not start:
        return ""
    outlook = _OUTLOOKS.get(start, Outlook.STARTS)
    at = None if outlook is not Outlook.STARTS else (
        now if start == "Now" else timestamp(start) or None)
    return sentence(outlook, None if at is None else at - now,
                    upper_bound=bool(status.get("upperBound")),
                    waits_for=[str(w) for w in status.get("waitsFor") or ()],
                    unknown=[str(w) for w in status.get("unknownRuntimes") or ()])


def rows(found: Forecast) -> Sequence[tuple[str, str, str]]:
    return [(g.gang, start_text(g), waits_text(g)) for g in found.gangs]


def run(args: argparse.Namespace) -> int:
    objects, now, catalog = _snapshot(args)
    where = args.filename or "the cluster"
    try:
        found = forecast(objects, now=now, catalog=catalog, parse_duration=parse_seconds)
    except ReplayInputError as err:
        raise CliError(f"{where}: {err}") from None
    if args.output in ("json", "yaml"):
        emit_data(forecast_data(found), args.output)
    elif not found.gangs:
        print("no gang is waiting")
    else:
        console().print(table(("GANG", "START", "WAITS FOR"), rows(found)))
    return EXIT_OK
