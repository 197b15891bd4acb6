"""Kubernetes resource quantities as exact integers in milli-units.

Every quantity inside Muster is an ``int`` counting thousandths of the unit: ``"500m"`` CPU is
500, ``"2"`` GPUs is 2000, ``"1Gi"`` memory is 1073741824000. Integers keep arithmetic exact and
comparisons cheap; like the API server, a value finer than a milli-unit is rounded up.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from functools import lru_cache

MILLI = 1000

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_PATTERN = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|"
    r"(?P<exp>[eE][+-]?\d+))?$"
)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


@lru_cache(maxsize=4096)
def _parse_text(text: str) -> int:
    match = _PATTERN.match(text.strip())
    if match is None:
        raise QuantityError(f"not a Kubernetes quantity: {text!r}")
    try:
        number = Decimal(match.group("num"))
    except InvalidOperation as err:  # pragma: no cover - the regex admits only decimals
        raise QuantityError(f"not a Kubernetes quantity: {text!r}") from err
    suffix = match.group("suffix")
    exponent = match.group("exp")
    if exponent is not None:
        number *= Decimal(10) ** int(exponent[1:])
    elif suffix in _BINARY:
        number *= _BINARY[suffix]
    elif suffix is not None:
        number *= _DECIMAL[suffix]
    return int((number * MILLI).to_integral_value(rounding=ROUND_CEILING))


def parse_quantity(value: object) -> int:
    """Parse a quantity (``"4"``, ``"500m"``, ``"16Gi"``, ``4``, ``0.5``) into milli-units."""
    if isinstance(value, bool):
        raise QuantityError(f"not a Kubernetes quantity: {value!r}")
    if isinstance(value, int):
        return value * MILLI
    if isinstance(value, float):
        return int((Decimal(repr(value)) * MILLI).to_integral_value(rounding=ROUND_CEILING))
    if isinstance(value, str):
        return _parse_text(value)
    raise QuantityError(f"not a Kubernetes quantity: {value!r}")


def format_quantity(milli: int, *, binary: bool = False) -> str:
    """Render milli-units for people: ``1500`` -> ``"1500m"``, ``2000`` -> ``"2"``.

    With ``binary`` (memory), whole multiples of a binary suffix use it: ``"16Gi"``.
    """
    if milli % MILLI:
        return f"{milli}m"
    whole = milli // MILLI
    if binary and whole:
        for suffix, factor in sorted(_BINARY.items(), key=lambda kv: -kv[1]):
            if whole % factor == 0:
                return f"{whole // factor}{suffix}"
    return str(whole)
