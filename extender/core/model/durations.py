"""Durations as Kubernetes spells them: Go's ``time.ParseDuration`` (``3s``, ``500ms``,
``1h30m``, ``-1.5h``), and a bare number meaning seconds, as Muster's settings always took.

kube-scheduler's configuration and kubectl's flags take Go durations, so an operator writes
``MUSTER_BIND_TIMEOUT=5s`` beside ``httpTimeout: 30s``. The grammar is Go's exactly (no days,
no spaces, a unit on every term, ``0`` alone needs none) and the arithmetic is in integer
nanoseconds with Go's int64 range, so what Go refuses is refused here. (durationpy, which the
kubernetes client installs, also accepts ``d``, ``w`` and ``y``, and adds floats.)
"""

from __future__ import annotations

import re
from fractions import Fraction

from extender.core.model.errors import ModelError

NANOSECONDS: dict[str, int] = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # MICRO SIGN, as Go accepts
    "\u03bcs": 1_000,  # GREEK SMALL LETTER MU, as Go accepts
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_LIMIT = 1 << 63
"""Go sums in uint64 up to 2**63 (the magnitude of the most negative int64)."""
# ASCII digits only, as Go's parser reads them ("٣s" is no duration).
_TERM = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]*)")
_BARE = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")


class DurationError(ModelError):
    """Not a duration; the message quotes the value and says what is wrong."""


def parse_go_duration(text: str) -> int:
    """Nanoseconds of a Go duration string; raises :class:`DurationError` as Go errors."""
    rest = text
    negative = False
    if rest[:1] in ("-", "+"):
        negative = rest[0] == "-"
        rest = rest[1:]
    if rest == "0":
        return 0
    if not rest:
        raise DurationError(f"invalid duration {text!r}")
    total = 0
    while rest:
        term = _TERM.match(rest)
        assert term is not None  # every group may be empty, so the pattern always matches
        whole, frac, unit = term.group(1), term.group(2), term.group(3)
        if not whole and not frac:
            raise DurationError(f"invalid duration {text!r}")
        if not unit:
            raise DurationError(f"missing unit in duration {text!r}")
        if unit not in NANOSECONDS:
            raise DurationError(f"unknown unit {unit!r} in duration {text!r}")
        value = _leading_int(whole, text)
        size = NANOSECONDS[unit]
        if value > _LIMIT // size:
            raise DurationError(f"invalid duration {text!r}: out of range")
        value *= size
        if frac:
            # As Go: the fraction's digits as an integer over a float scale, in float64
            # ("0.3333333333333333333h" is 20m0s there, so it is here).
            digits, scale = _leading_fraction(frac)
            value += int(float(digits) * (float(size) / scale))
        total += value
        if value > _LIMIT or total > _LIMIT:
            raise DurationError(f"invalid duration {text!r}: out of range")
        rest = rest[term.end():]
    if not negative and total > _LIMIT - 1:
        raise DurationError(f"invalid duration {text!r}: out of range")
    nanos = total
    return -nanos if negative else nanos


def _leading_int(digits: str, text: str) -> int:
    value = 0
    for c in digits:
        if value > _LIMIT // 10:  # checked per digit: bounded work on absurd input
            raise DurationError(f"invalid duration {text!r}: out of range")
        value = value * 10 + ord(c) - 48
        if value > _LIMIT:
            raise DurationError(f"invalid duration {text!r}: out of range")
    return value


def _leading_fraction(digits: str) -> tuple[int, float]:
    """Go's leadingFraction: digits beyond int64 precision are dropped, not an error."""
    value, scale = 0, 1.0
    for c in digits:
        if value > (_LIMIT - 1) // 10:
            break
        grown = value * 10 + ord(c) - 48
        if grown > _LIMIT:
            break
        value, scale = grown, scale * 10
    return value, scale


def parse_seconds(text: str) -> float:
    """Seconds of ``text``: a Go duration (``1m30s``) or a bare number of seconds (``90``,
    ``2.5``). Negative and zero values parse; callers say which they accept."""
    value = text.strip()
    if _BARE.fullmatch(value):
        return float(value)
    return parse_go_duration(value) / 1e9


def format_seconds(seconds: float) -> str:
    """``seconds`` as Go prints a duration, for messages and logs: ``3s``, ``1m0s``,
    ``500ms``, ``1h30m0s``."""
    nanos = round(seconds * 1e9)
    sign = "-" if nanos < 0 else ""
    nanos = abs(nanos)
    if nanos == 0:
        return "0s"
    if nanos < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("\u00b5s", 1_000), ("ns", 1)):
            if nanos >= size:
                return sign + _trim(Fraction(nanos, size)) + unit
    hours, rest = divmod(nanos, NANOSECONDS["h"])
    minutes, rest = divmod(rest, NANOSECONDS["m"])
    text = _trim(Fraction(rest, NANOSECONDS["s"])) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{text}"
    if minutes:
        return f"{sign}{minutes}m{text}"
    return sign + text


def _trim(value: Fraction) -> str:
    whole, part = divmod(value, 1)
    if not part:
        return str(whole)
    digits = f"{float(part):.9f}"[2:].rstrip("0")
    return f"{whole}.{digits}"
