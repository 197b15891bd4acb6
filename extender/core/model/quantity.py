"""Kubernetes resource quantities as exact integers in milli-units.

Every quantity inside Muster is an ``int`` counting thousandths of the unit: ``"500m"`` CPU is
500, ``"2"`` GPUs is 2000, ``"1Gi"`` memory is 1073741824000. Integers keep arithmetic exact and
comparisons cheap; like the API server, a value finer than a milli-unit is rounded up.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_CEILING, Decimal
from functools import lru_cache

from extender.core.model.errors import ModelError

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


class QuantityError(ModelError):
    """A string that is not a Kubernetes quantity."""


#: The largest amount accepted, in whole units: what an int64 holds, as the API server's
#: ``Quantity.Value()`` does. Beyond it a quantity is refused, never turned into a huge integer.
MAX_UNITS = 2**63 - 1
_MAX_TEXT = 64


@lru_cache(maxsize=4096)
def _parse_text(text: str) -> int:
    match = _PATTERN.match(text.strip()) if len(text) <= _MAX_TEXT else None
    if match is None:
        raise QuantityError(f"not a Kubernetes quantity: {_shown(text)}")
    try:
        number = Decimal(match.group("num"))
        suffix = match.group("suffix")
        exponent = match.group("exp")
        if exponent is not None:
            number = number.scaleb(int(exponent[1:]))
        elif suffix in _BINARY:
            number *= _BINARY[suffix]
        elif suffix is not None:
            number *= _DECIMAL[suffix]
    except ArithmeticError as err:  # an exponent beyond what Decimal holds
        raise QuantityError(f"quantity {text!r} is too large") from err
    return _milli(number, text)


def _shown(text: str) -> str:
    return repr(text) if len(text) <= _MAX_TEXT else f"{text[:_MAX_TEXT]!r}... ({len(text)} chars)"


def _milli(number: Decimal, text: str) -> int:
    if abs(number) > MAX_UNITS:
        raise QuantityError(f"quantity {_shown(text)} is too large (more than {MAX_UNITS})")
    return int((number * MILLI).to_integral_value(rounding=ROUND_CEILING))


def parse_quantity(value: object) -> int:
    """Parse a quantity (``"4"``, ``"500m"``, ``"16Gi"``, ``4``, ``0.5``) into milli-units."""
    if isinstance(value, bool):
        raise QuantityError(f"not a Kubernetes quantity: {value!r}")
    if isinstance(value, int):
        return _milli(Decimal(value), str(value) if abs(value) < 10**30 else "a huge number")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"not a Kubernetes quantity: {value!r}")
        return _milli(Decimal(repr(value)), repr(value))
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
