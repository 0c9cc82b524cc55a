"""What every DP audit entry point (client level, DP-SGD, the user's Opacus) checks at its boundary: the threat
models a bound is reported for, and one rule for a positive number, so each names a bad argument the same way."""

from __future__ import annotations

import math

from ..errors import FedleakError

#: the threat models every audit reports: the server sees each round's (step's) release, or the final model only
THREATS = ("all-iterates", "final-model")


def positive(name: str, value, integer: bool = False, upper: float = math.inf):
    """``value`` if it is a finite number in (0, ``upper``] (an integer with ``integer``), else a
    :class:`FedleakError` naming ``name``."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and 0 < value <= upper
    if ok and integer and int(value) != value:
        ok = False
    if not ok:
        if integer:
            raise FedleakError(f"{name} must be an integer from 1 to {upper:.0f}, got {value!r}")
        bound = f" and < {upper:g}" if math.isfinite(upper) else ""
        raise FedleakError(f"{name} must be a finite number > 0{bound}, got {value!r}")
    return int(value) if integer else float(value)
