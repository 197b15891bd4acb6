"""What ``muster get`` borrows from kubectl's printers: the AGE column, ``-o name`` and
``--sort-by JSONPATH``, each behaving as kubectl's does."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from extender.cli.errors import CliError
from extender.core.workloads.paths import PathError, compile_path


def human_age(seconds: float) -> str:
    """kubectl's AGE (apimachinery's ``duration.HumanDuration``): about two significant
    figures, ``45s``, ``3m20s``, ``15m``, ``5h``, ``3d4h``, ``20d``, ``2y30d``."""
    whole = int(seconds)
    if whole < -1:  # clocks a second or so apart count as now
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        s = whole % 60
        return f"{minutes}m" if s == 0 else f"{minutes}m{s}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        years = hours // 24 // 365
        return f"{years}y" if days == 0 else f"{years}y{days}d"
    return f"{hours // 24 // 365}y"


def age_of(raw: Mapping[str, Any], now: datetime) -> str:
    """The AGE of an object from ``metadata.creationTimestamp``; ``<unknown>`` without one,
    as kubectl prints it."""
    meta = raw.get("metadata")
    stamp = meta.get("creationTimestamp") if isinstance(meta, Mapping) else None
    if not isinstance(stamp, str):
        return "<unknown>"
    try:
        created = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    if created.tzinfo is None:
        return "<unknown>"
    return human_age((now - created).total_seconds())


def resource_name(kind: str, api_version: str, name: str) -> str:
    """``-o name``: ``kind.group/name`` in lower case, ``pod/name`` for the core group, as
    kubectl prints it (and takes it back: ``kubectl get jobset.jobset.x-k8s.io/train``)."""
    group = api_version.rpartition("/")[0]
    return f"{kind.lower()}.{group}/{name}" if group else f"{kind.lower()}/{name}"


class SortBy:
    """``--sort-by``: a JSONPath as kubectl takes it (``{.metadata.name}``,
    ``.metadata.creationTimestamp``, ``.spec.replicatedJobs[0].replicas``), evaluated on each
    workload object. Numbers sort as numbers, everything else as text (RFC 3339 timestamps
    therefore in time order); an object without the field sorts first, as kubectl sorts it."""

    def __init__(self, expression: str) -> None:
        text = expression.strip()
        if text.startswith("{") and text.endswith("}"):
            text = text[1:-1].strip()
        if not text.startswith("."):
            text = "." + text
        self.expression = expression
        try:
            self._path = compile_path("$" + text)  # the descriptors' JSONPath dialect
        except PathError as err:
            raise CliError(f"--sort-by {expression!r}: {err}") from None

    def key(self, raw: Mapping[str, Any]) -> tuple[int, float, str]:
        found = self._path.find(raw)
        if not found or found[0] is None:
            return (0, 0.0, "")
        value = found[0]
        if isinstance(value, bool):
            return (2, 0.0, str(value).lower())
        if isinstance(value, int | float):
            return (1, float(value), "")
        return (2, 0.0, value if isinstance(value, str) else repr(value))

    def sort(self, items: Sequence[Any], raw_of: Any) -> list[Any]:
        return sorted(items, key=lambda item: self.key(raw_of(item)))
