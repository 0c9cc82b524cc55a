"""The one error type users see.

Every check at a boundary (unknown names, shape mismatches, non-finite values, missing or
corrupt files, invalid configs) raises :class:`FedleakError` with a message that names the
problem and, where there is a fixed set of choices, the allowed values. The CLI turns it into
a one-line message and exit code 2 instead of a traceback.
"""

from __future__ import annotations

from difflib import get_close_matches
from typing import Iterable


class FedleakError(ValueError):
    """A user-facing error: bad input, bad configuration, or missing data."""


def unknown_choice(kind: str, name: object, allowed: Iterable[str]) -> FedleakError:
    """Build the error for an unknown name, listing the allowed ones and a close match."""
    allowed = sorted(allowed)
    hint = get_close_matches(str(name), allowed, n=1)
    suggestion = f" Did you mean {hint[0]!r}?" if hint else ""
    return FedleakError(f"unknown {kind} {name!r}; allowed: {', '.join(allowed)}.{suggestion}")


def check_options(kind: str, given: dict, allowed: Iterable[str]) -> None:
    """Raise if ``given`` has keys outside ``allowed`` (used for attack and config options)."""
    allowed = set(allowed)
    extra = sorted(set(given) - allowed)
    if extra:
        raise FedleakError(
            f"unknown option(s) {', '.join(map(repr, extra))} for {kind}; "
            f"allowed: {', '.join(sorted(allowed))}"
        )


def check_int(value: object, what: str, minimum: int = 0, maximum: "int | None" = None) -> int:
    """``value`` as an int in ``[minimum, maximum]``; bools, floats and strings are refused.

    The upper bounds stop absurd sizes (``num_clients: 1e20``) before any memory is spent.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53:
            value = int(value)  # YAML's 1e3 is a float; accept whole numbers
        else:
            raise FedleakError(f"{what} must be an integer, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        span = f"from {minimum} to {maximum}" if maximum is not None else f">= {minimum}"
        raise FedleakError(f"{what} must be an integer {span}, got {value!r}")
    return int(value)


def check_number(value: object, what: str, *, positive: bool = False, minimum: "float | None" = None) -> float:
    """``value`` as a finite float (> 0 when ``positive``, >= ``minimum`` when given); bools refused."""
    import math

    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise FedleakError(f"{what} must be a finite number, got {value!r}")
    if positive and value <= 0:
        raise FedleakError(f"{what} must be positive, got {value!r}")
    if minimum is not None and value < minimum:
        raise FedleakError(f"{what} must be at least {minimum}, got {value!r}")
    return float(value)


def check_bool(value: object, what: str) -> bool:
    """``value`` if it is ``true``/``false`` (YAML booleans), else an error naming ``what``."""
    if not isinstance(value, bool):
        raise FedleakError(f"{what} must be true or false, got {value!r}")
    return value
